"""Lifecycle, rank queries and build facts."""

from typing import Any, Dict, Optional, Sequence, Union

from accord import _core
from accord import process_sets as _process_sets
from accord._core import RequestError
from accord.process_sets import ProcessSet

__all__ = [
    "init",
    "shutdown",
    "is_initialized",
    "rank",
    "size",
    "local_rank",
    "local_size",
    "cross_rank",
    "cross_size",
    "mpi_threads_supported",
    "mpi_thread_level",
    "build_info",
    "metrics",
    "start_timeline",
    "stop_timeline",
    "mpi_built",
    "mpi_enabled",
    "cuda_built",
    "nccl_built",
    "gloo_built",
    "gloo_enabled",
]


def init(comm: Any = None, process_sets: Optional[Sequence[Union[ProcessSet, Sequence[int]]]] = None) -> None:
    """Initialises accord. Every rank calls it, with the same arguments.

    Initialises MPI (requesting ``MPI_THREAD_MULTIPLE``) unless the program
    already did, for instance through mpi4py. Does nothing if accord is
    already initialised. After ``shutdown()`` it may be called again.

    Args:
        comm: accepted for compatibility with Horovod; only ``None``
            (``MPI_COMM_WORLD``) is supported.
        process_sets: process sets to create now, each a ``ProcessSet`` or a
            list of global ranks. They get ids 1, 2, ... in this order.

    Raises:
        NotImplementedError: ``comm`` is given.
        ValueError: a process set is invalid (ranks out of range, duplicates).
        AccordError: the ranks disagree about the configuration or the sets.
    """
    if comm is not None:
        raise NotImplementedError(
            "accord.init(comm=...) is not supported: accord runs on every process the "
            "launcher started (MPI_COMM_WORLD); use process sets for subsets of ranks"
        )
    if _core.is_initialized():
        return
    sets = [_process_sets._as_process_set(s) for s in (process_sets or [])]
    for s in sets:
        if s.process_set_id is not None:
            raise ValueError(f"{s!r} is already registered with accord")
    _core.init([s.ranks for s in sets])
    _process_sets._registered_at_init(sets)


def shutdown() -> None:
    """Shuts accord down on every rank.

    Operations still in flight fail with ``AccordError``; process sets other
    than the global one are forgotten. ``init()`` may be called again.
    """
    _core.shutdown()
    _process_sets._forget_all()


def is_initialized() -> bool:
    """Whether accord is initialised (and not shut down)."""
    return _core.is_initialized()


def _checked(value: int) -> int:
    if value < 0:
        raise RequestError("accord is not initialised: call hvd.init() (accord.init()) first")
    return value


def rank() -> int:
    """This process's global rank, from 0 to ``size() - 1``."""
    return _checked(_core.rank())


def size() -> int:
    """The number of processes in the job."""
    return _checked(_core.size())


def local_rank() -> int:
    """This process's rank among the processes on its host."""
    return _checked(_core.local_rank())


def local_size() -> int:
    """The number of processes on this host."""
    return _checked(_core.local_size())


def cross_rank() -> int:
    """This process's rank among the processes with its local rank (one per host)."""
    return _checked(_core.cross_rank())


def cross_size() -> int:
    """The number of hosts that have a process with this process's local rank."""
    return _checked(_core.cross_size())


def mpi_threads_supported() -> bool:
    """Whether MPI provides ``MPI_THREAD_MULTIPLE``.

    Raises:
        ValueError: before ``init()``.
    """
    _checked(_core.rank())
    return bool(_core.mpi_threads_supported())


def mpi_thread_level() -> int:
    """The MPI thread level provided (``MPI_THREAD_SINGLE`` = 0 ... ``MPI_THREAD_MULTIPLE`` = 3)."""
    return _checked(_core.mpi_thread_level())


def build_info() -> Dict[str, Any]:
    """What this build contains: ``{"version": str, "mpi": bool, "cuda": bool, "nccl": bool,
    "cuda_version": str, "nccl_version": str}`` (versions empty when not built)."""
    return dict(_core.build_info())


def metrics() -> Dict[str, Any]:
    """Counters of this process since the last :func:`init` (all zero before it).

    Returns a dict with the keys ``collectives`` (collective calls that moved
    tensor data, one per fused batch), ``tensors`` (tensors they carried),
    ``bytes`` (bytes of this rank's inputs to them), ``fusion_ratio``
    (tensors per collective), ``negotiation_rounds``, ``cache_hits`` and
    ``cache_misses`` (requests announced through the response cache, and
    cacheable requests announced in full), ``cache_hit_rate``,
    ``negotiation_seconds`` and ``collective_seconds`` (time the coordinator
    thread spent negotiating and running collectives), ``driven_iterations``
    (coordinator iterations run by a thread waiting for its result:
    ``ACCORD_FAST_PATH``), ``carried_allreduces`` (small allreduces whose
    inputs travelled with the negotiation round: ``ACCORD_CARRY_SMALL_ALLREDUCE``).
    Counts are ints, the
    rest floats. See docs/troubleshooting.md, "Metrics".
    """
    return dict(_core.metrics())


def start_timeline(file_path: str, mark_cycles: bool = False) -> None:
    """Starts writing a timeline of every operation to ``file_path``.

    Rank 0 writes a Chrome trace-event file (open it in Perfetto or
    chrome://tracing); the other ranks do nothing. ``mark_cycles`` also marks
    each coordinator iteration that executed something. Replaces a running
    timeline. Raises ``ValueError`` if rank 0 cannot create the file. Setting
    ``ACCORD_TIMELINE`` starts one at :func:`init`.
    """
    _core.start_timeline(str(file_path), bool(mark_cycles))


def stop_timeline() -> None:
    """Flushes and closes the timeline (:func:`shutdown` does this too)."""
    _core.stop_timeline()


def mpi_built() -> bool:
    """Whether accord was built with MPI (always: MPI is its CPU backend)."""
    return bool(_core.build_info()["mpi"])


def mpi_enabled() -> bool:
    """Whether MPI is in use: once accord is initialised (False before ``init()``, as Horovod's)."""
    return mpi_built() and _core.is_initialized()


def cuda_built() -> bool:
    """Whether accord was built with CUDA."""
    return bool(_core.build_info()["cuda"])


def nccl_built() -> int:
    """NCCL's version code (e.g. 22809 for 2.28.9; 2708 for 2.7.8) when accord was built with NCCL, else 0.

    As Horovod's, it is an int that is true exactly when NCCL is built, so
    ``hvd.nccl_built() and hvd.nccl_built() < 2700`` works as written for
    Horovod. The code is that of the NCCL library loaded at run time (the one
    accord was built against where none can be loaded), in NCCL's own
    encoding: ``major*1000 + minor*100 + patch`` up to 2.8,
    ``major*10000 + minor*100 + patch`` from 2.9 on.
    """
    info = _core.build_info()
    if not info["nccl"]:
        return 0
    return _nccl_version_code(info["nccl_version"])


def _nccl_version_code(version: str) -> int:
    """NCCL_VERSION(major, minor, patch) of a version string such as "NCCL 2.28.9"."""
    major, minor, patch = (int(part) for part in version.split()[-1].split(".")[:3])
    if major <= 2 and minor <= 8:
        return major * 1000 + minor * 100 + patch
    return major * 10000 + minor * 100 + patch


def gloo_built() -> bool:
    """Always False: accord has no Gloo backend."""
    return False


def gloo_enabled() -> bool:
    """Always False: accord has no Gloo backend."""
    return False
