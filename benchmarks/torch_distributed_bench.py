#!/usr/bin/env python3
"""torch_distributed_bench: torch.distributed over the accord backend beside gloo, raw MPI and
accord.torch's own API, in one run.

    PYTHONPATH=<build>/python mpirun -np 2 --bind-to core <python> \\
        benchmarks/torch_distributed_bench.py --rounds 5 [--json out.json]

``<python>`` needs torch (2.1 or newer) and, for the raw-MPI reference, mpi4py built against the
MPI accord uses (without mpi4py that reference is left out, with a note). No MASTER_ADDR: the
default group is ``dist.init_process_group("accord")``, whose env:// rendezvous takes rank, world
size and the store from accord under mpirun; the gloo reference is ``dist.new_group(backend="gloo")``
in the same job. See docs/benchmarks.md ("torch.distributed backend") for the method and results.

Workloads (every collective an in-place Sum of float32; rank r contributes r+1):
  L  1-element all_reduce, each op timed alone: median and p90 microseconds per op.
  B  all_reduce of one 1, 16 and 64 MiB tensor, refilled and synchronised by a barrier before
     each timed op: bus bandwidth GB/s = 2(n-1)/n * bytes / time.
  D  DistributedDataParallel training of a ResNet-18 (benchmarks/synthetic_resnet.py) on CPU,
     same seed and data: steps/s of DDP over accord, DDP over gloo, and the same model with no
     exchange at all (what the CPUs allow).
Sides of L and B: ``accord_pg`` (dist.all_reduce on the default, accord group), ``gloo``
(dist.all_reduce on the gloo group), ``mpi4py`` (comm.Allreduce(MPI.IN_PLACE) on the tensor's
memory, a duplicate of MPI_COMM_WORLD) and ``accord_api`` (accord.torch.allreduce_async_ +
synchronize, op=Sum, unnamed as the backend submits them). Every round each side takes one turn,
in an order that rotates round by round; ratios are the median over rounds of the per-round
ratio (paired), and accord stays initialised throughout (the backend needs it), so every
reference runs beside an idle accord. Rank 0 prints an ``ACCORD_PYBENCH {json}`` line per figure
and a table; ``--json PATH`` also writes every figure and every round's samples.
"""

import argparse
import json
import os
import sys
import time

_THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
for _key in _THREAD_VARIABLES:  # before torch and numpy load their BLAS
    os.environ.setdefault(_key, "1")

from python_bench_util import (  # noqa: E402
    Checker,
    Figure,
    Reporter,
    cpu_times,
    flatten,
    idle_share,
    import_accord_torch,
    load_average,
    median,
    mib_sizes,
    non_negative_int,
    paired_ratio,
    positive_int,
    quantile,
    rotated,
    workload_list,
)

WORKLOADS = ("l", "b", "d")
PROGRAM = "torch_distributed_bench"


