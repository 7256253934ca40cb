"""Elastic training for accord.torch, with Horovod's API (``hvd.elastic``).

``run`` decorates a training function whose first argument is a ``State``
(usually a ``TorchState``); ``ElasticSampler`` partitions a dataset and, after
a reset, only what is left of the epoch. docs/elastic.md says how it works and
what differs from Horovod.
"""

from accord.elastic import ObjectState, State, run_fn
from accord.exceptions import HorovodInternalError, HostsUpdatedInterrupt, HostUpdateResult

from ..basics import init, shutdown
from .sampler import ElasticSampler
from .state import TorchState


def _reset() -> None:
    shutdown()
    init()


def run(func):
    """Decorator for an elastic training function ``func(state, *args, **kwargs)``.

    Every rank syncs ``state`` from rank 0, then calls ``func``. When the
    hosts change (``HostsUpdatedInterrupt`` at a commit, on every rank
    together), accord is shut down and initialized again, ``state.on_reset()``
    runs the reset callbacks, and ``func`` starts again from the state as it
    is; a collective that fails (``HorovodInternalError``) ends the call.
    ``func`` must not begin with a collective of its own: ranks that joined
    would meet it while the others sync.

    Under accordrun's elastic mode every generation of ranks is a new set of
    processes: rank 0 first loads the commit the driver names, every rank
    syncs from it, and a change of hosts or a failed collective ends the
    process with status 75 for the driver to start the next generation
    (``accord.elastic.run_fn``).
    """
    return run_fn(func, _reset)


__all__ = [
    "ElasticSampler",
    "HorovodInternalError",
    "HostUpdateResult",
    "HostsUpdatedInterrupt",
    "ObjectState",
    "State",
    "TorchState",
    "run",
]
