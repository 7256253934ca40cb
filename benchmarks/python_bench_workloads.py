"""W1-W4 of python_bench.py: accord.torch beside mpi4py and torch.distributed (gloo).

Every workload takes turns with its references in rounds; the order of the
sides rotates from round to round, and every side gets untimed warm-up work
at the start of its turn. Ratios pair the sides within each round.

Collectives (W1-W3) are in-place sums of float32 data: rank r contributes
r + 1, so every element of every result must be size * (size + 1) / 2. Each
result is checked, element by element, after its timing stopped; inputs are
refilled (untimed) before each timed operation.

W4 trains the same MLP with accord's DistributedOptimizer, with a blocking
mpi4py allreduce of each gradient after backward, with
DistributedDataParallel over gloo, on every rank without any exchange (the
efficiency the machine allows), and (rank 0 alone) without any
communication; it also runs accord's exchange of the gradients alone, with
no computation (with no_exchange, the CPU time a step needs: see
_cpu_bound). After each timed block of the first three the parameters must
be identical on every rank, and once per round each side's reduced gradients
are compared with the average of every rank's local gradients.
"""

import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

from python_bench_util import (
    Checker,
    Figure,
    Reporter,
    cpu_times,
    flatten,
    idle_share,
    lazy_barrier,
    median,
    paired_ratio,
    quantile,
    rotated,
)


class Bench:
    """What every workload needs: options, ranks, communicators, the checker and reporter."""

    def __init__(self, opts, hvd, mpi, comm, reporter: Reporter, checker: Checker) -> None:
        self.opts = opts
        self.hvd = hvd  # accord.torch
        self.MPI = mpi  # mpi4py.MPI
        self.comm = comm  # a duplicate of MPI_COMM_WORLD for the mpi4py references
        self.rank = hvd.rank()
        self.size = hvd.size()
        self.reporter = reporter
        self.checker = checker
        self.expected = self.size * (self.size + 1) / 2.0

    def use_reference(self) -> None:
        """Before a reference's turn: in --reference=alone mode accord is shut down."""
        if self.opts.reference == "alone" and self.hvd.is_initialized():
            self.hvd.shutdown()

    def use_accord(self) -> None:
        """Before accord's turn: accord is (re)initialised if needed."""
        if not self.hvd.is_initialized():
            self.hvd.init()

    def prepare(self, side: "Side") -> None:
        if side.is_accord:
            self.use_accord()
        else:
            self.use_reference()

    def barrier(self) -> None:
        self.comm.Barrier()

    def log_round(self, workload: str, index: int, unit: str, values: Dict[str, List[List[float]]]) -> None:
        """With --verbose=1, rank 0 prints the median of each side's latest round."""
        if not self.opts.verbose or self.rank != 0:
            return
        parts = ", ".join(f"{name} {median(rounds[-1]):.4g}" for name, rounds in values.items() if rounds)
        print(f"  {workload} round {index}: {unit}: {parts}", flush=True)


@dataclass
class Side:
    """One way of doing a workload's work: accord's, or a reference's.

    ``run`` does one unit of work: one op (W1, W2), one step of all tensors
    (W3), or one training step on a batch ``(x, y)`` (W4).
    """

    name: str
    is_accord: bool
    run: Callable[..., None]


def _round_sizes(total: int, per_round: int) -> List[int]:
    return [min(per_round, total - done) for done in range(0, total, per_round)]


# ---------------------------------------------------------------------- W1

_W1_ROUND_WARMUP = 10  # untimed ops per side at the start of every round but the first


