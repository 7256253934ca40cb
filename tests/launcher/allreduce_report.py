"""Run by the launcher tests under accordrun: an allreduce whose sum each rank checks.

Each rank allreduces a small array and one of 2^18 + 3 float64 elements (over
the 1 MiB from which the collectives across hosts run as accord's ring), each
element a whole number that depends on the rank and the index so that the
sum is exact, compares both with the sum it computes itself, and prints
``ALLREDUCE_OK <rank>`` or exits with status 3.
"""

import os
import sys

import numpy as np

import accord


def main() -> None:
    accord.init()
    rank, size = accord.rank(), accord.size()
    for count in (5, (1 << 18) + 3):
        index = np.arange(count, dtype=np.float64)
        mine = (rank + 1) * 1000.0 + index % 997
        got = accord.allreduce(mine, op=accord.Sum, name=f"sum_{count}")
        want = sum((r + 1) * 1000.0 for r in range(size)) + size * (index % 997)
        if not np.array_equal(got, want):
            wrong = int(np.flatnonzero(got != want)[0])
            print(
                f"rank {rank}: element {wrong} of {count} is {got[wrong]}, expected {want[wrong]}",
                file=sys.stderr,
                flush=True,
            )
            sys.exit(3)
    os.write(sys.stdout.fileno(), f"ALLREDUCE_OK {rank}\n".encode())
    accord.shutdown()


if __name__ == "__main__":
    main()
