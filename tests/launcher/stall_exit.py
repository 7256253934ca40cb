"""Run by tests/launcher/test_job_end.py: a job that accord stops must end.

Usage: stall_exit.py SLEEP_SECONDS. Rank 1 sleeps that long without
submitting anything, as a rank stuck elsewhere would; every other rank
allreduces a tensor that rank 1 never submits. The stall inspector
(ACCORD_STALL_SHUTDOWN_TIME_SECONDS, set small by the test) stops the job,
the allreduce raises, and the script exits with Python's status for an
uncaught exception (1). The process must then end at once instead of waiting
in MPI_Finalize for rank 1, so that the launcher stops rank 1 too.
"""

import sys
import time

import numpy as np

import accord


def say(line: str) -> None:
    """Writes the line and its newline in one write(): under mpirun the ranks
    share one stdout, and a newline written on its own (Python writes print's
    end separately when stdout is unbuffered) let another rank's line land
    between them."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main() -> None:
    sleep_seconds = float(sys.argv[1])
    accord.init()
    accord.barrier()
    if accord.rank() == 1:
        say("rank 1 sleeps without submitting")
        time.sleep(sleep_seconds)
        say("UNEXPECTED: rank 1 woke before the job was ended")
        return
    try:
        accord.allreduce(np.ones(4, dtype=np.float32), name="stalled.grad")
    except accord.HorovodInternalError:
        # The time of the error, for the test to bound how long the job
        # lived after it.
        say(f"rank {accord.rank()} failed at {time.time():.3f}")
        raise
    say(f"UNEXPECTED: rank {accord.rank()}'s allreduce returned")


if __name__ == "__main__":
    main()
