"""A job that accord stops must end: through mpirun and through accordrun.

Rank 1 sleeps without submitting (stall_exit.py); the other ranks' allreduce
is stopped by the stall inspector after ACCORD_STALL_SHUTDOWN_TIME_SECONDS
and raises, and their script exits with status 1. Their processes must not
then wait in MPI_Finalize for rank 1 (which would keep the job alive until
rank 1 woke, forever in a real deadlock): the whole job must end within 10 s
of the error, non-zero, with the stall report on stderr. A clean exit still
finalizes, which every other test of a job that ends normally checks.

CTest runs each test on its own with ACCORDRUN, ACCORD_TEST_PYTHON and
PYTHONPATH set (tests/CMakeLists.txt).
"""

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import List

import pytest

from rank_variables import show

HERE = Path(__file__).resolve().parent
ACCORDRUN = os.environ.get("ACCORDRUN", "")
PYTHON = os.environ.get("ACCORD_TEST_PYTHON", sys.executable)
SLEEP_SECONDS = 60  # rank 1's sleep: the job must end long before it
STALL = {"ACCORD_STALL_CHECK_TIME_SECONDS": "2", "ACCORD_STALL_SHUTDOWN_TIME_SECONDS": "6"}
BOUND_SECONDS = 10  # from the error to the end of the job


def run(command: List[str]) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.update(STALL)
    # Well under rank 1's sleep: a job that waits for it fails here.
    result = subprocess.run(
        command, env=env, capture_output=True, text=True, timeout=SLEEP_SECONDS - 10, stdin=subprocess.DEVNULL
    )
    result.ended_at = time.time()
    return result


def check(result: subprocess.CompletedProcess, np_: int) -> None:
    assert result.returncode != 0, show(result)
    assert "UNEXPECTED" not in result.stdout, show(result)
    # Not one line each: mpirun forwards the ranks' stdout as it comes, and
    # in CI one rank's line once ended in the middle of another's.
    failures = {
        int(m.group(1)): float(m.group(2))
        for m in re.finditer(r"rank (\d+) failed at (\d+\.\d{3})", result.stdout)
    }
    assert sorted(failures) == [r for r in range(np_) if r != 1], show(result)
    assert "accord was stopped by the stall inspector" in result.stderr, show(result)
    assert "stalled.grad" in result.stderr, show(result)
    lived = result.ended_at - min(failures.values())
    assert lived <= BOUND_SECONDS, f"the job lived {lived:.1f} s after the error\n{show(result)}"
    print(f"the job ended {lived:.1f} s after the error, exit status {result.returncode}")


@pytest.mark.parametrize("np_", [2, 3])
def test_stopped_job_ends_under_mpirun(np_: int) -> None:
    mpirun = shutil.which("mpirun")
    if not mpirun:
        pytest.skip("mpirun is not on PATH")
    flags = ["--oversubscribe"]
    if os.geteuid() == 0:
        flags.append("--allow-run-as-root")
    for name in STALL:
        flags += ["-x", name]
    result = run([mpirun, "-np", str(np_), *flags, PYTHON, str(HERE / "stall_exit.py"), str(SLEEP_SECONDS)])
    check(result, np_)


@pytest.mark.parametrize("np_", [2, 3])
def test_stopped_job_ends_under_accordrun(np_: int) -> None:
    if not ACCORDRUN:
        pytest.skip("ACCORDRUN is not set (run through CTest)")
    result = run([ACCORDRUN, "-np", str(np_), PYTHON, str(HERE / "stall_exit.py"), str(SLEEP_SECONDS)])
    check(result, np_)
