"""Run by the launcher tests under accordrun: one rank dies, the others wait.

Usage: fail_rank.py FAILING_RANK STATUS. Every rank initialises accord; the
failing rank then ends at once with STATUS (os._exit: no clean-up, as a crash
would), while the others block in an allreduce that can never complete,
until accordrun has them stopped.
"""

import os
import sys

import numpy as np

import accord


def main() -> None:
    failing_rank, status = int(sys.argv[1]), int(sys.argv[2])
    accord.init()
    accord.barrier()
    if accord.rank() == failing_rank:
        print(f"rank {failing_rank} exits with status {status}", flush=True)
        os._exit(status)
    accord.allreduce(np.ones(4), name="never_completes")
    print(f"rank {accord.rank()}: the allreduce completed without rank {failing_rank}", flush=True)
    sys.exit(10)


if __name__ == "__main__":
    main()
