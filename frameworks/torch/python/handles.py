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
    they complete, how to build the result once they have, and whether the
    result's tensors are known before then (their memory was given at
    enqueue, as for allreduce and broadcast)."""

    __slots__ = ("core_handles", "keep_alive", "finish", "results_known")

    def __init__(
        self, core_handles: List[Any], keep_alive: Tuple, finish: Callable[[], Any], results_known: bool
    ):
        self.core_handles = core_handles
        self.keep_alive = keep_alive
        self.finish = finish
        self.results_known = results_known


# handle -> _Pending, or, for the common single-tensor operations, a
# (core handle, result) tuple: the core handle keeps its tensors alive itself
# and the result is known when the operation is enqueued. Single dict
# operations and next() on a count are atomic under the GIL, so the table
# needs no lock.
_pending: Dict[int, Union[_Pending, Tuple[Any, Any]]] = {}
_handle_ids = itertools.count(1)


def register(
    core_handles: List[Any], keep_alive: Tuple, finish: Callable[[], Any], results_known: bool = False
) -> int:
    """Enters an operation in the table and returns its new handle."""
    handle = next(_handle_ids)
    _pending[handle] = _Pending(core_handles, keep_alive, finish, results_known)
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
    return ValueError(
        f"unknown handle {handle!r}: it was never returned by an accord.torch "
        f"*_async function, or it has already been synchronized"
    )


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


def _wait_on_current_stream(core_handle: Any) -> None:
    """Makes the current CUDA stream wait for the operation (the host waits
    only until it is queued on the GPU). Without CUDA in use the operation
    is on CPU tensors: a plain wait."""
    import torch  # loaded already by accord.torch

    if not torch.cuda.is_initialized():
        core_handle.wait()
        return
    core_handle.wait_on_stream(torch.cuda.current_stream().cuda_stream)


def synchronize(handle: int, blocking: bool = True) -> Any:
    """Waits for the operation behind ``handle`` and returns its result.

    The result is the output tensor (in-place forms: the input tensor), a
    list of tensors for grouped operations, ``(output, received_splits)`` for
    alltoall, and a sparse tensor for ``sparse_allreduce_async``. The handle
    is released: synchronizing it again raises ``ValueError``.

    Args:
        handle: from an ``*_async`` function.
        blocking: ``True`` (Horovod's behaviour) blocks the host until the
            operation has finished. ``False``, for CUDA tensors, blocks only
            until it is queued on the GPU and makes the current CUDA stream
            wait for it, as ``torch.distributed``'s ``Work.wait()`` does for
            NCCL: later work on that stream sees the result, the host runs
            ahead. It applies where the result's memory is known at enqueue
            (allreduce and broadcast, grouped or not); allgather, alltoall
            and reducescatter block as with ``True``. For CPU tensors it is
            ``True``. An error that surfaces after the operation was queued
            is raised by a later blocking call, or stops the job.

    Raises:
        HorovodInternalError: the operation failed, e.g. the ranks disagreed
            about its shape or dtype, a rank failed, or accord was shut down.
        ValueError: ``handle`` is unknown or was already synchronized, or
            the operation was invalid on this rank.
    """
    entry = _pending.get(handle)
    if type(entry) is tuple:
        try:
            if blocking:
                entry[0].wait()
            else:
                _wait_on_current_stream(entry[0])
        finally:
            _pending.pop(handle, None)
        return entry[1]
    if entry is None:
        raise _unknown(handle)
    try:
        for core_handle in entry.core_handles:
            if blocking or not entry.results_known:
                core_handle.wait()
            else:
                _wait_on_current_stream(core_handle)
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
