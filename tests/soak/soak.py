"""A soak run of accord.torch: many steps of mixed collectives, checked, with
resource use sampled for leaks.

Run on every rank, under mpiexec (4 ranks; ``--oversubscribe`` on small
machines), with the staged package on the path::

    mpiexec -n 4 --oversubscribe -x PYTHONPATH=build/python \
        python3 tests/soak/soak.py --steps 10000

(about 3 minutes on 2 cores; CTest runs 500 steps as ``soak_short_np4``).

Each step runs one kind of work, in a fixed rotation: a synchronous
allreduce, asynchronous allreduces synchronised in reverse order, a grouped
allreduce of mixed dtypes, an allgather of uneven rows, a broadcast from a
rotating root, an alltoall with uneven (and empty) splits, a reducescatter
of uneven rows, and one step of a small model trained with
DistributedOptimizer. Names recur (as gradients' names do), are new every
step (the response cache keeps evicting), or are absent (matched by order).
Every input is built from a seed (the key and the rank), so every rank
computes every result itself and checks every element: exactly for sums,
minima and maxima of small integers and quarter steps, within a stated
tolerance for averages and the training step.

Between the steps:

* every ``--set-every`` steps a process set is added, used by its members,
  refused to the others (ValueError), and removed;
* every ``--error-every`` steps an error is injected, in rotation: a shape,
  dtype, op, root or trailing-dimension mismatch (``HorovodInternalError`` on
  every rank, naming what differs), a name reused while in flight
  (``ValueError``), or an argument refused on one rank alone (``ValueError``);
  a correct collective is checked after each;
* every ``--cycle-every`` steps accord is shut down and initialised again.

Resources: every ``--sample-every`` steps each rank records its resident
memory (VmRSS of /proc/self/status), its open file descriptors
(/proc/self/fd) and its threads (/proc/self/task), and at every shutdown
and init the same counts. The run fails if, after warm-up (the first
quarter of the steps):

* RSS grows: every sample of the last three quarters must stay within
  ``--rss-bound-mib`` (default 4 MiB) of the sample taken when warm-up
  ended. Why 4 MiB: the work per step is the same throughout, so steady
  state means flat memory; what remains is the allocator's noise (glibc
  arenas, torch's caching of small tensors, Python's free lists), which
  measured 0.1-0.2 MiB over the 7,500 steps after warm-up of a 10,000-step
  run on 4 ranks. Those steps run about 15,000 collectives per rank, so the
  bound catches a leak of about 280 bytes per collective (one small heap
  object per operation) in the long run, and of about 5 KiB per collective
  in the short run (500 steps), which is there to catch gross leaks and
  the other checks.
* file descriptors or threads change: while initialised, every sample must
  equal the first one after warm-up exactly, and after each shutdown and
  init the counts must equal those of the first cycle exactly. accord's
  own threads (the coordinator, and those of the backends) must end at
  shutdown and its descriptors must be closed; nothing else in the process
  opens either at this point of the run.

``--inject-leak rss|fds|threads`` makes the run leak on purpose (16 KiB
per step after warm-up; a descriptor of /dev/null or a sleeping thread per
shutdown/init cycle), to see each check fail.

Each rank prints one line of JSON at the end (``soak:`` followed by the
object): steps, seconds, counts of collectives, errors injected, cycles and
process sets, and RSS (MiB), fds and threads at warm-up, at the end and at
their maximum; then every resource check that failed, and exits with 1 if
any did. A failed check of a result ends the whole job at once (MPI_Abort)
after printing what differed, so no rank waits forever; a watchdog ends a rank
whose step takes longer than ``--step-timeout`` seconds or whose run takes
longer than ``--timeout`` seconds, printing every thread's stack.
"""

import argparse
import faulthandler
import gc
import json
import os
import sys
import threading
import time
import zlib
from typing import Dict, List, Optional, Sequence

import torch

import accord.torch as hvd
from accord import _core

FAILED_EXIT = 1


# ------------------------------------------------------------------ checks


def fail(message: str) -> None:
    """Ends every rank: one rank's failed check would leave the others waiting."""
    sys.stdout.flush()
    sys.stderr.write(f"soak: rank {_core.rank()}: FAILED: {message}\n")
    sys.stderr.flush()
    _core.abort(FAILED_EXIT)


