"""The integer handles of ``accord.torch``'s asynchronous operations.

Like Horovod's, a handle is an int. A module-level table maps it to the core
handles of the operation, the tensors that must stay alive until they
complete, and a function that builds the result (the output tensor, a list,
a tuple) once they have. ``synchronize`` removes the entry.

Thread safety: every function may be called from any thread.
"""
import itertools
import threading
from typing import Any, Callable, Dict, List, Tuple

__all__ = ["poll", "synchronize"]


class _Pending:
    """An operation in flight: its core handles, what must stay alive until
    they complete, and how to build the result once they have."""

    __slots__ = ("core_handles", "keep_alive", "finish")

    def __init__(self, core_handles: List[Any], keep_alive: Tuple, finish: Callable[[], Any]):
        self.core_handles = core_handles
        self.keep_alive = keep_alive
        self.finish = finish


_pending: Dict[int, _Pending] = {}
_pending_lock = threading.Lock()
_handle_ids = itertools.count(1)


def register(core_handles: List[Any], keep_alive: Tuple, finish: Callable[[], Any]) -> int:
    """Enters an operation in the table and returns its new handle."""
    handle = next(_handle_ids)
    with _pending_lock:
        _pending[handle] = _Pending(core_handles, keep_alive, finish)
    return handle


def _lookup(handle: int) -> _Pending:
    with _pending_lock:
        entry = _pending.get(handle)
    if entry is None:
        raise ValueError(f"unknown handle {handle!r}: it was never returned by an accord.torch "
                         f"*_async function, or it has already been synchronized")
    return entry


def poll(handle: int) -> bool:
    """Whether the operation behind ``handle`` has finished (successfully or not).

    Never blocks. A finished handle still has to be passed to ``synchronize``
    to get its result (or its error).
    """
    return all(h.poll() for h in _lookup(handle).core_handles)


def synchronize(handle: int) -> Any:
    """Waits for the operation behind ``handle`` and returns its result.

    The result is the output tensor (in-place forms: the input tensor), a
    list of tensors for grouped operations, ``(output, received_splits)`` for
    alltoall, and a sparse tensor for ``sparse_allreduce_async``. The handle
    is released: synchronizing it again raises ``ValueError``.

    Raises:
        HorovodInternalError: the operation failed, e.g. the ranks disagreed
            about its shape or dtype, a rank failed, or accord was shut down.
        ValueError: ``handle`` is unknown or was already synchronized, or
            the operation was invalid on this rank.
    """
    entry = _lookup(handle)
    try:
        for core_handle in entry.core_handles:
            core_handle.wait()
    finally:
        with _pending_lock:
            _pending.pop(handle, None)
    return entry.finish()


class CallableHandle(int):
    """An integer handle that can also be called to synchronize it.

    Horovod's ``sparse_allreduce_async`` returns a function to call for the
    result; this handle works both that way and with ``synchronize``/``poll``.
    """

    def __call__(self) -> Any:
        return synchronize(self)