def parse_options(argv):
    p = argparse.ArgumentParser(
        prog="torch_distributed_bench.py",
        description="torch.distributed over accord beside gloo, mpi4py and accord.torch. Run under "
        "mpirun -np N --bind-to core <python> benchmarks/torch_distributed_bench.py",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument(
        "--workloads",
        type=workload_list(WORKLOADS),
        default=list(WORKLOADS),
        help="which workloads run, comma-separated (l, b, d)",
    )
    p.add_argument("--rounds", type=positive_int, default=5, help="rounds of every workload")
    p.add_argument("--l-ops", type=positive_int, default=200, help="L timed ops per side per round")
    p.add_argument("--l-warmup", type=non_negative_int, default=20, help="L untimed ops per side per round")
    p.add_argument("--b-sizes-mib", type=mib_sizes, default=[1, 16, 64], help="B sizes in MiB")
    p.add_argument("--b-ops", type=positive_int, default=3, help="B timed ops per side per size per round")
    p.add_argument("--b-warmup", type=non_negative_int, default=1, help="B untimed ops per side per round")
    p.add_argument("--d-batch", type=positive_int, default=8, help="D images per rank per step")
    p.add_argument("--d-image-size", type=positive_int, default=64, help="D image height and width")
    p.add_argument("--d-steps", type=positive_int, default=5, help="D timed steps per side per round")
    p.add_argument("--d-warmup", type=non_negative_int, default=1, help="D untimed steps per side per round")
    p.add_argument(
        "--d-no-local",
        action="store_true",
        help="leave out D's no-exchange side (a model trained alone on every rank)",
    )
    p.add_argument("--seed", type=positive_int, default=1234, help="D's model and data")
    p.add_argument(
        "--target-bw-vs-gloo",
        type=float,
        default=2.0,
        help="B target at 16 and 64 MiB: accord_pg at least this times gloo",
    )
    p.add_argument(
        "--target-bw-vs-api",
        type=float,
        default=0.9,
        help="B target at 16 and 64 MiB: accord_pg at least this times accord_api",
    )
    p.add_argument(
        "--target-ddp-vs-gloo",
        type=float,
        default=1.0,
        help="D target: DDP over accord at least this times DDP over gloo",
    )
    p.add_argument("--json", default=None, help="rank 0 writes every figure and round here")
    p.add_argument("--verbose", type=non_negative_int, default=0, help="1: print every round's medians")
    return p.parse_args(argv)


class Side:
    def __init__(self, name, run, tensor):
        self.name = name
        self.run = run
        self.tensor = tensor  # the tensor the op reduces in place (checked after every op)


class Bench:
    def __init__(self, opts, torch, dist, hvd, gloo, mpi, comm):
        self.opts, self.torch, self.dist, self.hvd = opts, torch, dist, hvd
        self.gloo, self.MPI, self.comm = gloo, mpi, comm
        self.rank, self.size = dist.get_rank(), dist.get_world_size()
        self.reporter = Reporter(self.rank, self.size, "beside", program=PROGRAM)
        self.checker = Checker(self.rank)
        self.expected = self.size * (self.size + 1) / 2.0
        self.rounds = {}  # "L accord_pg" -> [[samples of round 0], ...]
        self.idle = {}  # "D accord_pg" -> [idle share per round]

    def barrier(self):
        if self.comm is not None:
            self.comm.Barrier()
        else:
            self.dist.barrier(group=self.gloo)

    def sides(self, tensor_for):
        """L and B's sides; ``tensor_for(name)`` gives each its tensor."""
        dist, hvd = self.dist, self.hvd
        out = []
        t = tensor_for("accord_pg")
        out.append(Side("accord_pg", lambda t=t: dist.all_reduce(t), t))
        t = tensor_for("gloo")
        out.append(Side("gloo", lambda t=t: dist.all_reduce(t, group=self.gloo), t))
        if self.comm is not None:
            t = tensor_for("mpi4py")
            a = t.numpy()
            MPI, comm = self.MPI, self.comm
            out.append(Side("mpi4py", lambda a=a: comm.Allreduce(MPI.IN_PLACE, a, op=MPI.SUM), t))
        t = tensor_for("accord_api")
        out.append(Side("accord_api", lambda t=t: hvd.synchronize(hvd.allreduce_async_(t, op=hvd.Sum)), t))
        return out

    def log(self, what, index, unit, names):
        if not self.opts.verbose or self.rank != 0:
            return
        parts = ", ".join(f"{n} {median(self.rounds[f'{what} {n}'][-1]):.4g}" for n in names)
        print(f"  {what} round {index}: {unit}: {parts}", flush=True)


# ---------------------------------------------------------------------- L


def run_l(b: Bench) -> None:
    torch, o = b.torch, b.opts
    fill = float(b.rank + 1)
    sides = b.sides(lambda name: torch.zeros(1))
    for s in sides:
        b.rounds[f"L {s.name}"] = []
    perf = time.perf_counter
    for index in range(o.rounds):
        for s in rotated(sides, index):
            t = s.tensor
            for _ in range(o.l_warmup):
                t.fill_(fill)
                s.run()
            b.barrier()
            us = []
            for _ in range(o.l_ops):
                t.fill_(fill)
                start = perf()
                s.run()
                us.append((perf() - start) * 1e6)
                if float(t[0]) != b.expected:
                    b.checker.fail(f"L {s.name}", f"expected {b.expected!r}, got {float(t[0])!r}")
            b.rounds[f"L {s.name}"].append(us)
        b.log("L", index, "median us", [s.name for s in sides])
    a = b.rounds["L accord_pg"]
    for s in sides[1:]:
        r = b.rounds[f"L {s.name}"]
        b.reporter.add(
            Figure("L", "median_us", median(flatten(a)), s.name, median(flatten(r)), paired_ratio(a, r))
        )
    for s in sides[1:]:
        r = b.rounds[f"L {s.name}"]
        pa, pr = quantile(flatten(a), 0.9), quantile(flatten(r), 0.9)
        b.reporter.add(Figure("L", "p90_us", pa, s.name, pr, pa / pr if pr else 0.0))


# ---------------------------------------------------------------------- B


def run_b(b: Bench) -> None:
    torch, o = b.torch, b.opts
    fill = float(b.rank + 1)
    factor = 2.0 * (b.size - 1) / b.size if b.size > 1 else 1.0
    for mib in o.b_sizes_mib:
        nbytes = mib << 20
        # One buffer per side: every side touches the same amount of fresh memory.
        sides = b.sides(lambda name, nbytes=nbytes: torch.empty(nbytes // 4, dtype=torch.float32))
        for s in sides:
            b.rounds[f"B{mib} {s.name}"] = []

        def one(s: Side, mib: int = mib) -> float:
            s.tensor.fill_(fill)
            b.barrier()
            start = time.perf_counter()
            s.run()
            elapsed = time.perf_counter() - start
            b.checker.equal_all(f"B {s.name} {mib} MiB", s.tensor, b.expected)
            return elapsed

        for index in range(o.rounds):
            for s in rotated(sides, index):
                for _ in range(o.b_warmup):
                    one(s)
                b.rounds[f"B{mib} {s.name}"].append([one(s) for _ in range(o.b_ops)])
            b.log(f"B{mib}", index, "median s", [s.name for s in sides])

        def busbw(name: str, mib: int = mib, nbytes: int = nbytes) -> float:
            return factor * nbytes / median(flatten(b.rounds[f"B{mib} {name}"])) / 1e9

        a = b.rounds[f"B{mib} accord_pg"]
        for s in sides[1:]:
            r = b.rounds[f"B{mib} {s.name}"]
            fig = Figure(
                "B",
                f"busbw_GBps@{mib}MiB",
                busbw("accord_pg"),
                s.name,
                busbw(s.name),
                paired_ratio(a, r, inverse=True),
            )
            if mib >= 16 and s.name == "gloo":
                b.reporter.add_ratio(fig, o.target_bw_vs_gloo)
            elif mib >= 16 and s.name == "accord_api":
                b.reporter.add_ratio(fig, o.target_bw_vs_api)
            else:
                b.reporter.add(fig)


# ---------------------------------------------------------------------- D


def run_d(b: Bench) -> None:
    torch, dist, o = b.torch, b.dist, b.opts
    import torch.nn.functional as F
    from synthetic_resnet import ResNet18
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(o.seed)  # every rank builds the same initial model
    initial = ResNet18().state_dict()

    def fresh():
        model = ResNet18()
        model.load_state_dict(initial)
        return model

    gen = torch.Generator().manual_seed(o.seed * 1000 + b.rank + 1)  # each rank its own data
    batches = [
        (
            torch.randn(o.d_batch, 3, o.d_image_size, o.d_image_size, generator=gen),
            torch.randint(0, 1000, (o.d_batch,), generator=gen),
        )
        for _ in range(2)
    ]
    models = {
        "accord_pg": DDP(fresh()),  # the default group: accord
        "gloo": DDP(fresh(), process_group=b.gloo),
    }
    if not o.d_no_local:
        models["no_exchange"] = fresh()
    optimizers = {k: torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9) for k, m in models.items()}
    names = list(models)
    for n in names:
        b.rounds[f"D {n}"] = []
        b.idle[f"D {n}"] = []

    def step(name: str, i: int) -> None:
        x, y = batches[i % len(batches)]
        optimizers[name].zero_grad()
        F.cross_entropy(models[name](x), y).backward()
        optimizers[name].step()

    for index in range(o.rounds):
        for n in rotated(names, index):
            for i in range(o.d_warmup):
                step(n, i)
            b.barrier()
            cpu = cpu_times()
            start = time.perf_counter()
            for i in range(o.d_steps):
                step(n, i)
            elapsed = time.perf_counter() - start
            share = idle_share(cpu, cpu_times())
            b.rounds[f"D {n}"].append([o.d_steps / elapsed])  # one sample: steps/s
            b.idle[f"D {n}"].append(share if share is not None else -1.0)
        b.log("D", index, "steps/s", names)

    # Both DDP models must still be identical on every rank (each rank trained on its own data).
    for n in ("accord_pg", "gloo"):
        flat = torch.cat([p.detach().reshape(-1) for p in models[n].parameters()])
        gathered = [torch.empty_like(flat) for _ in range(b.size)]
        dist.all_gather(gathered, flat, group=b.gloo)
        for r, g in enumerate(gathered):
            if not torch.equal(g, flat):
                b.checker.fail(f"D {n}", f"parameters differ from rank {r}'s after training")

    a = b.rounds["D accord_pg"]
    for n in names[1:]:
        r = b.rounds[f"D {n}"]
        fig = Figure("D", "steps_per_s", median(flatten(a)), n, median(flatten(r)), paired_ratio(a, r))
        if n == "gloo":
            b.reporter.add_ratio(fig, o.target_ddp_vs_gloo)
        else:
            b.reporter.add(fig)


# ---------------------------------------------------------------------- main


def spread(rounds) -> str:
    """min-max of the per-round medians."""
    per = [median(r) for r in rounds]
    return f"{min(per):.4g}-{max(per):.4g}" if per else "-"


def main(argv) -> int:
    opts = parse_options(argv)
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    hvd = import_accord_torch(PROGRAM)  # registers the "accord" backend
    if hvd is None:
        return 2
    os.environ.pop("MASTER_ADDR", None)  # the accord rendezvous under mpirun
    dist.init_process_group("accord")
    gloo = dist.new_group(backend="gloo")

    MPI = comm = None
    mpi_note = ""
    try:
        import mpi4py

        mpi4py.rc.initialize = False  # accord initialised MPI and finalises it
        mpi4py.rc.finalize = False
        from mpi4py import MPI

        comm = MPI.COMM_WORLD.Dup()
    except ImportError as error:
        mpi_note = f"no mpi4py ({error}): the raw-MPI reference is left out"

    b = Bench(opts, torch, dist, hvd, gloo, MPI, comm)
    rank, size = b.rank, b.size
    load_start = load_average()
    if rank == 0:
        import accord

        print(
            f"{PROGRAM}: np={size}, {os.cpu_count()} online cores, load average {load_start:.2f}, "
            f"torch {torch.__version__}, accord from {os.path.dirname(accord.__file__)}, "
            f"default group backend {dist.get_backend()}, rank 0 CPUs {sorted(os.sched_getaffinity(0))}"
        )
        print(
            f"  rounds {opts.rounds}; L {opts.l_ops} ops (+{opts.l_warmup}); B {opts.b_ops} ops "
            f"(+{opts.b_warmup}) at {opts.b_sizes_mib} MiB; D ResNet-18 batch {opts.d_batch} at "
            f"{opts.d_image_size}x{opts.d_image_size}, {opts.d_steps} steps (+{opts.d_warmup})"
            + (f"; {mpi_note}" if mpi_note else ""),
            flush=True,
        )

    runners = {"l": run_l, "b": run_b, "d": run_d}
    started = time.perf_counter()
    try:
        for name in WORKLOADS:
            if name in opts.workloads:
                if rank == 0:
                    print(f"running {name.upper()} ...", flush=True)
                runners[name](b)
    except BaseException:
        import traceback

        traceback.print_exc()
        sys.stderr.flush()
        if comm is not None:
            MPI.COMM_WORLD.Abort(2)
        raise
    elapsed = time.perf_counter() - started

    notes = []
    if rank == 0:
        notes.append("spread (min-max of per-round medians):")
        for key, rounds in b.rounds.items():
            unit = "steps/s" if key.startswith("D") else "us"
            if key.startswith("B"):  # seconds per op -> bus bandwidth
                nbytes = int(key[1:].split()[0]) << 20
                factor = 2.0 * (size - 1) / size if size > 1 else 1.0
                rounds = [[factor * nbytes / s / 1e9 for s in r] for r in rounds]
                unit = "GB/s"
            idle = b.idle.get(key)
            extra = f", host CPU idle {median(idle):.0%}" if idle else ""
            notes.append(f"  {key:<20} {spread(rounds)} {unit}{extra}")
        notes.append(f"load average at start {load_start:.2f}; workloads took {elapsed:.1f} s")
    b.reporter.print_table(notes)

    failures = torch.tensor([b.checker.failures])
    dist.all_reduce(failures, group=gloo)
    failures = int(failures.item())
    if rank == 0:
        if failures:
            print(f"FAILED: {failures} wrong results over all ranks (see stderr)", flush=True)
        if opts.json:
            with open(opts.json, "w") as f:
                json.dump(
                    {
                        "program": PROGRAM,
                        "np": size,
                        "torch": torch.__version__,
                        "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                        "load1_start": load_start,
                        "load1_end": load_average(),
                        "options": vars(opts),
                        "figures": [vars(f) for f in b.reporter.figures],
                        "rounds": b.rounds,
                        "idle_share": b.idle,
                        "failures": failures,
                    },
                    f,
                    indent=1,
                )
    if comm is not None:
        comm.Free()
    dist.destroy_process_group()
    hvd.shutdown()
    return 0 if failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