def check_equal(what: str, got: torch.Tensor, expected: torch.Tensor, rel_tolerance: float = 0.0) -> None:
    """Every element of ``got`` against ``expected``; the message names the
    rank, the index, the expected and the received value."""
    if not isinstance(got, torch.Tensor):
        fail(f"{what}: expected a tensor, got {type(got).__name__}")
    if got.dtype != expected.dtype or tuple(got.shape) != tuple(expected.shape):
        fail(f"{what}: expected {expected.dtype} {list(expected.shape)}, got {got.dtype} {list(got.shape)}")
    g = got.detach().reshape(-1).to(torch.float64)
    e = expected.detach().reshape(-1).to(torch.float64)
    if rel_tolerance > 0:
        close = (g - e).abs() <= rel_tolerance * torch.clamp(e.abs(), min=1.0)
    else:
        close = g == e
    if not bool(close.all()):
        i = int((~close).nonzero()[0])
        fail(
            f"{what}: {int((~close).sum())} of {e.numel()} elements differ; first at index {i}: "
            f"expected {e[i].item()!r}, got {g[i].item()!r}"
        )


def expect_raise(what: str, exception, contains: Optional[str], call) -> None:
    """``call()`` must raise ``exception`` (a class or a tuple of classes)
    whose message contains ``contains``."""
    expected = " or ".join(e.__name__ for e in (exception if isinstance(exception, tuple) else (exception,)))
    try:
        call()
    except exception as e:
        if contains is not None and contains not in str(e):
            fail(f"{what}: {type(e).__name__} without '{contains}' in its message: {e}")
        return
    except Exception as e:  # noqa: BLE001 -- anything else is the failure being reported
        fail(f"{what}: expected {expected}, got {type(e).__name__}: {e}")
    fail(f"{what}: expected {expected}, nothing was raised")


# ------------------------------------------------------------------ inputs

DTYPES = [
    torch.float32,
    torch.int32,
    torch.float64,
    torch.int64,
    torch.float16,
    torch.bfloat16,
    torch.int8,
    torch.uint8,
]