def run_w1(b: Bench) -> None:
    o, hvd, MPI = b.opts, b.hvd, b.MPI
    fill = float(b.rank + 1)
    t_accord = torch.zeros(1)
    t_gloo = torch.zeros(1)
    a_mpi = np.zeros(1, dtype=np.float32)

    def accord_op():
        hvd.allreduce_(t_accord, name="w1", op=hvd.Sum)

    def mpi_op():
        b.comm.Allreduce(MPI.IN_PLACE, a_mpi, op=MPI.SUM)

    def gloo_op():
        dist.all_reduce(t_gloo)

    sides = [
        Side("accord", True, accord_op),
        Side("mpi4py_allreduce", False, mpi_op),
        Side("gloo_all_reduce", False, gloo_op),
    ]
    values = {"accord": t_accord, "mpi4py_allreduce": torch.from_numpy(a_mpi), "gloo_all_reduce": t_gloo}
    samples: Dict[str, List[List[float]]] = {s.name: [] for s in sides}

    def ops(side: Side, count: int, out: Optional[List[float]]) -> None:
        value = values[side.name]
        perf = time.perf_counter
        for _ in range(count):
            value.fill_(fill)
            start = perf()
            side.run()
            stop = perf()
            got = float(value[0])
            if got != b.expected:
                b.checker.fail(f"W1 {side.name}", f"expected {b.expected!r}, got {got!r}")
            if out is not None:
                out.append((stop - start) * 1e6)

    for index, count in enumerate(_round_sizes(o.w1_iters, o.w1_block)):
        warmup = o.w1_warmup if index == 0 else _W1_ROUND_WARMUP
        for side in rotated(sides, index):
            b.prepare(side)
            ops(side, warmup, None)
            b.barrier()
            block: List[float] = []
            ops(side, count, block)
            samples[side.name].append(block)
        b.log_round("W1", index, "median us", samples)

    accord_us = flatten(samples["accord"])
    for i, ref in enumerate(s.name for s in sides[1:]):
        ref_us = flatten(samples[ref])
        fig = Figure(
            "W1",
            "median_us",
            median(accord_us),
            ref,
            median(ref_us),
            paired_ratio(samples["accord"], samples[ref]),
        )
        if i == 0:
            b.reporter.add_margin(fig, o.w1_target_extra_us)
        else:
            b.reporter.add(fig)
    for ref in (s.name for s in sides[1:]):
        ref_us = flatten(samples[ref])
        p90_a, p90_r = quantile(accord_us, 0.9), quantile(ref_us, 0.9)
        b.reporter.add(Figure("W1", "p90_us", p90_a, ref, p90_r, p90_a / p90_r if p90_r else 0))


# ---------------------------------------------------------------------- W2

_W2_PER_ROUND = 4  # timed ops per side per round


