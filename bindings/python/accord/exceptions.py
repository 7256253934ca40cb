"""Exceptions raised by accord.

``AccordError`` (also available as ``HorovodInternalError``) is a
``RuntimeError``: a collective failed, the ranks disagreed about it (dtype,
shape, op, root rank, a name submitted twice), a rank failed, its process set
was removed, or accord was shut down. Its message names the tensor and the
ranks involved, and its ``code`` attribute holds the core's status code
(``"MISMATCH"``, ``"SHUT_DOWN"``, ``"ABORTED"``, ``"INTERNAL"``).

A request refused when it is made (an invalid argument, a name already in
flight on this rank, an operation the collective does not support, a call
before ``init()``) raises ``RequestError``: a ``ValueError`` that is also a
``RuntimeError``, since Horovod raises either for such requests and code
written for it catches the one it raises. A wait that runs out of time
raises ``TimeoutError``, and a feature this build lacks raises
``NotImplementedError``.

``HostsUpdatedInterrupt`` is elastic training's (``accord.torch.elastic``):
the hosts of the job changed, and every rank raises it at the same commit.
"""

from enum import IntFlag

from accord._core import AccordError, RequestError

HorovodInternalError = AccordError


class HostUpdateResult(IntFlag):
    """What changed in the job's hosts: nothing, some removed, some added, or both."""

    no_update = 0
    removed = 1
    added = 2
    mixed = removed | added


class HostsUpdatedInterrupt(RuntimeError):
    """The set of hosts in the job changed (elastic training).

    Raised on every rank at the same ``State.commit()`` or
    ``State.check_host_updates()``. ``skip_sync`` is True when hosts were only
    removed: the ranks that remain hold the same committed state, so the
    decorated function restarts without synchronizing it again.
    """

    def __init__(self, skip_sync: bool = False):
        super().__init__("the hosts of the job changed" + (" (removed only)" if skip_sync else ""))
        self.skip_sync = skip_sync


__all__ = ["AccordError", "HorovodInternalError", "HostUpdateResult", "HostsUpdatedInterrupt", "RequestError"]
