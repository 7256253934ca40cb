"""accord.torch: data-parallel training for PyTorch, a drop-in for ``horovod.torch``.

A script that does ``import accord.torch as hvd`` and uses Horovod's
documented API runs unchanged::

    import accord.torch as hvd

    hvd.init()
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)

See docs/python.md for what is identical to Horovod and what differs.
"""

from accord import AccordError as HorovodInternalError
from accord import (
    HostsUpdatedInterrupt,
    ProcessSet,
    RequestError,
    add_process_set,
    global_process_set,
    remove_process_set,
)

from . import (
    _needs_torch,  # noqa: F401  (before torch loads: a one-line error that says what to do)
    elastic,  # hvd.elastic, as in horovod.torch
)
from . import process_group as _process_group
from .basics import (
    ccl_built,
    cross_rank,
    cross_size,
    cuda_built,
    ddl_built,
    gloo_built,
    gloo_enabled,
    init,
    is_initialized,
    local_rank,
    local_size,
    metrics,
    mpi_built,
    mpi_enabled,
    mpi_threads_supported,
    nccl_built,
    rank,
    rocm_built,
    shutdown,
    size,
    start_timeline,
    stop_timeline,
)
from .compression import Compression, Compressor
from .functions import allgather_object, broadcast_object
from .mpi_ops import (
    Adasum,
    Average,
    Max,
    Min,
    Product,
    Sum,
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
    poll,
    reducescatter,
    reducescatter_async,
    sparse_allreduce_async,
    synchronize,
)
from .optimizer import DistributedOptimizer, broadcast_optimizer_state, broadcast_parameters
from .sync_batch_norm import SyncBatchNorm

# torch.distributed's backend "accord": dist.init_process_group("accord") (docs/torch_distributed.md).
_process_group.register()