def run_w2(b: Bench) -> None:
    o, hvd, MPI = b.opts, b.hvd, b.MPI
    fill = float(b.rank + 1)
    for mib in o.w2_sizes_mib:
        nbytes = mib << 20
        buffer = torch.empty(nbytes // 4, dtype=torch.float32)
        array = buffer.numpy()  # the same memory
        name = f"w2.{mib}MiB"

        def accord_op():
            hvd.allreduce_(buffer, name=name, op=hvd.Sum)

        def mpi_op():
            b.comm.Allreduce(MPI.IN_PLACE, array, op=MPI.SUM)

        def gloo_op():
            dist.all_reduce(buffer)

        sides = [
            Side("accord", True, accord_op),
            Side("mpi4py_allreduce", False, mpi_op),
            Side("gloo_all_reduce", False, gloo_op),
        ]
        seconds: Dict[str, List[List[float]]] = {s.name: [] for s in sides}

        def one(side: Side) -> float:
            buffer.fill_(fill)
            b.barrier()
            start = time.perf_counter()
            side.run()
            elapsed = time.perf_counter() - start
            b.checker.equal_all(f"W2 {side.name} {name}", buffer, b.expected)
            return elapsed

        for index, count in enumerate(_round_sizes(o.w2_reps, _W2_PER_ROUND)):
            for side in rotated(sides, index):
                b.prepare(side)
                for _ in range(o.w2_warmup):
                    one(side)
                seconds[side.name].append([one(side) for _ in range(count)])
            b.log_round(f"W2 {mib} MiB", index, "median s", seconds)

        # Bus bandwidth as nccl-tests defines it; with one rank the algorithm bandwidth.
        factor = 2.0 * (b.size - 1) / b.size if b.size > 1 else 1.0

        def busbw(name_: str) -> float:
            return factor * nbytes / median(flatten(seconds[name_])) / 1e9

        for ref in (s.name for s in sides[1:]):
            b.reporter.add(
                Figure(
                    "W2",
                    f"busbw_GBps@{mib}MiB",
                    busbw("accord"),
                    ref,
                    busbw(ref),
                    paired_ratio(seconds["accord"], seconds[ref], inverse=True),
                )
            )


# ---------------------------------------------------------------------- W3


def run_w3(b: Bench) -> None:
    o, hvd, MPI = b.opts, b.hvd, b.MPI
    fill = float(b.rank + 1)
    tensors = [torch.empty(o.w3_elems, dtype=torch.float32) for _ in range(o.w3_tensors)]
    arrays = [t.numpy() for t in tensors]
    names = [f"w3.{i}" for i in range(o.w3_tensors)]
    packed = torch.empty(o.w3_tensors * o.w3_elems, dtype=torch.float32)
    packed_array = packed.numpy()
    chunks = list(packed.split(o.w3_elems))
    comm = b.comm

    def accord_step():
        handles = [hvd.allreduce_async_(t, name=n, op=hvd.Sum) for t, n in zip(tensors, names)]
        for h in handles:
            hvd.synchronize(h)

    def packed_step():
        torch.cat(tensors, out=packed)
        comm.Allreduce(MPI.IN_PLACE, packed_array, op=MPI.SUM)
        for t, c in zip(tensors, chunks):
            t.copy_(c)

    def per_tensor_step():
        for a in arrays:
            comm.Allreduce(MPI.IN_PLACE, a, op=MPI.SUM)

    def gloo_step():
        works = [dist.all_reduce(t, async_op=True) for t in tensors]
        for w in works:
            w.wait()

    sides = [
        Side("accord", True, accord_step),
        Side("hand_packed_mpi4py", False, packed_step),
        Side("per_tensor_mpi4py", False, per_tensor_step),
        Side("gloo_async", False, gloo_step),
    ]
    rates: Dict[str, List[List[float]]] = {s.name: [] for s in sides}

    def steps_per_second(side: Side) -> float:
        steps, warmup = o.w3_steps, o.w3_warmup_steps
        if side.name == "gloo_async":
            steps, warmup = o.w3_gloo_steps, min(warmup, 1)
        busy = 0.0
        for step in range(-warmup, steps):
            for t in tensors:
                t.fill_(fill)
            b.barrier()
            start = time.perf_counter()
            side.run()
            elapsed = time.perf_counter() - start
            if step >= 0:
                busy += elapsed
            b.checker.equal_all(
                f"W3 {side.name} (all {len(tensors)} tensors, concatenated)", torch.cat(tensors), b.expected
            )
        return steps / busy

    for rep in range(o.w3_reps):
        for side in rotated(sides, rep):
            b.prepare(side)
            rates[side.name].append([steps_per_second(side)])
        b.log_round("W3", rep, "steps/s", rates)

    accord_rate = median(flatten(rates["accord"]))
    for ref in (s.name for s in sides[1:]):
        fig = Figure(
            "W3",
            "steps_per_s",
            accord_rate,
            ref,
            median(flatten(rates[ref])),
            paired_ratio(rates["accord"], rates[ref]),
        )
        if ref == "hand_packed_mpi4py":
            b.reporter.add_ratio(fig, o.w3_target_ratio)
        else:
            b.reporter.add(fig)


# ---------------------------------------------------------------------- W4


def make_mlp(layers: int, width: int) -> torch.nn.Sequential:
    """``layers`` x (Linear(width, width) + ReLU)."""
    modules: List[torch.nn.Module] = []
    for _ in range(layers):
        modules += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    return torch.nn.Sequential(*modules)


def _flat(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    return torch.cat([t.detach().reshape(-1) for t in tensors])


class _W4:
    """W4's models, optimizers, data and checks."""

    def __init__(self, b: Bench) -> None:
        o = b.opts
        self.b = b
        self.o = o
        torch.manual_seed(o.seed)  # every rank builds the same initial model
        initial = make_mlp(o.w4_layers, o.w4_width).state_dict()

        def fresh() -> torch.nn.Sequential:
            model = make_mlp(o.w4_layers, o.w4_width)
            model.load_state_dict(initial)
            return model

        # Each rank trains on its own data: a few batches, reused in turn.
        gen = torch.Generator().manual_seed(o.seed * 1000 + b.rank + 1)
        self.batches = [
            (
                torch.randn(o.w4_batch, o.w4_width, generator=gen),
                torch.randn(o.w4_batch, o.w4_width, generator=gen),
            )
            for _ in range(4)
        ]
        self.check_batch = (
            torch.randn(o.w4_batch, o.w4_width, generator=gen),
            torch.randn(o.w4_batch, o.w4_width, generator=gen),
        )
        self.reference_model = fresh()  # computes local gradients for the checks

        hvd = b.hvd
        b.use_accord()
        self.accord_model = fresh()
        self.accord_opt = hvd.DistributedOptimizer(
            torch.optim.SGD(self.accord_model.parameters(), lr=o.w4_lr),
            named_parameters=self.accord_model.named_parameters(),
        )
        hvd.broadcast_parameters(self.accord_model.state_dict(), root_rank=0)
        # accord without overlap: every gradient allreduced in one grouped
        # call after backward, as the mpi4py loop does.
        self.accord_blocking_model = fresh()
        self.accord_blocking_opt = torch.optim.SGD(self.accord_blocking_model.parameters(), lr=o.w4_lr)

        self.mpi_model = fresh()
        self.mpi_opt = torch.optim.SGD(self.mpi_model.parameters(), lr=o.w4_lr)
        # The exchange alone: gradient-shaped buffers of its own.
        self.exchange_buffers = [torch.randn(p.shape, generator=gen) for p in self.mpi_model.parameters()]

        b.use_reference()
        self.ddp_model = torch.nn.parallel.DistributedDataParallel(fresh())
        self.ddp_opt = torch.optim.SGD(self.ddp_model.parameters(), lr=o.w4_lr)

        self.single_model = fresh()
        self.single_opt = torch.optim.SGD(self.single_model.parameters(), lr=o.w4_lr)

    # ------------------------------------------------------------ steps

    def accord_step(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.accord_opt.zero_grad()
        F.mse_loss(self.accord_model(x), y).backward()
        self.accord_opt.step()

    def _accord_reduce(self) -> None:
        grads = [p.grad for p in self.accord_blocking_model.parameters()]
        self.b.hvd.grouped_allreduce_(grads, op=self.b.hvd.Average, name="w4_blocking")

    def accord_blocking_step(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.accord_blocking_opt.zero_grad()
        F.mse_loss(self.accord_blocking_model(x), y).backward()
        self._accord_reduce()
        self.accord_blocking_opt.step()

    def _mpi_reduce(self) -> None:
        MPI, comm, size = self.b.MPI, self.b.comm, self.b.size
        for p in self.mpi_model.parameters():
            comm.Allreduce(MPI.IN_PLACE, p.grad.numpy(), op=MPI.SUM)
            p.grad.div_(size)

    def exchange_step(self, x: torch.Tensor, y: torch.Tensor) -> None:
        """accord_blocking_step's exchange without its computation."""
        self.b.hvd.grouped_allreduce_(self.exchange_buffers, op=self.b.hvd.Average, name="w4_exchange")

    def mpi_step(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.mpi_opt.zero_grad()
        F.mse_loss(self.mpi_model(x), y).backward()
        self._mpi_reduce()
        self.mpi_opt.step()

    def ddp_step(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.ddp_opt.zero_grad()
        F.mse_loss(self.ddp_model(x), y).backward()
        self.ddp_opt.step()

    def single_step(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.single_opt.zero_grad()
        F.mse_loss(self.single_model(x), y).backward()
        self.single_opt.step()

    def block(
        self,
        step: Callable[[torch.Tensor, torch.Tensor], None],
        collective: bool,
        idle: Optional[List[float]] = None,
    ) -> float:
        """Warm-up steps, then timed steps; returns this rank's samples/s over the timed ones.

        With ``idle``, appends the share of this host's CPU time that was idle
        during the timed steps (when /proc/stat can tell it).
        """
        o = self.o
        for i in range(o.w4_warmup_steps):
            step(*self.batches[i % len(self.batches)])
        if collective:
            self.b.barrier()
        cpu = cpu_times() if idle is not None else None
        start = time.perf_counter()
        for i in range(o.w4_steps):
            step(*self.batches[i % len(self.batches)])
        elapsed = time.perf_counter() - start
        if idle is not None:
            share = idle_share(cpu, cpu_times())
            if share is not None:
                idle.append(share)
        return o.w4_batch * o.w4_steps / elapsed

    # ------------------------------------------------------------ checks (untimed)

    def check(
        self,
        name: str,
        model: torch.nn.Module,
        reduced_step: Callable[[torch.Tensor, torch.Tensor], List[torch.Tensor]],
    ) -> None:
        """Checks one side after its timed block.

        1. The parameters must be identical on every rank (each rank trained
           on different data, so a missing or wrong reduction shows here).
        2. One more step on the check batch: the reduced gradients must be
           the average of every rank's local gradients, element by element.
        """
        b = self.b
        params = list(model.parameters())
        mine = _flat(params)
        root = mine.clone()
        b.comm.Bcast(root.numpy(), root=0)
        b.checker.close_all(f"W4 {name}: parameters differ from rank 0's", mine, root, 0.0, 0.0)

        self.reference_model.load_state_dict(model.state_dict())
        self.reference_model.zero_grad()
        F.mse_loss(self.reference_model(self.check_batch[0]), self.check_batch[1]).backward()
        local = _flat(p.grad for p in self.reference_model.parameters()).numpy()
        gathered = np.empty((b.size, local.size), dtype=np.float32)
        b.comm.Allgather(local, gathered)
        everyone = torch.from_numpy(gathered)
        expected = everyone.to(torch.float64).sum(0) / b.size
        got = _flat(reduced_step(*self.check_batch))
        scale = float(everyone.abs().max())
        b.checker.close_all(
            f"W4 {name}: reduced gradients (flattened) != average of local ones",
            got,
            expected,
            1e-5,
            1e-5 * scale,
        )

    def accord_reduced_step(self, x, y) -> List[torch.Tensor]:
        opt = self.accord_opt
        opt.zero_grad()
        F.mse_loss(self.accord_model(x), y).backward()
        opt.synchronize()
        grads = [p.grad.clone() for p in self.accord_model.parameters()]
        with opt.skip_synchronize():
            opt.step()
        return grads

    def accord_blocking_reduced_step(self, x, y) -> List[torch.Tensor]:
        self.accord_blocking_opt.zero_grad()
        F.mse_loss(self.accord_blocking_model(x), y).backward()
        self._accord_reduce()
        grads = [p.grad.clone() for p in self.accord_blocking_model.parameters()]
        self.accord_blocking_opt.step()
        return grads

    def mpi_reduced_step(self, x, y) -> List[torch.Tensor]:
        self.mpi_opt.zero_grad()
        F.mse_loss(self.mpi_model(x), y).backward()
        self._mpi_reduce()
        grads = [p.grad.clone() for p in self.mpi_model.parameters()]
        self.mpi_opt.step()
        return grads

    def ddp_reduced_step(self, x, y) -> List[torch.Tensor]:
        self.ddp_opt.zero_grad()
        F.mse_loss(self.ddp_model(x), y).backward()
        grads = [p.grad.clone() for p in self.ddp_model.module.parameters()]
        self.ddp_opt.step()
        return grads


def _cpu_bound(
    samples_per_step: int, rates: Dict[str, List[List[float]]], idle_of: Dict[str, List[float]]
) -> List[List[float]]:
    """W4's samples/s that the host's CPUs allow, per round (empty if unknown).

    A step needs the CPU time no_exchange keeps busy and the CPU time
    exchange_alone keeps busy, whether they overlap or not, so on CPUs that
    are all busy for both it takes about the sum (about: the exchange's busy
    time includes its short spins, and work side by side may cost a little
    more or less than apart).
    """
    compute, exchange = idle_of["no_exchange"], idle_of["exchange_alone"]
    if len(compute) != len(rates["no_exchange"]) or len(exchange) != len(rates["exchange_alone"]):
        return []
    bound = []
    for c, e, ci, ei in zip(rates["no_exchange"], rates["exchange_alone"], compute, exchange):
        busy = samples_per_step / c[0] * (1.0 - ci) + samples_per_step / e[0] * (1.0 - ei)
        bound.append([samples_per_step / busy])
    return bound


def run_w4(b: Bench) -> Optional[str]:
    """Runs W4; returns a note for the table about the np-1 baseline."""
    o = b.opts
    w = _W4(b)
    # no_exchange: every rank trains its own copy and exchanges nothing. Its
    # efficiency is what the machine allows any method (the ranks share the
    # memory system); it is not checked, since the copies diverge.
    # accord_blocking: accord's grouped allreduce after backward, to show what
    # DistributedOptimizer's overlap with backward is worth.
    # exchange_alone: accord_blocking's exchange with no computation; its
    # waits sleep, so the CPU time it leaves idle is CPU time the exchange
    # does not need. A step needs about no_exchange's busy CPU time plus
    # exchange_alone's, however the two overlap: cpu_bound, about the
    # samples/s the machine's CPUs allow any method (_cpu_bound). (mpi4py's exchange spins while it
    # waits, so the idle time beside it says nothing.)
    sides = [
        Side("accord", True, w.accord_step),
        Side("accord_blocking", True, w.accord_blocking_step),
        Side("mpi4py_blocking", False, w.mpi_step),
        Side("ddp_gloo", False, w.ddp_step),
        Side("no_exchange", False, w.single_step),
        Side("exchange_alone", True, w.exchange_step),
    ]
    model_of = {
        "accord": w.accord_model,
        "accord_blocking": w.accord_blocking_model,
        "mpi4py_blocking": w.mpi_model,
        "ddp_gloo": w.ddp_model.module,
    }
    reduced_of = {
        "accord": w.accord_reduced_step,
        "accord_blocking": w.accord_blocking_reduced_step,
        "mpi4py_blocking": w.mpi_reduced_step,
        "ddp_gloo": w.ddp_reduced_step,
    }
    rates: Dict[str, List[List[float]]] = {s.name: [] for s in sides}
    single: List[List[float]] = []
    idle_of: Dict[str, List[float]] = {"no_exchange": [], "exchange_alone": []}
    given = o.np1_samples_per_s
    for rnd in range(o.w4_rounds):
        if given is None:
            # The np-1 baseline: rank 0 trains alone while the others sleep in a barrier.
            b.use_reference()
            b.barrier()
            if b.rank == 0:
                single.append([w.block(w.single_step, collective=False)])
            lazy_barrier(b.comm)
        else:
            single.append([given])
        for side in rotated(sides, rnd):
            b.prepare(side)
            idle = idle_of.get(side.name)
            rates[side.name].append([b.size * w.block(side.run, collective=True, idle=idle)])
            if side.name in model_of:
                w.check(side.name, model_of[side.name], reduced_of[side.name])
        b.log_round("W4", rnd, "samples/s", dict(rates, np1_single=single))

    if b.rank != 0:
        return None
    ideal = [[b.size * r[0]] for r in single]  # N x np-1 samples/s, per round
    cpu_bound = _cpu_bound(b.size * o.w4_batch, rates, idle_of)
    rates_exchange = rates.pop("exchange_alone")  # not a way to train
    efficiency = {name: paired_ratio(rates[name], ideal) for name in rates}
    accord = median(flatten(rates["accord"]))
    b.reporter.add_ratio(
        Figure("W4", "samples_per_s", accord, "np1_x_size", median(flatten(ideal)), efficiency["accord"]),
        o.w4_target_efficiency,
    )
    for ref in ("accord_blocking", "mpi4py_blocking", "ddp_gloo"):
        b.reporter.add_ratio(
            Figure(
                "W4",
                "samples_per_s",
                accord,
                ref,
                median(flatten(rates[ref])),
                paired_ratio(rates["accord"], rates[ref]),
            ),
            1.0,
        )
    for ref in ("mpi4py_blocking", "ddp_gloo", "no_exchange"):
        ratio = efficiency["accord"] / efficiency[ref] if efficiency[ref] else 0.0
        b.reporter.add(Figure("W4", "scaling_efficiency", efficiency["accord"], ref, efficiency[ref], ratio))
    if cpu_bound:
        b.reporter.add(
            Figure(
                "W4",
                "samples_per_s",
                accord,
                "cpu_bound",
                median(flatten(cpu_bound)),
                paired_ratio(rates["accord"], cpu_bound),
            )
        )
    source = (
        "given by --np1-samples-per-s" if given is not None else "measured by rank 0 alone in every round"
    )
    note = (
        f"W4 np-1 baseline: {median(flatten(single)):.1f} samples/s ({source}); "
        "efficiency = group samples/s / (np x np-1 samples/s), paired per round."
    )
    if not cpu_bound:
        return note + " W4 cpu_bound: unknown (no /proc/stat)."
    return (
        note + " W4 cpu_bound = np x batch / (no_exchange's step x its busy share + "
        "exchange_alone's step x its busy share), per round, from rank 0's host's CPU time; "
        f"idle during no_exchange {100 * median(idle_of['no_exchange']):.0f} %, during "
        f"exchange_alone {100 * median(idle_of['exchange_alone']):.0f} % (the exchange alone "
        f"took {1e3 * b.size * o.w4_batch / median(flatten(rates_exchange)):.1f} ms a step); "
        f"mpi4py_blocking / cpu_bound = {paired_ratio(rates['mpi4py_blocking'], cpu_bound):.3f}."
    )
