"""The integer handles of ``accord.torch``'s asynchronous operations.

Like Horovod's, a handle is an int. A module-level table maps it to the core
handles of the operation, the tensors that must stay alive until they
complete, and a function that builds the result (the output tensor, a list,
a tuple) once they have. ``synchronize`` removes the entry.

Thread safety: every function may be called from any thread.
"""
import itertools
from typing import Any, Callable, Dict, List, Tuple, Union

__all__ = ["poll", "synchronize"]


class _Pending:
    """An operation in flight: its core handles, what must stay alive until
    they complete, and how to build the result once they have."""

    __slots__ = ("core_handles", "keep_alive", "finish")

    def __init__(self, core_handles: List[Any], keep_alive: Tuple, finish: Callable[[], Any]):
        self.core_handles = core_handles
        self.keep_alive = keep_alive
        self.finish = finish


# handle -> _Pending, or, for the common single-tensor operations, a
# (core handle, result) tuple: the core handle keeps its tensors alive itself
# and the result is known when the operation is enqueued. Single dict
# operations and next() on a count are atomic under the GIL, so the table
# needs no lock.
_pending: Dict[int, Union[_Pending, Tuple[Any, Any]]] = {}
_handle_ids = itertools.count(1)


def register(core_handles: List[Any], keep_alive: Tuple, finish: Callable[[], Any]) -> int:
    """Enters an operation in the table and returns its new handle."""
    handle = next(_handle_ids)
    _pending[handle] = _Pending(core_handles, keep_alive, finish)
    return handle


def track(entry: Tuple[Any, Any]) -> int:
    """Enters ``(core_handle, result)`` in the table and returns its new handle.

    For operations with one core handle whose result is known up front (an
    in-place tensor, or an output allocated before the enqueue).
    """
    handle = next(_handle_ids)
    _pending[handle] = entry
    return handle


def _unknown(handle: Any) -> ValueError:
    return ValueError(f"unknown handle {handle!r}: it was never returned by an accord.torch "
                      f"*_async function, or it has already been synchronized")


def poll(handle: int) -> bool:
    """Whether the operation behind ``handle`` has finished (successfully or not).

    Never blocks. A finished handle still has to be passed to ``synchronize``
    to get its result (or its error).
    """
    entry = _pending.get(handle)
    if type(entry) is tuple:
        return entry[0].poll()
    if entry is None:
        raise _unknown(handle)
    return all(h.poll() for h in entry.core_handles)


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
    entry = _pending.get(handle)
    if type(entry) is tuple:
        try:
            entry[0].wait()
        finally:
            _pending.pop(handle, None)
        return entry[1]
    if entry is None:
        raise _unknown(handle)
    try:
        for core_handle in entry.core_handles:
            core_handle.wait()
    finally:
        _pending.pop(handle, None)
    return entry.finish()


class CallableHandle(int):
    """An integer handle that can also be called to synchronize it.

    Horovod's ``sparse_allreduce_async`` returns a function to call for the
    result; this handle works both that way and with ``synchronize``/``poll``.
    """

    def __call__(self) -> Any:
        return synchronize(self)
