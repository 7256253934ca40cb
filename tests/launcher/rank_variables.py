"""What the launcher tests give every rank, and what each rank must then see.

Shared by test_accordrun.py (ranks on this host) and
test_accordrun_multihost.py (ranks on other hosts, which start with a clean
environment): the same flags and variables must arrive everywhere.
rank_report.py prints the variables named by NAMES; check() compares them.
"""
import subprocess
from typing import Dict, List, Optional

# accordrun's flags that set variables: -x by value and by name, and tuning flags.
FLAGS = ["-x", "ACCORD_TEST_GREETING=hello, world 'quoted'", "-x", "ACCORD_TEST_FORWARDED",
         "--fusion-threshold-mb", "2", "--cycle-time-ms", "0.5", "--log-level", "ERROR", "--cache-capacity", "64"]

# Set in accordrun's environment: one forwarded with -x NAME above, one
# that ranks on this host inherit and accordrun forwards to other hosts.
ENV = {"ACCORD_TEST_FORWARDED": "from the launching shell", "ACCORD_TEST_INHERITED": "in accordrun's environment"}

EXPECTED: Dict[str, Optional[str]] = {
    "ACCORD_TEST_GREETING": "hello, world 'quoted'",
    "ACCORD_TEST_FORWARDED": "from the launching shell",
    "ACCORD_TEST_INHERITED": "in accordrun's environment",
    "ACCORD_FUSION_THRESHOLD": str(2 * 1024 * 1024),
    "ACCORD_CYCLE_TIME_MS": "0.5",
    "ACCORD_LOG_LEVEL": "error",
    "ACCORD_CACHE_CAPACITY": "64",
    # The agents keep their own variables to themselves.
    "ACCORDRUN_REPORT": None,
    "ACCORDRUN_BIND": None,
}

NAMES: List[str] = list(EXPECTED) + ["OMP_NUM_THREADS"]


def check(report: Dict[str, object], omp_num_threads: Optional[str], show: str) -> None:
    """Fails unless the rank of ``report`` saw EXPECTED and this OMP_NUM_THREADS."""
    rank = report["rank"]
    for name, value in {**EXPECTED, "OMP_NUM_THREADS": omp_num_threads}.items():
        got = report["env"][name]
        assert got == value, f"rank {rank}: {name}={got!r}, expected {value!r}\n{show}"


def show(result: subprocess.CompletedProcess) -> str:
    return f"exit status {result.returncode}\n--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"
