"""Lifecycle, rank queries and build facts of ``accord.torch``.

Every function has the name and meaning of its ``horovod.torch``
counterpart. Most are the framework-neutral ``accord`` package's own; rank
queries raise ``ValueError`` before ``init()``, as Horovod's do.
"""

from accord.basics import (
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
    mpi_threads_supported,
    nccl_built,
    rank,
    shutdown,
    size,
    start_timeline,
    stop_timeline,
)

__all__ = [
    "init",
    "shutdown",
    "is_initialized",
    "size",
    "local_size",
    "cross_size",
    "rank",
    "local_rank",
    "cross_rank",
    "mpi_threads_supported",
    "mpi_enabled",
    "mpi_built",
    "gloo_enabled",
    "gloo_built",
    "nccl_built",
    "cuda_built",
    "rocm_built",
    "ddl_built",
    "ccl_built",
    "start_timeline",
    "stop_timeline",
    "metrics",
]


def rocm_built() -> bool:
    """Always False: accord has no ROCm build."""
    return False


def ddl_built() -> bool:
    """Always False: accord has no IBM DDL backend."""
    return False


def ccl_built() -> bool:
    """Always False: accord has no oneCCL backend."""
    return False
