"""Lifecycle, rank queries and build facts of ``accord.torch``.

Every function has the name and meaning of its ``horovod.torch``
counterpart. Most are the framework-neutral ``accord`` package's own; rank
queries raise ``ValueError`` before ``init()``, as Horovod's do.
"""
import threading
import warnings

from accord.basics import (cross_rank, cross_size, cuda_built, gloo_built, gloo_enabled, init,
                           is_initialized, local_rank, local_size, mpi_built, mpi_enabled,
                           mpi_threads_supported, nccl_built, rank, shutdown, size)

__all__ = [
    "init", "shutdown", "is_initialized",
    "size", "local_size", "cross_size", "rank", "local_rank", "cross_rank",
    "mpi_threads_supported", "mpi_enabled", "mpi_built", "gloo_enabled", "gloo_built",
    "nccl_built", "cuda_built", "rocm_built", "ddl_built", "ccl_built",
    "start_timeline", "stop_timeline",
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


_timeline_warned = False
_timeline_lock = threading.Lock()


def _warn_timeline_once() -> None:
    global _timeline_warned
    with _timeline_lock:
        if _timeline_warned:
            return
        _timeline_warned = True
    warnings.warn("accord.torch: the timeline is not available in this build; "
                  "start_timeline() and stop_timeline() do nothing", RuntimeWarning, stacklevel=3)


def start_timeline(file_path: str, mark_cycles: bool = False) -> None:
    """Would start recording a timeline to ``file_path``; does nothing yet.

    Warns once per process that the timeline is not available.
    """
    del file_path, mark_cycles
    _warn_timeline_once()


def stop_timeline() -> None:
    """Would stop recording the timeline; does nothing yet (warns once)."""
    _warn_timeline_once()
