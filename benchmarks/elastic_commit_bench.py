"""What an elastic commit costs a training step: ResNet-18 with SGD momentum, committed at intervals.

Trains synthetic_resnet.py's ResNet-18 (11.7M parameters) on one fixed
random batch per rank through ``DistributedOptimizer`` and times the steps
with ``TorchState.commit()`` never, every batch and every 10 batches, the
commit going

* to memory only (``save()`` and the host check: elastic mode without a
  spill directory, or hvd.elastic outside accordrun),
* to a spill file written before ``commit()`` returns (``sync``, the default
  of accordrun's elastic mode), or
* to a spill file written by a background thread (``async``).

Spill files are written as accordrun's elastic mode writes them (the first
rank of each host, ``accord.elastic_spill.SpillWriter``, in ``--spill-dir``,
by default under /dev/shm); the one-line report to the driver is left out.
The configurations take turns in rounds, so that a machine that slows down
midway slows all of them alike; each one's time is its median over rounds
(the slowest rank's). Rank 0 prints a table: the time of a step alone (a
background write competes with the steps after its commit), of one
``commit()`` call, and of a step with its share of commits. Run it as::

    python benchmarks/elastic_commit_bench.py
    mpirun -np 2 python benchmarks/elastic_commit_bench.py
"""

import argparse
import os
import shutil
import statistics
import sys
import time
from typing import Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F

import accord.torch as hvd
from accord.elastic_spill import SpillWriter
from accord.torch.elastic import TorchState

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from synthetic_resnet import ResNet18  # noqa: E402

# (spill mode, commit interval in batches); interval 0: no commits.
CONFIGS: List[Tuple[str, int]] = [
    ("-", 0),
    ("memory", 1),
    ("memory", 10),
    ("sync", 1),
    ("sync", 10),
    ("async", 1),
    ("async", 10),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch-size", type=int, default=8, help="images per rank per batch (default 8)")
    parser.add_argument("--image-size", type=int, default=64, help="height and width (default 64)")
    parser.add_argument("--steps", type=int, default=10, help="timed batches per configuration and round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=3, help="untimed batches before the rounds")
    parser.add_argument("--threads", type=int, default=0, help="torch threads per rank (default: torch's)")
    parser.add_argument("--spill-dir", default=f"/dev/shm/accord-elastic-bench-{os.getppid()}")
    args = parser.parse_args()

    hvd.init()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(42)
    model = ResNet18()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * hvd.size(), momentum=0.9)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    data = torch.randn(args.batch_size, 3, args.image_size, args.image_size)
    target = torch.randint(0, 1000, (args.batch_size,))
    state = TorchState(model, optimizer, batch=0)

    def step() -> None:
        optimizer.zero_grad()
        F.cross_entropy(model(data), target).backward()
        optimizer.step()
        state.batch += 1

    writers: Dict[str, Optional[SpillWriter]] = {"-": None, "memory": None}
    for mode in ("sync", "async"):
        writers[mode] = None
        if hvd.local_rank() == 0:  # the host's first rank writes, as in elastic mode
            directory = os.path.join(args.spill_dir, f"host{hvd.cross_rank()}-{mode}")
            writers[mode] = SpillWriter(directory, 0, mode == "async", lambda n, path: None)

    def block(mode: str, every: int) -> Tuple[float, List[float]]:
        """``args.steps`` steps, committing after steps 0, every, 2*every, ...: the steps'
        mean ms and each commit's ms."""
        state._spill = writers[mode]
        step_seconds = 0.0
        commits = []
        for i in range(args.steps):
            started = time.perf_counter()
            step()
            step_seconds += time.perf_counter() - started
            if every and i % every == 0:
                started = time.perf_counter()
                state.commit()
                commits.append((time.perf_counter() - started) * 1000)
        if state._spill is not None:
            state._spill.wait()  # untimed: a background write overlaps the steps after its commit
        state._spill = None
        return step_seconds * 1000 / args.steps, commits

    for _ in range(args.warmup):
        step()
    state.commit()
    step_ms: Dict[Tuple[str, int], List[float]] = {config: [] for config in CONFIGS}
    commit_ms: Dict[Tuple[str, int], List[float]] = {config: [] for config in CONFIGS}
    for _ in range(args.rounds):
        for config in CONFIGS:
            mean, commits = block(*config)
            step_ms[config].append(mean)
            commit_ms[config].extend(commits)
    medians = [
        (statistics.median(step_ms[config]), statistics.median(commit_ms[config] or [0.0]))
        for config in CONFIGS
    ]
    slowest = hvd.allreduce(torch.tensor(medians, dtype=torch.float64), op=hvd.Max, name="bench").tolist()
    if hvd.local_rank() == 0:
        shutil.rmtree(args.spill_dir, ignore_errors=True)

    if hvd.rank() == 0:
        parameters = sum(p.numel() for p in model.parameters())
        print(
            f"elastic commit cost: ResNet-18 ({parameters / 1e6:.1f}M parameters), SGD momentum, "
            f"{hvd.size()} rank(s), batch {args.batch_size}x3x{args.image_size}x{args.image_size}, "
            f"{torch.get_num_threads()} torch thread(s) per rank, {args.rounds} rounds x {args.steps} steps, "
            f"spill dir {args.spill_dir}"
        )
        print("step: one batch without its commit; commit(): one call; ms/step: step + commit() / every")
        print(f"{'commit to':<10} {'every':>6} {'step ms':>8} {'commit() ms':>12} {'ms/step':>8}")
        for (mode, every), (step, commit) in zip(CONFIGS, slowest):
            interval = str(every) if every else "never"
            total = step + (commit / every if every else 0.0)
            commit_text = f"{commit:12.1f}" if every else f"{'-':>12}"
            print(f"{mode:<10} {interval:>6} {step:8.1f} {commit_text} {total:8.1f}")
    hvd.shutdown()


if __name__ == "__main__":
    main()
