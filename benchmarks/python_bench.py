#!/usr/bin/python3
"""python_bench: accord.torch beside mpi4py and torch.distributed (gloo), in one run.

    mpirun -np 2 --bind-to core /usr/bin/python3 benchmarks/python_bench.py [--flag=value ...]

accord must be importable (PYTHONPATH=<build>/python, or an installed
package). See docs/benchmarks.md ("Python") for the workloads and the method.

Order of a run:
  1. One BLAS thread per rank: OMP_NUM_THREADS / OPENBLAS_NUM_THREADS /
     MKL_NUM_THREADS are set to 1 before torch loads, and torch uses one
     thread. The BLAS library torch loaded is found and a matmul is timed;
     a slow or reference BLAS gets a loud warning.
  2. accord.torch is initialised first (it initialises MPI with
     MPI_THREAD_MULTIPLE); then mpi4py attaches to that MPI, and
     torch.distributed starts a gloo group with accord's rank and size.
  3. W1, W2, W3, W4, each taking turns with its references.
  4. The table; the exit status is non-zero if any rank saw a wrong result.
Rank 0 prints an "ACCORD_PYBENCH {json}" line for every figure as soon as it
is measured, and the table at the end.
"""

import argparse
import os
import re
import sys
import time

_THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
_OVERRIDDEN = {k: os.environ[k] for k in _THREAD_VARIABLES if k in os.environ and os.environ[k] != "1"}
for _key in _THREAD_VARIABLES:  # before torch and numpy load their BLAS
    os.environ[_key] = "1"

from python_bench_util import (  # noqa: E402
    Checker,
    Reporter,
    import_accord_torch,
    load_average,
    median,
    mib_sizes,
    non_negative_int,
    positive_int,
    workload_list,
)

