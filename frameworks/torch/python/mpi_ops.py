"""Collectives on torch tensors, with the names and arguments of ``horovod.torch``.

Every ``*_async`` function enqueues the operation and returns an integer
handle at once; ``poll(handle)`` says whether it has finished and
``synchronize(handle)`` waits for it and returns its result. The functions
without ``_async`` enqueue and wait. A trailing underscore means in place:
the result overwrites the input tensor.

Tensors travel to the core through DLPack without a copy. The core reads and
writes them on its own thread, so a tensor handed to an ``*_async`` function
must not be modified (or, for in-place forms, read) until the handle is
synchronized; this module keeps every tensor it passed alive until then.

Conventions that go beyond Horovod's documentation:

* Non-contiguous inputs are copied to a contiguous tensor first. For the
  in-place forms the result is then copied back into the caller's tensor
  when the handle is synchronized, so in-place semantics hold for any layout.
* ``bool`` tensors are supported by every collective (Sum and Max are logical
  OR, Min and Product logical AND; Average and scale factors are refused).
* ``root_rank`` of a broadcast is a global rank (what ``rank()`` returns on
  the root), also for a broadcast restricted to a process set; it must be a
  member of that set.
* Unknown handles given to ``poll`` or ``synchronize`` raise ``ValueError``.
* ``Adasum`` reduces CPU tensors of float16, bfloat16, float32 and float64
  over a power-of-two number of ranks; on CUDA tensors it raises
  ``NotImplementedError`` (docs/python.md, "Adasum").
"""

from accord import (
    _core,
    global_process_set,  # noqa: F401  (imported from here by other modules)
)
from accord.ops import Adasum, Average, Max, Min, Product, Sum  # noqa: F401

from . import tensor_args as _args
from .allreduce_ops import (  # noqa: F401
    allreduce_,
    allreduce_async,
    allreduce_async_,
    grouped_allreduce_,
    grouped_allreduce_async,
    grouped_allreduce_async_,
)
from .basics import (  # noqa: F401
    cross_rank,
    cross_size,
    is_initialized,
    local_rank,
    local_size,
    mpi_threads_supported,
    rank,
    size,
)
from .differentiable_ops import (  # noqa: F401
    allgather,
    allreduce,
    alltoall,
    broadcast,
    grouped_allgather,
    grouped_allreduce,
    grouped_reducescatter,
    reducescatter,
)
from .handles import poll, synchronize  # noqa: F401
from .movement_ops import (  # noqa: F401
    allgather_async,
    alltoall_async,
    broadcast_,
    broadcast_async,
    broadcast_async_,
    grouped_allgather_async,
    grouped_reducescatter_async,
    reducescatter_async,
)
from .sparse import sparse_allreduce_async  # noqa: F401
from .tensor_args import ProcessSetLike

__all__ = [
    "Average",
    "Sum",
    "Adasum",
    "Min",
    "Max",
    "Product",
    "allreduce",
    "allreduce_",
    "allreduce_async",
    "allreduce_async_",
    "grouped_allreduce",
    "grouped_allreduce_",
    "grouped_allreduce_async",
    "grouped_allreduce_async_",
    "allgather",
    "allgather_async",
    "grouped_allgather",
    "grouped_allgather_async",
    "broadcast",
    "broadcast_",
    "broadcast_async",
    "broadcast_async_",
    "alltoall",
    "alltoall_async",
    "reducescatter",
    "reducescatter_async",
    "grouped_reducescatter",
    "grouped_reducescatter_async",
    "sparse_allreduce_async",
    "poll",
    "synchronize",
    "join",
    "barrier",
]


# ------------------------------------------------------------ join, barrier


def join(device: int = -1, process_set: ProcessSetLike = global_process_set) -> int:
    """Declares that this rank has no more data; returns when every rank has joined.

    Until then this rank takes part in the other ranks' allreduces (Sum and
    Average) with zeros; any other collective they submit meanwhile raises
    ``HorovodInternalError`` on each of them, naming the joined ranks.
    ``device`` is accepted for compatibility and unused.

    Returns:
        The last rank to join.
    """
    del device
    core_handle = _core.join_async(process_set=_args.set_id(process_set))
    core_handle.wait()
    return int(core_handle.value())


def barrier(process_set: ProcessSetLike = global_process_set) -> None:
    """Returns once every rank of ``process_set`` has called ``barrier``."""
    _core.barrier_async(process_set=_args.set_id(process_set)).wait()
