#!/usr/bin/python3
"""gpu_torch_bench: accord.torch on CUDA tensors beside torch.distributed (NCCL), at one rank.

    PYTHONPATH=<build>/python mpirun -np 1 python3 benchmarks/gpu_torch_bench.py [--flag=value ...]
    PYTHONPATH=<build>/python python3 benchmarks/gpu_torch_bench.py       (the same)

See docs/benchmarks.md ("GPU") for the workloads and the method. Without a
GPU visible to torch it prints "skipped: no GPU" and exits 0. Its references
are torch.distributed groups of one rank, so started with more than one rank
it says so and exits 0 as well.

Order of a run:
  1. accord.torch is initialised (it initialises MPI); torch.distributed
     starts an NCCL group of one rank through a file:// rendezvous in a
     temporary directory.
  2. T1, then T2, each taking turns with its references in rounds.
  3. The table; the exit status is 1 if any result was wrong.
Every figure is also printed as an "ACCORD_PYBENCH {json}" line as soon as
it is measured.
"""

import argparse
import copy
import os
import sys
import tempfile
import time
from typing import Callable, Dict, List

from python_bench_util import (
    Checker,
    Figure,
    Reporter,
    import_accord_torch,
    median,
    non_negative_int,
    paired_ratio,
    positive_int,
    quantile,
    rotated,
    workload_list,
)

WORKLOADS = ("t1", "t2")


