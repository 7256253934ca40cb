"""W3 (many small asynchronous allreduces) under horovod.torch or accord.torch.

The same code runs either module, imported as ``hvd`` (accord.torch is a
drop-in for horovod.torch), so that the two can be compared side by side
(benchmarks/horovod_w3.sh alternates them). A step is W3 of
python_bench_workloads.py: ``--tensors`` float32 tensors of ``--elems``
elements each, every one submitted with

    hvd.allreduce_async_(t, name=f"w3.{i}", op=hvd.Sum)

and then every handle waited for with ``hvd.synchronize``. Rank r fills its
tensors with r + 1, so every element of every result must be
size * (size + 1) / 2.

Before each step the inputs are refilled and the ranks meet at
``hvd.barrier()`` (both untimed); the step is timed from after the barrier
to the last ``synchronize``. After its timing stopped each step's results
are checked, element by element (warm-up steps too). ``--warmup-steps``
untimed steps come first; the rate is ``--steps`` over the summed time of
the timed steps, on rank 0's clock.

    mpirun -np 2 --bind-to core python3 benchmarks/horovod_w3.py --module=horovod.torch
        [--tensors 256] [--elems 4096] [--steps 50] [--warmup-steps 5]

Rank 0 prints one line ``HVD_W3 {json}`` (module, np, steps_per_s, the
sizes, and wrong_elements summed over the ranks). Any wrong value makes
every rank that saw one print its first failures to stderr and exit with
status 1 (after shutdown).
"""

import argparse
import importlib
import json
import os
import sys
import time
from typing import List, Tuple

# One compute thread per rank, set before torch is imported: two ranks share
# the machine's cores, and the intra-op pools would only compete with them.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import torch  # noqa: E402  (after the thread settings above)

MODULES = ("horovod.torch", "accord.torch")
MAX_REPORTED = 10  # failures printed per rank


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--module", required=True, choices=MODULES, help="the module imported as hvd")
    p.add_argument("--tensors", type=int, default=256, help="tensors allreduced per step")
    p.add_argument("--elems", type=int, default=4096, help="float32 elements per tensor")
    p.add_argument("--steps", type=int, default=50, help="timed steps")
    p.add_argument("--warmup-steps", type=int, default=5, help="untimed steps before them")
    args = p.parse_args()
    if args.tensors < 1 or args.elems < 1 or args.steps < 1 or args.warmup_steps < 0:
        p.error("--tensors, --elems and --steps must be positive, --warmup-steps not negative")
    return args


def failures(step: int, tensors: List[torch.Tensor], expected: float, room: int) -> Tuple[list, int]:
    """Up to ``room`` (step, tensor, element, value) tuples where a result is not
    ``expected``, and the number of wrong elements in this step."""
    wrong = [(i, t) for i, t in enumerate(tensors) if not bool(torch.all(t == expected))]
    found, count = [], 0
    for i, t in wrong:
        bad = (t != expected).nonzero().flatten()
        count += bad.numel()
        for e in bad[: max(room - len(found), 0)].tolist():
            found.append((step, i, e, t[e].item()))
    return found, count


def main() -> int:
    args = parse_args()
    hvd = importlib.import_module(args.module)
    torch.set_num_threads(1)
    hvd.init()
    rank, size = hvd.rank(), hvd.size()

    fill = float(rank + 1)
    expected = size * (size + 1) / 2.0
    tensors = [torch.empty(args.elems, dtype=torch.float32) for _ in range(args.tensors)]
    names = [f"w3.{i}" for i in range(args.tensors)]

    def step() -> None:
        handles = [hvd.allreduce_async_(t, name=n, op=hvd.Sum) for t, n in zip(tensors, names)]
        for h in handles:
            hvd.synchronize(h)

    busy = 0.0
    reported, wrong_total = [], 0
    for index in range(-args.warmup_steps, args.steps):  # negative: warm-up
        for t in tensors:
            t.fill_(fill)
        hvd.barrier()
        start = time.perf_counter()
        step()
        elapsed = time.perf_counter() - start
        if index >= 0:
            busy += elapsed
        found, count = failures(index, tensors, expected, MAX_REPORTED - len(reported))
        reported += found
        wrong_total += count

    # Every rank's count of wrong elements, so that rank 0's line tells about all of them.
    wrong_all = int(hvd.allreduce(torch.tensor([wrong_total]), name="w3.wrong", op=hvd.Sum).item())
    if rank == 0:
        result = {
            "module": args.module,
            "np": size,
            "steps_per_s": args.steps / busy,
            "tensors": args.tensors,
            "elems": args.elems,
            "steps": args.steps,
            "warmup_steps": args.warmup_steps,
            "wrong_elements": wrong_all,
        }
        print("HVD_W3 " + json.dumps(result), flush=True)
    hvd.shutdown()

    if wrong_total:
        print(
            f"rank {rank}: {wrong_total} wrong element(s) (expected {expected}); the first "
            f"{len(reported)} as (step, tensor, element, value), negative steps are warm-up:",
            file=sys.stderr,
        )
        for f in reported:
            print(f"  {f}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
