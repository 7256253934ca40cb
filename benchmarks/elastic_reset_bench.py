#!/usr/bin/env python3
"""How long an elastic reset takes on the test bed, phase by phase (docs/benchmarks.md, "Elastic").

Runs tests/multihost/elastic_train.py (a small model, a commit every 2 batches, 0.1 s a step)
under ``accordrun --min-np 2 --max-np 2`` on the bed's hosts h1, h2 and h3 (h3 spare), with
one reset in each run:

* ``kill``: rank 1 (on h2) SIGKILLs itself in the step after commit 3; h2 is blacklisted
  and h3 takes its place;
* ``removed``: at commit 3 discovery stops offering h2; the ranks stop at their next
  commit and h3 takes its place;
* ``frozen``: rank 1 SIGSTOPs itself after commit 3 (``--collective-timeout-seconds 8``).

Each reset is split with the driver's timeline line (``--verbose``) and the ranks' logs,
every time a Unix time on this machine's clock:

    detection   the fault (the kill, the commit after which h2 leaves) -> the driver's first sign
    teardown    first sign -> the generation's mpirun has ended and its reports are read
    relaunch    -> the next mpirun started (discovery, placement, planning)
    start       -> every rank connected: processes started, ``import torch``, hvd.init(),
                   the model built, the decorated function called
    restore     -> every rank ready: rank 0 loaded the commit, every rank synced it
    first step  -> the first batch of the new generation done
    total       the fault -> that first batch

The spill costs nothing at the reset: ``commit()`` wrote it (its cost per step is
benchmarks/elastic_commit_bench.py's). Needs root and the bed (tests/multihost/bed.sh up 3)::

    python3 benchmarks/elastic_reset_bench.py --reps 5 [--accordrun build/launcher/accordrun]
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, List

REPO = Path(__file__).resolve().parents[1]
BED = REPO / "tests" / "multihost"
TIMELINE = re.compile(
    r"reset 1 timeline: first sign at (?P<sign>[0-9.]+) \(unix time\), the last generation ended "
    r"(?P<teardown>[0-9.]+) s after it, relaunched after (?P<relaunch>[0-9.]+) s, ranks connected after "
    r"(?P<start>[0-9.]+) s, ready after (?P<ready>[0-9.]+) s"
)
SCENARIOS = {
    "kill": ("0 h1:1,h2:1,h3:1\n", "kill:rank=1:commit=3"),
    "removed": ("0 h1:1,h2:1,h3:1\n3 h1:1,h3:1\n", ""),
    "frozen": ("0 h1:1,h2:1,h3:1\n", "stop:rank=1:commit=3"),
}
PHASES = ["detection", "teardown", "relaunch", "start", "restore", "first step", "total"]


def events(log_dir: Path) -> List[Dict]:
    records = []
    for path in sorted(log_dir.glob("g*-r*.jsonl")):
        records += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return records


def one_run(accordrun: str, scenario: str, work: Path) -> Dict[str, float]:
    schedule_text, fault = SCENARIOS[scenario]
    schedule, progress, logs = work / "schedule", work / "progress", work / "log"
    schedule.write_text(schedule_text)
    progress.write_text("0")
    logs.mkdir()
    env = dict(
        os.environ, ACCORD_TEST_ELASTIC_SCHEDULE=str(schedule), ACCORD_TEST_ELASTIC_PROGRESS=str(progress)
    )
    if fault:
        env["ACCORD_TEST_ELASTIC_FAULT"] = fault
    command = [
        accordrun, "--min-np", "2", "--max-np", "2",
        "--host-discovery-script", str(BED / "elastic_discovery.py"),
        "--rsh-agent", str(BED / "netns-rsh"), "--network-interfaces", "10.77.0.0/24",
        "--collective-timeout-seconds", "8", "--elastic-timeout", "60", "--verbose",
        sys.executable, str(BED / "elastic_train.py"), "--log-dir", str(logs), "--epochs", "1",
    ]  # fmt: skip
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    timeline = TIMELINE.search(result.stderr)
    if result.returncode != 0 or timeline is None:
        sys.exit(
            f"{scenario}: accordrun exited with {result.returncode}, no reset timeline:\n{result.stderr}"
        )
    records = events(logs)
    if scenario == "removed":
        fault_time = min(r["time"] for r in records if r["event"] == "commit" and r["commit"] == 3)
    else:
        fault_time = min(r["time"] for r in records if r["event"] == "fault")
    first_batch = min(r["time"] for r in records if r["event"] == "batch" and r["generation"] == 1)
    sign = float(timeline["sign"])
    ended = sign + float(timeline["teardown"])
    launched = ended + float(timeline["relaunch"])
    connected = launched + float(timeline["start"])
    ready = launched + float(timeline["ready"])
    return {
        "detection": sign - fault_time,
        "teardown": ended - sign,
        "relaunch": launched - ended,
        "start": connected - launched,
        "restore": ready - connected,
        "first step": first_batch - ready,
        "total": first_batch - fault_time,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--accordrun", default=str(REPO / "build" / "launcher" / "accordrun"))
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--scenarios", default="kill,removed,frozen")
    args = parser.parse_args()
    print(f"{'scenario':<9} " + " ".join(f"{phase:>10}" for phase in PHASES) + "   (seconds, median of runs)")
    for scenario in args.scenarios.split(","):
        runs = []
        for _ in range(args.reps):
            with tempfile.TemporaryDirectory() as work:
                runs.append(one_run(args.accordrun, scenario, Path(work)))
        medians = {phase: statistics.median(run[phase] for run in runs) for phase in PHASES}
        print(f"{scenario:<9} " + " ".join(f"{medians[phase]:>10.2f}" for phase in PHASES))
        totals = ", ".join(f"{run['total']:.2f}" for run in runs)
        print(f"{'':<9} totals of the {len(runs)} runs: {totals}")


if __name__ == "__main__":
    main()
