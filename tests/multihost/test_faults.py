"""Faults across hosts on the test bed (docs/multihost.md, "Faults").

A job of two ranks, one on h4 and one on h5, trains (train_steps.py) under
accordrun; then one of them is lost:
  * its rank is killed (SIGKILL) mid-training, or
  * its host's link goes down (ip link set ... down), so its rank lives on
    but nothing it sends arrives.
Every remaining process must exit within a bounded time, accordrun must exit
non-zero, and the output must name what was lost.

CTest runs each test alone (RESOURCE_LOCK accord_bed_faults) with
    ACCORDRUN           the accordrun binary under test
    ACCORD_TEST_PYTHON  the interpreter the ranks run
    PYTHONPATH          the staged accord package
as root, with the bed up (the accord_bed fixture); anyone else skips.
"""

import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import List

import pytest

HERE = Path(__file__).resolve().parent
ACCORDRUN = os.environ.get("ACCORDRUN", "")
PYTHON = os.environ.get("ACCORD_TEST_PYTHON", sys.executable)
SUBNET = os.environ.get("ACCORD_BED_SUBNET", "10.77.0") + ".0/24"
# The collective watchdog's timeout for these jobs, and the bound on the
# rest (docs/multihost.md, "Faults"): the watchdog's period (1 s), accordrun's
# grace for mpirun after a rank failed (10 s) and for SIGTERM (10 s), and
# start-up and teardown slack.
TIMEOUT_S = 8
SLACK_S = 40

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="the test bed needs root"),
    pytest.mark.skipif(not ACCORDRUN, reason="ACCORDRUN is not set (run through CTest)"),
]


def bed_hosts() -> List[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


@pytest.fixture(autouse=True)
def bed() -> None:
    if not {"h4", "h5"} <= set(bed_hosts()):
        pytest.skip("the bed's hosts h4 and h5 are not up (tests/multihost/bed.sh up 5)")
    yield
    # Whatever a test did to the links, the next one finds them up.
    subprocess.run(["ip", "link", "set", "acc-h5", "up"], check=False)


class Job:
    """accordrun over h4 and h5, its output collected line by line."""

    def __init__(self, *program: str, env=None) -> None:
        command = [
            ACCORDRUN,
            "-np",
            "2",
            "-H",
            "h4,h5",
            "--rsh-agent",
            str(HERE / "netns-rsh"),
            "--network-interfaces",
            SUBNET,
            "--collective-timeout-seconds",
            str(TIMEOUT_S),
            PYTHON,
            *program,
        ]
        self.lines: List[str] = []
        self.started = time.monotonic()
        self.process = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **(env or {})},
        )
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_for_line(self, text: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(text in line for line in self.lines):
                return
            if self.process.poll() is not None:
                break
            time.sleep(0.05)
        self.process.kill()
        pytest.fail(f"no line with {text!r} within {timeout} s:\n{self.output()}")

    def wait(self, timeout: float) -> float:
        """Seconds until accordrun exited, measured from now; fails after `timeout`."""
        start = time.monotonic()
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            pytest.fail(f"accordrun still running {timeout} s after the fault:\n{self.output()}")
        self.reader.join(timeout=10)
        return time.monotonic() - start

    def output(self) -> str:
        return "\n".join(self.lines)


def test_rank_killed_mid_training_ends_the_job_and_names_its_host() -> None:
    job = Job(str(HERE / "train_steps.py"), "100000", "--kill-rank", "1", "--kill-step", "30")
    job.wait_for_line("kills itself", timeout=120)
    seconds = job.wait(timeout=TIMEOUT_S + SLACK_S)
    text = job.output()
    assert job.process.returncode != 0, text
    assert "TRAINED" not in text, text
    # The launcher names the lost rank and its host.
    assert "accordrun: rank 1 (on h5) was killed by signal 9" in text, text
    print(f"job ended {seconds:.1f} s after rank 1 was killed")


def test_host_link_down_mid_training_ends_the_job_within_the_watchdog_bound() -> None:
    job = Job(str(HERE / "train_steps.py"), "100000")
    job.wait_for_line("step 30 ", timeout=120)
    subprocess.run(["ip", "link", "set", "acc-h5", "down"], check=True)
    seconds = job.wait(timeout=TIMEOUT_S + SLACK_S)
    text = job.output()
    assert job.process.returncode != 0, text
    # Rank 0 (on h4) reports the collective that could not finish, with the
    # set's ranks, and ends the job.
    assert "has not finished after" in text, text
    assert "on process set 0 (ranks 0, 1)" in text, text
    # accordrun names the rank whose watchdog ended the job, and its host.
    assert "accordrun: rank 0 (on h4) exited with status 124" in text, text
    assert job.process.returncode == 124, text
    print(f"job ended {seconds:.1f} s after h5's link went down")