def values(key: str, rank: int, shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
    """Rank ``rank``'s input for ``key``: integers in [-8, 8] ([0, 8] for
    uint8), floats with quarter steps, so sums of 4 ranks are exact in every
    dtype, including int8, float16 and bfloat16."""
    generator = torch.Generator().manual_seed(zlib.crc32(f"{key}/{rank}".encode()))
    low = 0 if dtype == torch.uint8 else -8
    v = torch.randint(low, 9, tuple(shape), generator=generator).to(torch.float64)
    if dtype.is_floating_point:
        v = v + torch.randint(0, 4, tuple(shape), generator=generator).to(torch.float64) / 4
    return v.to(dtype)


def every_rank(key: str, shape_of, dtype: torch.dtype, ranks: Sequence[int]) -> List[torch.Tensor]:
    return [values(key, r, shape_of(r) if callable(shape_of) else shape_of, dtype) for r in ranks]


def reduce(inputs: Sequence[torch.Tensor], op: int) -> torch.Tensor:
    acc = inputs[0].to(torch.float64)
    for x in inputs[1:]:
        x = x.to(torch.float64)
        if op in (hvd.Sum, hvd.Average):
            acc = acc + x
        elif op == hvd.Min:
            acc = torch.minimum(acc, x)
        elif op == hvd.Max:
            acc = torch.maximum(acc, x)
    if op == hvd.Average:
        acc = acc / len(inputs)
    return acc.to(inputs[0].dtype)


# ------------------------------------------------------------------ resources


def rss_kib() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS in /proc/self/status")


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd")) - 1  # less the one listdir itself holds open


def threads() -> int:
    return len(os.listdir("/proc/self/task"))


def sample() -> Dict[str, int]:
    gc.collect()  # Python garbage in reference cycles is not a leak
    return {"rss_kib": rss_kib(), "fds": open_fds(), "threads": threads()}


# ------------------------------------------------------------------ the run


class Soak:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.counts = {
            "collectives": 0,
            "errors_injected": 0,
            "cycles": 0,
            "process_sets": 0,
            "training_steps": 0,
        }
        self.model: Optional[torch.nn.Module] = None
        self.optimizer = None
        self.model_step = 0

    # ------------------------------------------------------------ helpers

    def name(self, step: int, kind: str) -> Optional[str]:
        """Recurring, new or no name, in turn."""
        choice = step % 3
        if choice == 0:
            return f"soak.{kind}.{step % 16}"
        if choice == 1:
            return f"soak.{kind}.at.{step}"
        return None

    def in_step(self, what: str) -> None:
        """Unnamed collectives that match only if every rank's state agrees."""
        size, me = hvd.size(), hvd.rank()
        total = hvd.allreduce(torch.tensor([float(me + 1)]), op=hvd.Sum)
        check_equal(f"after {what}: unnamed allreduce", total, torch.tensor([size * (size + 1) / 2]))
        gathered = hvd.allgather(torch.full((me + 1, 2), float(me)))
        check_equal(
            f"after {what}: unnamed allgather",
            gathered,
            torch.cat([torch.full((r + 1, 2), float(r)) for r in range(size)]),
        )
        self.counts["collectives"] += 2

    # ------------------------------------------------------------ the step kinds

    def allreduce_sync(self, step: int) -> None:
        ranks = range(hvd.size())
        dtype = DTYPES[step % len(DTYPES)]
        op = [hvd.Sum, hvd.Min, hvd.Max][step % 3]
        key = f"ar.sync.{step}"
        inputs = every_rank(key, (1 + step % 37, 3), dtype, ranks)
        got = hvd.allreduce(inputs[hvd.rank()], op=op, name=self.name(step, "ar"))
        check_equal(f"step {step}: allreduce {op} {dtype}", got, reduce(inputs, op))
        self.counts["collectives"] += 1

    def allreduce_async(self, step: int) -> None:
        ranks = range(hvd.size())
        pending = []
        for i, (dtype, op) in enumerate(
            [
                (torch.float32, hvd.Sum),
                (torch.int32, hvd.Max),
                (torch.float64, hvd.Average),
                (torch.int16, hvd.Min),
            ]
        ):
            key = f"ar.async.{step}.{i}"
            inputs = every_rank(key, (5 + (step + i) % 300,), dtype, ranks)
            name = self.name(step, f"ar.async.{i}")
            if i % 2 == 0:
                handle = hvd.allreduce_async(inputs[hvd.rank()], op=op, name=name)
                pending.append((key, op, handle, reduce(inputs, op), None))
            else:
                tensor = inputs[hvd.rank()].clone()
                handle = hvd.allreduce_async_(tensor, op=op, name=name)
                pending.append((key, op, handle, reduce(inputs, op), tensor))
        for key, op, handle, expected, in_place in reversed(pending):
            got = hvd.synchronize(handle)
            if in_place is not None and got is not in_place:
                fail(f"step {step}: {key}: the in-place allreduce did not return its tensor")
            # Average divides by the size: exact for 4 ranks, within an ulp otherwise.
            check_equal(f"step {step}: {key}", got, expected, 1e-12 if op == hvd.Average else 0.0)
        self.counts["collectives"] += len(pending)

    def grouped_allreduce(self, step: int) -> None:
        ranks = range(hvd.size())
        dtypes = [torch.float32, torch.int64, torch.bfloat16]
        inputs = [
            every_rank(f"grouped.{step}.{i}", (2 + (step + i) % 11, 2), d, ranks)
            for i, d in enumerate(dtypes)
        ]
        got = hvd.grouped_allreduce(
            [x[hvd.rank()] for x in inputs], op=hvd.Sum, name=self.name(step, "grouped")
        )
        if len(got) != len(dtypes):
            fail(f"step {step}: grouped allreduce returned {len(got)} tensors, expected {len(dtypes)}")
        for i, x in enumerate(inputs):
            check_equal(f"step {step}: grouped allreduce [{i}]", got[i], reduce(x, hvd.Sum))
        self.counts["collectives"] += 1

    def allgather(self, step: int) -> None:
        size, me = hvd.size(), hvd.rank()
        dtype = DTYPES[(step // 8) % len(DTYPES)]
        inputs = every_rank(f"ag.{step}", lambda r: ((r + step) % 4, 3), dtype, range(size))
        got = hvd.allgather(inputs[me], name=self.name(step, "ag"))
        check_equal(f"step {step}: allgather {dtype}", got, torch.cat(inputs))
        self.counts["collectives"] += 1

    def broadcast(self, step: int) -> None:
        size, me = hvd.size(), hvd.rank()
        root = step % size
        dtype = DTYPES[(step // 8 + 3) % len(DTYPES)]
        inputs = every_rank(f"bc.{step}", (3 + step % 50,), dtype, range(size))
        if step % 2:
            got = hvd.broadcast(inputs[me], root_rank=root, name=self.name(step, "bc"))
        else:
            got = inputs[me].clone()
            hvd.broadcast_(got, root_rank=root, name=self.name(step, "bc"))
        check_equal(f"step {step}: broadcast from {root}", got, inputs[root])
        self.counts["collectives"] += 1

    def alltoall(self, step: int) -> None:
        size, me = hvd.size(), hvd.rank()
        splits = [[(q + j + step) % 3 for j in range(size)] for q in range(size)]  # zeros included
        inputs = every_rank(f"a2a.{step}", lambda q: (sum(splits[q]), 2), torch.float32, range(size))
        got, received = hvd.alltoall(inputs[me], splits=splits[me], name=self.name(step, "a2a"))
        expected = torch.cat([inputs[q][sum(splits[q][:me]) : sum(splits[q][: me + 1])] for q in range(size)])
        check_equal(f"step {step}: alltoall", got, expected)
        check_equal(
            f"step {step}: alltoall received splits",
            received,
            torch.tensor([splits[q][me] for q in range(size)], dtype=torch.int32),
        )
        self.counts["collectives"] += 1

    def reducescatter(self, step: int) -> None:
        size, me = hvd.size(), hvd.rank()
        rows = size + step % (2 * size + 1)
        inputs = every_rank(f"rs.{step}", (rows, 3), torch.float32, range(size))
        got = hvd.reducescatter(inputs[me], op=hvd.Sum, name=self.name(step, "rs"))
        first = me * (rows // size) + min(me, rows % size)
        count = rows // size + (1 if me < rows % size else 0)
        check_equal(f"step {step}: reducescatter", got, reduce(inputs, hvd.Sum)[first : first + count])
        self.counts["collectives"] += 1

    def training_step(self, step: int) -> None:
        """One SGD step of a small float64 model with DistributedOptimizer,
        against the same step taken locally with the average of every rank's
        gradient (each rank computes them all from the seeded batches)."""
        size, me = hvd.size(), hvd.rank()
        if self.model is None:  # once per init cycle: hooks bind to this runtime
            torch.manual_seed(7)
            self.model = torch.nn.Sequential(
                torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 2)
            ).double()
            hvd.broadcast_parameters(self.model.state_dict(), root_rank=0)
            self.optimizer = hvd.DistributedOptimizer(
                torch.optim.SGD(self.model.parameters(), lr=0.05),
                named_parameters=self.model.named_parameters(),
            )
            self.counts["collectives"] += len(self.model.state_dict())
        before = [p.detach().clone() for p in self.model.parameters()]
        batches = [
            (
                values(f"train.x.{step}", r, (4, 6), torch.float64),
                values(f"train.y.{step}", r, (4, 2), torch.float64),
            )
            for r in range(size)
        ]
        grads = []
        for x, y in batches:
            reference = torch.nn.Sequential(
                torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 2)
            ).double()
            with torch.no_grad():
                for p, b in zip(reference.parameters(), before):
                    p.copy_(b)
            torch.nn.functional.mse_loss(reference(x), y).backward()
            grads.append([p.grad for p in reference.parameters()])
        self.optimizer.zero_grad()
        x, y = batches[me]
        torch.nn.functional.mse_loss(self.model(x), y).backward()
        self.optimizer.step()
        for i, p in enumerate(self.model.parameters()):
            mean_grad = sum(g[i] for g in grads) / size
            check_equal(
                f"step {step}: parameter {i} after the training step",
                p.detach(),
                before[i] - 0.05 * mean_grad,
                1e-12,
            )
        self.counts["collectives"] += len(before)
        self.counts["training_steps"] += 1

    KINDS = [
        "allreduce_sync",
        "allreduce_async",
        "grouped_allreduce",
        "allgather",
        "broadcast",
        "alltoall",
        "reducescatter",
        "training_step",
    ]

    # ------------------------------------------------------------ process sets

    def process_set_round(self, step: int) -> None:
        size, me = hvd.size(), hvd.rank()
        rotation = (step // self.args.set_every) % 3
        members = [[0, size - 1], [r for r in range(size) if r != 0], list(range(0, size, 2))][rotation]
        members = sorted(set(members))
        process_set = hvd.add_process_set(members)
        key = f"set.{step}"
        if me in members:
            inputs = every_rank(key, (7,), torch.int32, members)
            got = hvd.allreduce(inputs[members.index(me)], op=hvd.Sum, name=key, process_set=process_set)
            check_equal(f"step {step}: allreduce on {members}", got, reduce(inputs, hvd.Sum))
            got = hvd.allgather(torch.full((1,), float(me)), process_set=process_set)
            check_equal(
                f"step {step}: allgather on {members}", got, torch.tensor([float(r) for r in members])
            )
            self.counts["collectives"] += 2
        else:
            expect_raise(
                f"step {step}: allreduce on {members} from rank {me}",
                ValueError,
                "not a member",
                lambda: hvd.allreduce(torch.ones(1), name=key, process_set=process_set),
            )
        hvd.remove_process_set(process_set)
        expect_raise(
            f"step {step}: allreduce on a removed set",
            ValueError,
            None,
            lambda: hvd.allreduce(torch.ones(1), name=key + ".removed", process_set=process_set),
        )
        self.counts["process_sets"] += 1
        self.in_step(f"process set {members} at step {step}")

    # ------------------------------------------------------------ errors

    def inject_error(self, step: int) -> None:
        size, me = hvd.size(), hvd.rank()
        kind = (step // self.args.error_every) % 7
        key = f"soak.error.{step}"
        other = me == size - 1  # the rank that disagrees
        if kind == 0:
            expect_raise(
                f"step {step}: shape mismatch",
                hvd.HorovodInternalError,
                "shape",
                lambda: hvd.allreduce(torch.ones(4 if other else 3), name=key),
            )
        elif kind == 1:
            expect_raise(
                f"step {step}: dtype mismatch",
                hvd.HorovodInternalError,
                "dtype",
                lambda: hvd.allreduce(
                    torch.ones(3, dtype=torch.float64 if other else torch.float32), name=key
                ),
            )
        elif kind == 2:
            expect_raise(
                f"step {step}: op mismatch",
                hvd.HorovodInternalError,
                key,
                lambda: hvd.allreduce(torch.ones(3), op=hvd.Max if other else hvd.Sum, name=key),
            )
        elif kind == 3:
            expect_raise(
                f"step {step}: root mismatch",
                hvd.HorovodInternalError,
                key,
                lambda: hvd.broadcast(torch.ones(2), root_rank=1 if other else 0, name=key),
            )
        elif kind == 4:
            expect_raise(
                f"step {step}: allgather trailing-dimension mismatch",
                hvd.HorovodInternalError,
                key,
                lambda: hvd.allgather(torch.ones(2, 3 if other else 2), name=key),
            )
        elif kind == 5:
            self.name_in_flight(step, key)
        else:
            if me == 0:  # refused at enqueue, on this rank alone
                expect_raise(
                    f"step {step}: reducescatter with Max",
                    ValueError,
                    None,
                    lambda: hvd.reducescatter(torch.ones(4), op=hvd.Max, name=key),
                )
                expect_raise(
                    f"step {step}: broadcast from a rank outside the job",
                    ValueError,
                    None,
                    lambda: hvd.broadcast(torch.ones(3), root_rank=size + 5, name=key),
                )
        self.counts["errors_injected"] += 1
        self.in_step(f"error {kind} at step {step}")

    def name_in_flight(self, step: int, key: str) -> None:
        """A name reused while in flight is refused (ValueError); the first completes."""
        size, me = hvd.size(), hvd.rank()
        inputs = every_rank(key, (8,), torch.float32, range(size))
        hvd.barrier()
        # Rank 0 submits only after the barrier, which the others enter after
        # their second submission: until then the name is in flight there.
        first = None
        if me != 0:
            first = hvd.allreduce_async(inputs[me], op=hvd.Sum, name=key)
            expect_raise(
                f"step {step}: name reused while in flight",
                ValueError,
                "in flight",
                lambda: hvd.allreduce_async(inputs[me], op=hvd.Sum, name=key),
            )
        hvd.barrier()
        if me == 0:
            first = hvd.allreduce_async(inputs[0], op=hvd.Sum, name=key)
        check_equal(
            f"step {step}: the first of a reused name", hvd.synchronize(first), reduce(inputs, hvd.Sum)
        )
        self.counts["collectives"] += 3

    # ------------------------------------------------------------ cycles

    def cycle(self, step: int) -> Dict[str, Dict[str, int]]:
        """Shuts accord down and initialises it again; returns the counts after each."""
        hvd.barrier()  # no rank may still be in a collective of this cycle
        self.optimizer = None
        self.model = None
        hvd.shutdown()
        if hvd.is_initialized():
            fail(f"step {step}: still initialised after shutdown()")
        expect_raise(
            f"step {step}: allreduce after shutdown",
            (ValueError, hvd.HorovodInternalError),
            None,
            lambda: hvd.allreduce(torch.ones(1), name="soak.after_shutdown"),
        )
        down = sample()
        hvd.init()
        up = sample()
        self.counts["cycles"] += 1
        self.in_step(f"init/shutdown cycle at step {step}")
        return {"down": down, "up": up}


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=10000)
    parser.add_argument("--sample-every", type=int, default=50, help="steps between resource samples")
    parser.add_argument(
        "--cycle-every",
        type=int,
        default=0,
        help="steps between shutdown/init cycles (default: steps / 20, at least 50)",
    )
    parser.add_argument("--set-every", type=int, default=25, help="steps between process set rounds")
    parser.add_argument("--error-every", type=int, default=20, help="steps between injected errors")
    parser.add_argument(
        "--inject-leak",
        choices=["rss", "fds", "threads"],
        help="leak on purpose, to see the check fail (see the module docstring)",
    )
    parser.add_argument(
        "--rss-bound-mib",
        type=float,
        default=4.0,
        help="RSS growth allowed after warm-up (see the module docstring)",
    )
    parser.add_argument("--step-timeout", type=float, default=120.0, help="seconds one step may take")
    parser.add_argument("--timeout", type=float, default=7200.0, help="seconds the whole run may take")
    args = parser.parse_args(argv)
    for flag in ("steps", "sample_every", "set_every", "error_every"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag.replace('_', '-')} must be at least 1, got {getattr(args, flag)}")
    if args.steps < 8:
        parser.error(f"--steps must be at least 8 (one of each kind of step), got {args.steps}")
    if args.cycle_every == 0:
        args.cycle_every = max(50, args.steps // 20)
    if args.cycle_every < 0 or args.rss_bound_mib <= 0 or args.step_timeout <= 0 or args.timeout <= 0:
        parser.error("--cycle-every, --rss-bound-mib, --step-timeout and --timeout must be positive")
    return args


def main(argv: Sequence[str]) -> int:
    args = parse_args(argv)
    start = time.monotonic()
    deadline = start + args.timeout

    def arm_watchdog() -> None:
        # Ends this rank (and with it the job) with every thread's stack if
        # the next step, or the run, takes too long.
        faulthandler.dump_traceback_later(
            max(1.0, min(args.step_timeout, deadline - time.monotonic())), exit=True
        )

    arm_watchdog()
    # One intra-op thread: the thread count is then accord's alone (torch
    # would start its pool lazily, at its first large enough op), and four
    # ranks on two cores are not slowed by pools fighting for them.
    torch.set_num_threads(1)
    hvd.init()
    if hvd.size() < 2:
        sys.stderr.write("soak: needs at least 2 ranks (run it under mpiexec)\n")
        hvd.shutdown()
        return 2
    soak = Soak(args)
    me = hvd.rank()
    warmup_end = args.steps // 4
    samples: List[Dict[str, int]] = []
    warm: Optional[Dict[str, int]] = None
    first_cycle: Optional[Dict[str, Dict[str, int]]] = None
    problems: List[str] = []
    leaked: List[object] = []  # --inject-leak

    for step in range(args.steps):
        arm_watchdog()
        if time.monotonic() > deadline:
            fail(f"the run took longer than --timeout {args.timeout} s (at step {step})")
        if step > 0 and step % args.cycle_every == 0:
            counts = soak.cycle(step)
            if args.inject_leak == "fds":
                leaked.append(open(os.devnull))  # noqa: SIM115 -- kept open on purpose
            elif args.inject_leak == "threads":
                stop_leaked_threads = threading.Event()
                threading.Thread(target=stop_leaked_threads.wait, daemon=True).start()
            if first_cycle is None:
                first_cycle = counts
            else:
                for phase in ("down", "up"):
                    for what in ("fds", "threads"):
                        if counts[phase][what] != first_cycle[phase][what]:
                            problems.append(
                                f"{what} after {'shutdown' if phase == 'down' else 'init'} at step "
                                f"{step}: {counts[phase][what]}, first cycle: {first_cycle[phase][what]}"
                            )
        if step % args.sample_every == 0 or step == warmup_end:
            now = sample()
            now["step"] = step
            samples.append(now)
            if step == warmup_end:
                warm = now
            elif warm is not None:
                for what in ("fds", "threads"):
                    if now[what] != warm[what]:
                        problems.append(f"{what} at step {step}: {now[what]}, at warm-up: {warm[what]}")
        if step > 0 and step % args.set_every == 0:
            soak.process_set_round(step)
        if step > 0 and step % args.error_every == 0:
            soak.inject_error(step)
        getattr(soak, Soak.KINDS[step % len(Soak.KINDS)])(step)
        if args.inject_leak == "rss" and step >= warmup_end:
            leaked.append(bytearray(b"x" * 16384))

    # The last sample comes before the final barrier: once a rank has passed
    # it and shut down, the others' coordinators end too (a shutdown is
    # collective), and their threads would be missing from the count.
    end = sample()
    end["step"] = args.steps
    samples.append(end)
    for what in ("fds", "threads"):
        if warm is not None and end[what] != warm[what]:
            problems.append(f"{what} at the end: {end[what]}, at warm-up: {warm[what]}")
    arm_watchdog()
    hvd.barrier()
    seconds = time.monotonic() - start
    hvd.shutdown()
    faulthandler.cancel_dump_traceback_later()

    after_warmup = [s for s in samples if s["step"] >= warmup_end]
    if warm is None:
        problems.append("no sample at the end of warm-up")
    else:
        bound_kib = args.rss_bound_mib * 1024
        worst = max(after_warmup, key=lambda s: s["rss_kib"])
        if worst["rss_kib"] - warm["rss_kib"] > bound_kib:
            problems.append(
                f"RSS grew by {(worst['rss_kib'] - warm['rss_kib']) / 1024:.1f} MiB after warm-up "
                f"(step {warm['step']}: {warm['rss_kib'] / 1024:.1f} MiB, step {worst['step']}: "
                f"{worst['rss_kib'] / 1024:.1f} MiB), more than --rss-bound-mib {args.rss_bound_mib}"
            )

    def figures(what: str, scale: float = 1.0) -> Dict[str, float]:
        pick = (lambda s: round(s[what] / scale, 1)) if scale != 1.0 else (lambda s: s[what])
        return {
            "start": pick(samples[0]),
            "warmup": pick(warm) if warm else None,
            "end": pick(end),
            "max_after_warmup": max(pick(s) for s in after_warmup) if after_warmup else None,
            "max": max(pick(s) for s in samples),
        }

    report = {
        "rank": me,
        "steps": args.steps,
        "seconds": round(seconds, 1),
        **soak.counts,
        "rss_mib": figures("rss_kib", 1024.0),
        "fds": figures("fds"),
        "threads": figures("threads"),
        "first_cycle": first_cycle,
        "samples": len(samples),
        "ok": not problems,
    }
    sys.stdout.write("soak: " + json.dumps(report) + "\n")
    sys.stdout.flush()
    for problem in problems[:20]:
        sys.stderr.write(f"soak: rank {me}: FAILED: {problem}\n")
    if len(problems) > 20:
        sys.stderr.write(f"soak: rank {me}: ... and {len(problems) - 20} more\n")
    return FAILED_EXIT if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
