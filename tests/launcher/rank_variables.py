"""What the launcher tests give every rank, and what each rank must then see.

Shared by test_accordrun.py (ranks on this host) and
test_accordrun_multihost.py (ranks on other hosts, which start with a clean
environment): the same flags and variables must arrive everywhere.
rank_report.py prints the variables named by NAMES; check() compares them.
"""

import os
import subprocess
from pathlib import Path
from typing import Dict, List, Optional, Tuple

# accordrun's flags that set variables: -x by value and by name, and tuning flags.
FLAGS = [
    "-x",
    "ACCORD_TEST_GREETING=hello, world 'quoted'",
    "-x",
    "ACCORD_TEST_FORWARDED",
    "--fusion-threshold-mb",
    "2",
    "--cycle-time-ms",
    "0.5",
    "--log-level",
    "ERROR",
    "--cache-capacity",
    "64",
]

# Set in accordrun's environment: one forwarded with -x NAME above, one
# that ranks on this host inherit and accordrun forwards to other hosts.
ENV = {
    "ACCORD_TEST_FORWARDED": "from the launching shell",
    "ACCORD_TEST_INHERITED": "in accordrun's environment",
}

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
    "ACCORDRUN_REPORT_BINDINGS": None,
}

NAMES: List[str] = list(EXPECTED) + ["OMP_NUM_THREADS"]


def check(report: Dict[str, object], omp_num_threads: Optional[str], show: str) -> None:
    """Fails unless the rank of ``report`` saw EXPECTED and this OMP_NUM_THREADS."""
    rank = report["rank"]
    for name, value in {**EXPECTED, "OMP_NUM_THREADS": omp_num_threads}.items():
        got = report["env"][name]
        assert got == value, f"rank {rank}: {name}={got!r}, expected {value!r}\n{show}"


def usable_cores() -> List[Tuple[int, List[int]]]:
    """This machine's usable physical cores as (NUMA node, CPUs), ordered by node, socket and first CPU.

    A CPU without topology files is a core of its own; one without a node is on node -1.
    """
    node_of: Dict[int, int] = {}
    for node_dir in Path("/sys/devices/system/node").glob("node[0-9]*"):
        for part in (node_dir / "cpulist").read_text().strip().split(","):
            if part:
                first, _, last = part.partition("-")
                for cpu in range(int(first), int(last or first) + 1):
                    node_of[cpu] = int(node_dir.name[4:])
    cores: Dict[Tuple[int, int], List[int]] = {}
    for cpu in sorted(os.sched_getaffinity(0)):
        topology = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology")
        try:
            key = (
                int((topology / "physical_package_id").read_text()),
                int((topology / "core_id").read_text()),
            )
        except OSError:
            key = (-1, -1 - cpu)
        cores.setdefault(key, []).append(cpu)
    ordered = sorted(cores.items(), key=lambda item: (node_of.get(item[1][0], -1), item[0][0], item[1][0]))
    return [(node_of.get(cpus[0], -1), cpus) for _, cpus in ordered]


def expected_binding(local_size: int) -> Tuple[List[List[int]], str]:
    """The CPUs of each of ``local_size`` ranks on this machine (no GPU) and their OMP_NUM_THREADS.

    accordrun's rule (docs/launcher.md, "Binding"): k = cores // ranks whole cores each, the first
    NUMA node with k free cores first, else the first k free cores; more ranks than cores: every
    rank may run anywhere, with one thread.
    """
    cores = usable_cores()
    if local_size > len(cores):
        everything = sorted(cpu for _, cpus in cores for cpu in cpus)
        return [everything] * local_size, "1"
    k = len(cores) // local_size
    taken = [False] * len(cores)
    shares = []
    for _ in range(local_size):
        picked: List[int] = []
        for node in dict.fromkeys(n for n, _ in cores):
            free = [c for c in range(len(cores)) if not taken[c] and cores[c][0] == node][:k]
            if len(free) == k:
                picked = free
                break
        if not picked:
            picked = [c for c in range(len(cores)) if not taken[c]][:k]
        for c in picked:
            taken[c] = True
        shares.append(sorted(cpu for c in picked for cpu in cores[c][1]))
    return shares, str(k)


def show(result: subprocess.CompletedProcess) -> str:
    return f"exit status {result.returncode}\n--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"
