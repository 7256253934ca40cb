"""accord: collective communication for data-parallel training.

The framework-neutral package: lifecycle, rank queries, process sets, and
collectives on numpy arrays. ``accord.torch`` is the drop-in for
``horovod.torch``; ``accord._core`` is the low-level module both build on.
"""

from accord import _core
from accord.basics import (
    build_info,
    cross_rank,
    cross_size,
    cuda_built,
    gloo_built,
    gloo_enabled,
    init,
    is_initialized,
    local_rank,
    local_size,
    metrics,
    mpi_built,
    mpi_enabled,
    mpi_thread_level,
    mpi_threads_supported,
    nccl_built,
    rank,
    shutdown,
    size,
    start_timeline,
    stop_timeline,
)
from accord.collectives import (
    allgather,
    allgather_async,
    allreduce,
    allreduce_,
    allreduce_async,
    allreduce_async_,
    alltoall,
    alltoall_async,
    barrier,
    broadcast,
    broadcast_,
    broadcast_async,
    broadcast_async_,
    grouped_allgather,
    grouped_allgather_async,
    grouped_allreduce,
    grouped_allreduce_,
    grouped_allreduce_async,
    grouped_allreduce_async_,
    grouped_reducescatter,
    grouped_reducescatter_async,
    join,
    reducescatter,
    reducescatter_async,
)
from accord.exceptions import (
    AccordError,
    HorovodInternalError,
    HostsUpdatedInterrupt,
    HostUpdateResult,
    RequestError,
)
from accord.handles import Handle, poll, synchronize
from accord.ops import Adasum, Average, Max, Min, Product, Sum
from accord.process_sets import ProcessSet, add_process_set, global_process_set, remove_process_set

__version__ = _core.__version__
