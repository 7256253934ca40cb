"""Elastic training's framework-neutral parts: ``State``, ``ObjectState`` and ``run_fn``.

A training function decorated by ``run`` (``accord.torch.elastic.run``)
keeps its progress in a ``State``: ``commit()`` saves it and checks whether
the job's hosts changed, ``restore()`` goes back to the last commit, and
``sync()`` gives every rank rank 0's. The names and the behaviour are
Horovod's (``horovod.common.elastic``); docs/elastic.md says what differs.

Threads: a ``State`` belongs to the training thread. ``on_hosts_updated``
may be called from any thread (it only queues the news).
"""

import functools
import queue
from typing import Any, Callable, Dict, Iterable

import numpy as np

from accord import collectives
from accord.exceptions import HorovodInternalError, HostsUpdatedInterrupt, HostUpdateResult
from accord.ops import Max


class State:
    """State kept across the resets of elastic training.

    Args:
        bcast_object: broadcasts a picklable object from rank 0 to every rank.
        get_rank: returns this process's rank.
    """

    def __init__(self, bcast_object: Callable[[Any], Any], get_rank: Callable[[], int]):
        self._bcast_object = bcast_object
        self._rank = get_rank
        self._host_messages: "queue.Queue" = queue.Queue()
        self._last_updated_timestamp = 0
        self._reset_callbacks = []

    def register_reset_callbacks(self, callbacks: Iterable[Callable[[], None]]) -> None:
        """Adds functions to call after every reset (e.g. to scale the learning rate to the new size)."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self) -> None:
        """Called by ``run`` after a reset: drops old news of hosts, resets, then runs the callbacks."""
        self._host_messages = queue.Queue()
        self.reset()
        for callback in self._reset_callbacks:
            callback()

    def on_hosts_updated(self, timestamp: float, update_res: HostUpdateResult) -> None:
        """Queues news that the hosts changed at ``timestamp``; the next commit acts on it."""
        self._host_messages.put((timestamp, HostUpdateResult(update_res)))

    def commit(self) -> None:
        """Saves the state (the point ``restore`` returns to), then ``check_host_updates()``.

        A commit copies the state (from the GPU where it lives there), so
        committing every few batches rather than every batch trades the work
        lost to a failure against the time each step spends committing.
        """
        self.save()
        self.check_host_updates()

    def check_host_updates(self) -> None:
        """Raises ``HostsUpdatedInterrupt`` on every rank if any rank has news of changed hosts.

        The ranks agree in one small collective (a Max allreduce of the newest
        timestamp and of what changed), so they raise at the same commit or
        none does, whichever rank the news reached first.
        """
        previous = self._last_updated_timestamp
        newest, update = previous, HostUpdateResult.no_update
        while not self._host_messages.empty():
            timestamp, result = self._host_messages.get()
            if timestamp > previous:
                newest = max(newest, timestamp)
                update |= result
        mine = np.array(
            [newest, bool(update & HostUpdateResult.removed), bool(update & HostUpdateResult.added)],
            dtype=np.float64,
        )
        agreed = collectives.allreduce(mine, op=Max, name="accord.elastic.check_host_updates")
        self._last_updated_timestamp = agreed[0]
        if agreed[0] > previous:
            removed_only = bool(agreed[1]) and not bool(agreed[2])
            raise HostsUpdatedInterrupt(removed_only)

    def save(self) -> None:
        """Saves the state in memory."""
        raise NotImplementedError()

    def restore(self) -> None:
        """Returns to the last saved state, undoing what changed since."""
        raise NotImplementedError()

    def sync(self) -> None:
        """Gives every rank rank 0's state."""
        raise NotImplementedError()

    def reset(self) -> None:
        """Adapts the state to a new set of ranks, before it is synchronized (nothing by default)."""


class ObjectState(State):
    """State of plain picklable objects, given as keyword arguments and kept as attributes.

    Args:
        bcast_object: broadcasts a picklable object from rank 0 to every rank.
        get_rank: returns this process's rank.
        kwargs: the objects; ``state.<name>`` reads and writes each.
    """

    def __init__(self, bcast_object: Callable[[Any], Any], get_rank: Callable[[], int], **kwargs: Any):
        self._saved_state: Dict[str, Any] = kwargs
        self._set_attrs()
        super().__init__(bcast_object=bcast_object, get_rank=get_rank)

    def save(self) -> None:
        self._saved_state = {name: getattr(self, name) for name in self._saved_state}

    def restore(self) -> None:
        self._set_attrs()

    def sync(self) -> None:
        if self._saved_state:
            self._saved_state = self._bcast_object(self._saved_state)
            self._set_attrs()

    def _set_attrs(self) -> None:
        for name, value in self._saved_state.items():
            setattr(self, name, value)


def run_fn(func: Callable[..., Any], reset: Callable[[], None]) -> Callable[..., Any]:
    """Wraps ``func(state, ...)`` so that it starts again after a reset.

    Each attempt first syncs the state from rank 0 (unless the hosts were
    only removed: the ranks left hold the same commit), then calls ``func``.
    ``HostsUpdatedInterrupt`` resets (``reset()``, then ``state.on_reset()``)
    and starts again from the state as it is. ``HorovodInternalError`` (a
    collective failed) ends the call: a failed rank cannot be replaced inside
    this job (docs/elastic.md).
    """

    @functools.wraps(func)
    def wrapper(state: State, *args: Any, **kwargs: Any) -> Any:
        skip_sync = False
        while True:
            if not skip_sync:
                state.sync()
            try:
                return func(state, *args, **kwargs)
            except HorovodInternalError:
                raise
            except HostsUpdatedInterrupt as interrupt:
                skip_sync = interrupt.skip_sync
            reset()
            state.on_reset()

    return wrapper


__all__ = ["ObjectState", "State", "run_fn"]