def parse_options(argv: List[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="gpu_torch_bench.py",
        description="accord.torch on CUDA tensors beside torch.distributed (NCCL), at one rank.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument(
        "--workloads",
        type=workload_list(WORKLOADS),
        default=list(WORKLOADS),
        help="which workloads run, comma-separated",
    )
    p.add_argument("--t1-iters", type=positive_int, default=2000, help="T1 timed ops per side")
    p.add_argument(
        "--t1-warmup",
        type=non_negative_int,
        default=200,
        help="T1 untimed ops per side before the first round (10 in later rounds)",
    )
    p.add_argument("--t1-block", type=positive_int, default=100, help="T1 timed ops per side per round")
    p.add_argument("--t2-layers", type=positive_int, default=8, help="T2 Linear+ReLU layers")
    p.add_argument("--t2-width", type=positive_int, default=1024, help="T2 layer width")
    p.add_argument("--t2-batch", type=positive_int, default=64, help="T2 samples per step")
    p.add_argument("--t2-steps", type=positive_int, default=50, help="T2 timed steps per side per round")
    p.add_argument("--t2-rounds", type=positive_int, default=5, help="T2 rounds")
    p.add_argument(
        "--t2-warmup-steps", type=non_negative_int, default=5, help="T2 untimed steps per side per round"
    )
    p.add_argument("--seed", type=positive_int, default=1234, help="seed of T2's model and data")
    return p.parse_args(argv)


class Bench:
    """What the workloads share: options, the libraries, the GPU, the checker and reporter."""

    def __init__(self, opts, torch, hvd, dist, device, reporter: Reporter, checker: Checker) -> None:
        self.opts = opts
        self.torch = torch
        self.hvd = hvd  # accord.torch
        self.dist = dist  # torch.distributed with an NCCL group of one rank, or None
        self.device = device
        self.reporter = reporter
        self.checker = checker

    def carried_check(self, label: str, before: int, expected: int) -> None:
        """accord's metrics must count ``expected`` more tensors reduced than ``before``.

        At one rank a Sum leaves a tensor as it was even if nothing ran, so
        this is what shows that accord did the work. The coordinator counts a
        batch just after handing it to the GPU, so the count may trail the
        handles by a moment: it is polled for a while.
        """
        carried = 0
        deadline = time.perf_counter() + 2.0
        while time.perf_counter() < deadline:
            carried = self.hvd.metrics()["tensors"] - before
            if carried >= expected:
                break
            time.sleep(0.001)
        if carried != expected:
            self.checker.fail(label, f"accord's metrics count {carried} tensors reduced, expected {expected}")


# ---------------------------------------------------------------------- T1


def run_t1(b: Bench) -> None:
    """Latency of a synchronous allreduce of one float32 CUDA element.

    Before each op (untimed) the tensor is filled on the current stream with
    k = 1..7 and the device drained; the op is timed on the host clock from
    the call until its result is on the device; afterwards the value must be
    k (a Sum over one rank).
    """
    torch, hvd, opts = b.torch, b.hvd, b.opts
    tensor = torch.zeros(1, dtype=torch.float32, device=b.device)

    def accord_blocking() -> None:
        hvd.allreduce_(tensor, name="t1", op=hvd.Sum)

    def accord_on_stream() -> None:
        hvd.synchronize(hvd.allreduce_async_(tensor, name="t1.stream", op=hvd.Sum), blocking=False)
        torch.cuda.synchronize()

    sides: Dict[str, Callable[[], None]] = {"accord": accord_blocking, "accord_on_stream": accord_on_stream}
    if b.dist is not None:

        def reference() -> None:
            b.dist.all_reduce(tensor)
            torch.cuda.synchronize()

        sides["nccl_all_reduce"] = reference

    samples: Dict[str, List[List[float]]] = {name: [] for name in sides}
    before = hvd.metrics()["tensors"]
    accord_ops = 0
    names = list(sides)
    for index, done in enumerate(range(0, opts.t1_iters, opts.t1_block)):
        count = min(opts.t1_block, opts.t1_iters - done)
        warmup = opts.t1_warmup if index == 0 else 10
        for name in rotated(names, index):
            times = []
            for i in range(warmup + count):
                k = float(1 + i % 7)
                tensor.fill_(k)
                torch.cuda.synchronize()
                start = time.perf_counter()
                sides[name]()
                stop = time.perf_counter()
                got = tensor.item()
                if got != k:
                    b.checker.fail(f"T1 {name}", f"expected {k!r}, got {got!r}")
                if i >= warmup:
                    times.append((stop - start) * 1e6)
            samples[name].append(times)
            if name.startswith("accord"):
                accord_ops += warmup + count
    b.carried_check("T1", before, accord_ops)

    def flat(name: str) -> List[float]:
        return [v for r in samples[name] for v in r]

    ref = "nccl_all_reduce" if b.dist is not None else None
    for name, metric in (("accord", "median_us"), ("accord_on_stream", "median_us_on_stream")):
        b.reporter.add(
            Figure(
                "T1",
                metric,
                median(flat(name)),
                ref or "-",
                median(flat(ref)) if ref else 0.0,
                paired_ratio(samples[name], samples[ref]) if ref else 0.0,
            )
        )
    p90 = quantile(flat("accord"), 0.9)
    ref_p90 = quantile(flat(ref), 0.9) if ref else 0.0
    b.reporter.add(Figure("T1", "p90_us", p90, ref or "-", ref_p90, p90 / ref_p90 if ref else 0.0))
    if ref:
        extra = [median(a) - median(r) for a, r in zip(samples["accord"], samples[ref])]
        b.reporter.add(Figure("T1", "extra_us", median(extra), ref, 0.0, 0.0))


# ---------------------------------------------------------------------- T2


def make_model(b: Bench):
    torch = b.torch
    layers = []
    for _ in range(b.opts.t2_layers):
        layers += [torch.nn.Linear(b.opts.t2_width, b.opts.t2_width), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers).to(b.device)


class Trainer:
    """One way of training a copy of T2's model: its optimizer and its own place in the data."""

    def __init__(self, b: Bench, name: str, model, optimizer, batches) -> None:
        self.b = b
        self.name = name
        self.model = model
        self.optimizer = optimizer
        self.batches = batches
        self.steps = 0
        self.rates: List[List[float]] = []

    def step(self) -> None:
        x, y = self.batches[self.steps % len(self.batches)]
        self.steps += 1
        self.optimizer.zero_grad()
        loss = self.b.torch.nn.functional.mse_loss(self.model(x), y)
        loss.backward()
        self.optimizer.step()

    def run(self, warmup: int, steps: int) -> None:
        """Untimed then timed steps; records the timed steps per second."""
        torch = self.b.torch
        for _ in range(warmup):
            self.step()
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(steps):
            self.step()
        torch.cuda.synchronize()
        self.rates.append([steps / (time.perf_counter() - start)])


def run_t2(b: Bench) -> None:
    """Training steps per second of a small MLP: plain, with accord's DistributedOptimizer and
    with DistributedDataParallel, every copy trained from the same start on the same batches.

    Afterwards every copy's parameters must match the plain copy's (relative 1e-5), and
    accord's metrics must show that it reduced every gradient of every step.
    """
    torch, hvd, opts = b.torch, b.hvd, b.opts
    torch.manual_seed(opts.seed)
    base = make_model(b)
    batches = [
        (
            torch.randn(opts.t2_batch, opts.t2_width, device=b.device),
            torch.randn(opts.t2_batch, opts.t2_width, device=b.device),
        )
        for _ in range(8)
    ]

    def sgd(model):
        return torch.optim.SGD(model.parameters(), lr=0.01)

    plain = copy.deepcopy(base)
    trainers = [Trainer(b, "plain", plain, sgd(plain), batches)]
    wrapped = copy.deepcopy(base)  # one rank: nothing to broadcast
    optimizer = hvd.DistributedOptimizer(sgd(wrapped), named_parameters=wrapped.named_parameters())
    trainers.append(Trainer(b, "accord", wrapped, optimizer, batches))
    if b.dist is not None:
        ddp = torch.nn.parallel.DistributedDataParallel(copy.deepcopy(base), device_ids=[b.device.index])
        trainers.append(Trainer(b, "ddp_nccl", ddp, sgd(ddp), batches))

    before = hvd.metrics()["tensors"]
    for index in range(opts.t2_rounds):
        for trainer in rotated(trainers, index):
            trainer.run(opts.t2_warmup_steps, opts.t2_steps)
    gradients = len(list(wrapped.parameters()))
    b.carried_check("T2", before, trainers[1].steps * gradients)

    reference = {name: p for name, p in plain.named_parameters()}
    for trainer in trainers[1:]:
        model = trainer.model.module if trainer.name.startswith("ddp") else trainer.model
        for name, p in model.named_parameters():
            b.checker.close_all(
                f"T2 {trainer.name} parameter {name}",
                p.detach(),
                reference[name].detach(),
                rtol=1e-5,
                atol=1e-6,
            )

    plain_rates = trainers[0].rates
    for trainer in trainers[1:]:
        b.reporter.add(
            Figure(
                "T2",
                f"steps_per_s_{trainer.name}",
                median([r[0] for r in trainer.rates]),
                "plain",
                median([r[0] for r in plain_rates]),
                paired_ratio(trainer.rates, plain_rates),
            )
        )


# ---------------------------------------------------------------------- main


def start_torch_distributed(torch, workdir: str):
    """torch.distributed with an NCCL group of one rank, or None (with the reason printed)."""
    import torch.distributed as dist

    try:
        dist.init_process_group("nccl", init_method=f"file://{workdir}/rendezvous", rank=0, world_size=1)
        probe = torch.ones(1, device=torch.device("cuda", torch.cuda.current_device()))
        dist.all_reduce(probe)
        torch.cuda.synchronize()
        return dist
    except Exception as error:  # the references are optional; accord's figures still count
        print(
            f"gpu_torch_bench: torch.distributed with NCCL is not available ({error}); "
            "its references are left out",
            file=sys.stderr,
            flush=True,
        )
        return None


def main(argv: List[str]) -> int:
    opts = parse_options(argv)
    import torch

    if not torch.cuda.is_available():
        print("gpu_torch_bench: skipped: no GPU (torch.cuda.is_available() is false)", flush=True)
        return 0
    hvd = import_accord_torch("gpu_torch_bench")
    if hvd is None:
        return 2
    hvd.init()
    if hvd.size() > 1:
        if hvd.rank() == 0:
            print(
                f"gpu_torch_bench: skipped: it measures one rank (its references are "
                f"torch.distributed groups of one), and was started with {hvd.size()}; run it "
                "with mpirun -np 1",
                flush=True,
            )
        hvd.shutdown()
        return 0
    torch.cuda.set_device(hvd.local_rank() % torch.cuda.device_count())
    device = torch.device("cuda", torch.cuda.current_device())

    with tempfile.TemporaryDirectory(prefix="gpu_torch_bench.") as workdir:
        dist = start_torch_distributed(torch, workdir)
        reporter = Reporter(0, 1, "beside", program="gpu_torch_bench")
        checker = Checker(0)
        b = Bench(opts, torch, hvd, dist, device, reporter, checker)
        import accord

        nccl = torch.cuda.nccl.version()
        nccl = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl)
        print(
            f"gpu_torch_bench: {torch.cuda.get_device_name(device)}; torch {torch.__version__} "
            f"(CUDA {torch.version.cuda}, NCCL {nccl}); accord from "
            f"{os.path.dirname(accord.__file__)}, {accord.build_info()}",
            flush=True,
        )
        print(
            f"  T1 {opts.t1_iters} iters (+{opts.t1_warmup} warm-up); T2 {opts.t2_layers} x "
            f"Linear({opts.t2_width}) batch {opts.t2_batch}, {opts.t2_rounds} rounds of "
            f"{opts.t2_steps} steps (+{opts.t2_warmup_steps})",
            flush=True,
        )
        started = time.perf_counter()
        for name, run in (("t1", run_t1), ("t2", run_t2)):
            if name in opts.workloads:
                print(f"running {name.upper()} ...", flush=True)
                run(b)
        reporter.print_table([f"workloads took {time.perf_counter() - started:.1f} s"])
        if dist is not None:
            dist.destroy_process_group()
    hvd.shutdown()
    if checker.failures:
        print(f"FAILED: {checker.failures} wrong results (see stderr)", flush=True)
    return 0 if checker.failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