WORKLOADS = ("w1", "w2", "w3", "w4")


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def parse_options(argv):
    p = argparse.ArgumentParser(
        prog="python_bench.py",
        description="accord.torch beside mpi4py and torch.distributed (gloo). Run under "
        "mpirun -np N --bind-to core /usr/bin/python3 benchmarks/python_bench.py",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument(
        "--workloads",
        type=workload_list(WORKLOADS),
        default=list(WORKLOADS),
        help="which workloads run, comma-separated",
    )
    p.add_argument(
        "--reference",
        choices=("alone", "beside"),
        default="alone",
        help="references run with accord shut down (alone) or beside idle accord",
    )
    p.add_argument("--w1-iters", type=positive_int, default=2000, help="W1 timed ops per side")
    p.add_argument(
        "--w1-warmup",
        type=non_negative_int,
        default=200,
        help="W1 untimed ops per side before the first round (10 in later rounds)",
    )
    p.add_argument("--w1-block", type=positive_int, default=100, help="W1 timed ops per side per round")
    p.add_argument(
        "--w1-target-extra-us",
        type=_positive_float,
        default=5.0,
        help="W1 target: accord's median at most mpi4py's plus this many microseconds",
    )
    p.add_argument("--w2-sizes-mib", type=mib_sizes, default=[1, 16, 64], help="W2 sizes in MiB")
    p.add_argument(
        "--w2-reps", type=positive_int, default=20, help="W2 timed ops per side per size (in rounds of 4)"
    )
    p.add_argument("--w2-warmup", type=non_negative_int, default=1, help="W2 untimed ops per side per round")
    p.add_argument("--w3-tensors", type=positive_int, default=256, help="W3 tensors per step")
    p.add_argument("--w3-elems", type=positive_int, default=4096, help="W3 float32 elements per tensor")
    p.add_argument("--w3-steps", type=positive_int, default=50, help="W3 timed steps per side per round")
    p.add_argument("--w3-reps", type=positive_int, default=5, help="W3 rounds")
    p.add_argument(
        "--w3-warmup-steps", type=non_negative_int, default=5, help="W3 untimed steps per side per round"
    )
    p.add_argument(
        "--w3-gloo-steps",
        type=positive_int,
        default=3,
        help="W3 timed steps of the gloo reference per round (after 1 untimed step); "
        "gloo takes ~1-3 ms per 16 KiB tensor here, so it gets fewer steps",
    )
    p.add_argument(
        "--w3-target-ratio",
        type=_positive_float,
        default=0.8,
        help="W3 target: accord's steps/s at least this times the hand-packed loop's",
    )
    p.add_argument("--w4-layers", type=positive_int, default=8, help="W4 Linear+ReLU layers")
    p.add_argument("--w4-width", type=positive_int, default=1024, help="W4 layer width")
    p.add_argument("--w4-batch", type=positive_int, default=64, help="W4 samples per rank per step")
    p.add_argument("--w4-steps", type=positive_int, default=10, help="W4 timed steps per side per round")
    p.add_argument("--w4-rounds", type=positive_int, default=5, help="W4 rounds")
    p.add_argument(
        "--w4-warmup-steps", type=non_negative_int, default=2, help="W4 untimed steps per side per round"
    )
    p.add_argument("--w4-lr", type=_positive_float, default=0.01, help="W4 SGD learning rate")
    p.add_argument(
        "--w4-target-efficiency",
        type=_positive_float,
        default=0.90,
        help="W4 target: accord's scaling efficiency at least this",
    )
    p.add_argument(
        "--np1-samples-per-s",
        type=_positive_float,
        default=None,
        help="W4's single-process samples/s, measured elsewhere; default: rank 0 "
        "measures it in every round while the other ranks sleep",
    )
    p.add_argument(
        "--verbose", type=non_negative_int, default=0, help="1: rank 0 also prints every round's figures"
    )
    p.add_argument("--seed", type=positive_int, default=1234, help="seed of W4's model and data")
    p.add_argument("--master-addr", default="127.0.0.1", help="gloo's rendezvous address")
    p.add_argument(
        "--master-port",
        type=non_negative_int,
        default=0,
        help="gloo's rendezvous port; 0: rank 0 picks a free one",
    )
    return p.parse_args(argv)


def blas_report(torch) -> tuple:
    """(description, warning or None) of the BLAS torch uses, with a timed matmul."""
    a = torch.randn(64, 1024)
    w = torch.randn(1024, 1024)
    for _ in range(3):
        torch.mm(a, w)
    times = []
    for _ in range(20):
        start = time.perf_counter()
        torch.mm(a, w)
        times.append(time.perf_counter() - start)
    gflops = 2 * 64 * 1024 * 1024 / median(times) / 1e9

    libs = set()
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split()[-1]
                base = os.path.basename(path)
                if any(k in base for k in ("blas", "mkl_", "blis", "lapack")):
                    libs.add(os.path.realpath(path))
    except OSError:
        pass
    joined = " ".join(sorted(libs))
    if "openblas" in joined:
        kind = "OpenBLAS"
    elif "mkl" in joined:
        kind = "MKL"
    elif "blis" in joined:
        kind = "BLIS"
    elif re.search(r"/blas/libblas", joined):
        kind = "reference BLAS (netlib)"
    else:
        kind = "unknown"
    info = re.search(r"BLAS_INFO=([^,\s]+)", torch.__config__.show())
    text = (
        f"BLAS: {kind} (torch BLAS_INFO={info.group(1) if info else '?'}; "
        f"{', '.join(sorted(libs)) or 'no BLAS library mapped'}); "
        f"64x1024 @ 1024x1024 matmul: {gflops:.1f} GFLOP/s on {torch.get_num_threads()} "
        "thread(s)"
    )
    warning = None
    if kind not in ("OpenBLAS", "MKL", "BLIS") or gflops < 5.0:
        warning = (
            f"torch's BLAS looks slow ({kind}, {gflops:.1f} GFLOP/s): W4's compute is "
            "not representative. Point libblas.so.3 at OpenBLAS (update-alternatives)."
        )
    return text, warning


def pick_port(address: str) -> int:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((address, 0))
        return s.getsockname()[1]


def main(argv) -> int:
    opts = parse_options(argv)

    import torch

    torch.set_num_threads(1)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    blas_text, blas_warning = blas_report(torch)

    hvd = import_accord_torch("python_bench")
    if hvd is None:
        return 2
    hvd.init()
    if not hvd.mpi_threads_supported():
        print(
            "python_bench needs MPI_THREAD_MULTIPLE (mpi4py calls MPI beside accord's thread)",
            file=sys.stderr,
        )
        return 2

    import mpi4py

    mpi4py.rc.initialize = False  # accord initialised MPI and finalises it
    mpi4py.rc.finalize = False
    from mpi4py import MPI

    comm = MPI.COMM_WORLD.Dup()
    try:
        return run(opts, torch, hvd, MPI, comm, blas_text, blas_warning)
    except BaseException:
        import traceback

        traceback.print_exc()
        sys.stderr.flush()
        MPI.COMM_WORLD.Abort(2)
        return 2


def run(opts, torch, hvd, MPI, comm, blas_text, blas_warning) -> int:
    import torch.distributed as dist

    import python_bench_workloads as wl

    rank, size = hvd.rank(), hvd.size()
    port = opts.master_port
    if port == 0:
        port = comm.bcast(pick_port(opts.master_addr) if rank == 0 else None, root=0)
    os.environ["MASTER_ADDR"] = opts.master_addr
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=size)

    reporter = Reporter(rank, size, opts.reference)
    checker = Checker(rank)
    bench = wl.Bench(opts, hvd, MPI, comm, reporter, checker)
    if blas_warning:
        banner = "!" * 78
        print(f"{banner}\nrank {rank}: WARNING: {blas_warning}\n{banner}", file=sys.stderr, flush=True)
    if rank == 0:
        import mpi4py
        import numpy

        import accord

        mpi_library = MPI.Get_library_version().replace("\0", "").splitlines()[0].strip()
        print(
            f"python_bench: np={size}, {os.cpu_count()} online cores, load average "
            f"{load_average():.2f}, MPI thread level {MPI.Query_thread()}, "
            f"reference={opts.reference}"
        )
        print(
            f"  accord from {os.path.dirname(accord.__file__)}; torch "
            f"{torch.__version__}; numpy {numpy.__version__}; mpi4py {mpi4py.__version__}; "
            f"{mpi_library}"
        )
        print(f"  {blas_text}")
        if _OVERRIDDEN:
            print(f"  note: set to 1 for this run: {_OVERRIDDEN}")
        print(f"  workloads: {' '.join(opts.workloads)}")
        print(
            f"  W1 {opts.w1_iters} iters (+{opts.w1_warmup} warm-up); W2 {opts.w2_reps} reps "
            f"(+{opts.w2_warmup}) per size {opts.w2_sizes_mib} MiB; W3 {opts.w3_tensors} x "
            f"{opts.w3_elems} floats, {opts.w3_reps} reps of {opts.w3_steps} steps "
            f"(+{opts.w3_warmup_steps}), gloo {opts.w3_gloo_steps} (+1); W4 {opts.w4_layers} x "
            f"Linear({opts.w4_width}) batch {opts.w4_batch}, {opts.w4_rounds} rounds of "
            f"{opts.w4_steps} steps "
            f"(+{opts.w4_warmup_steps})",
            flush=True,
        )

    runners = {"w1": wl.run_w1, "w2": wl.run_w2, "w3": wl.run_w3, "w4": wl.run_w4}
    notes = []
    started = time.perf_counter()
    for name in WORKLOADS:
        if name not in opts.workloads:
            continue
        if rank == 0:
            print(f"running {name.upper()} ...", flush=True)
        note = runners[name](bench)
        if note:
            notes.append(note)
    elapsed = time.perf_counter() - started
    if blas_warning:
        notes.append(f"WARNING: {blas_warning}")
    notes.append(f"workloads took {elapsed:.1f} s")
    reporter.print_table(notes)

    failures = comm.allreduce(checker.failures, op=MPI.SUM)
    if rank == 0 and failures:
        print(f"FAILED: {failures} wrong results over all ranks (see stderr)", flush=True)
    dist.destroy_process_group()
    comm.Free()
    hvd.shutdown()
    return 0 if failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
