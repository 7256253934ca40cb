"""A timeline survives SIGKILL: start a 2-rank job with ACCORD_TIMELINE that
runs named allreduces until killed, kill rank 0 with SIGKILL once the file
shows completed collectives, and check the file still parses (after adding
the missing "]") with the expected phases.

Usage: timeline_kill_check.py <workdir> <mpiexec> [mpiexec flags...]
(registered in CTest by tests/CMakeLists.txt, with a timeout).
"""

import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timeline_check import check_tensor, load_events, phases_by_track  # noqa: E402

CHILD = r"""
import os, sys
import numpy as np
import accord
accord.init()
rank, size = accord.rank(), accord.size()
step = 0
while True:
    for i in range(4):
        x = np.full(16 + i, rank + 1, np.float32)
        out = accord.allreduce(x, op=accord.Sum, name=f"kill.{i}")
        expected = size * (size + 1) / 2
        if not np.all(out == expected):
            print(f"rank {rank}: kill.{i} step {step}: expected {expected}, got {out[:4]}", flush=True)
            sys.exit(2)
    step += 1
    if step == 20 and rank == 0:
        with open(sys.argv[1] + ".tmp", "w") as f:
            f.write(str(os.getpid()))
        os.replace(sys.argv[1] + ".tmp", sys.argv[1])
"""


def main() -> int:
    workdir, mpiexec, flags = sys.argv[1], sys.argv[2], sys.argv[3:]
    os.makedirs(workdir, exist_ok=True)
    timeline = os.path.join(workdir, "killed_timeline.json")
    pid_file = os.path.join(workdir, "rank0.pid")
    for path in (timeline, pid_file):
        if os.path.exists(path):
            os.remove(path)
    env = dict(os.environ, ACCORD_TIMELINE=timeline)
    cmd = [
        mpiexec,
        "-n",
        "2",
        *flags,
        "-x",
        "ACCORD_TIMELINE",
        "-x",
        "PYTHONPATH",
        sys.executable,
        "-c",
        CHILD,
        pid_file,
    ]
    job = subprocess.Popen(cmd, env=env)
    try:
        deadline = time.monotonic() + 60
        while not os.path.exists(pid_file):
            if job.poll() is not None:
                print(f"the job ended early with status {job.returncode}")
                return 1
            if time.monotonic() > deadline:
                print("rank 0 never reached step 20")
                return 1
            time.sleep(0.05)
        # Wait until the writer has put collectives of every name on disk.
        while True:
            with open(timeline, encoding="utf-8") as f:
                text = f.read()
            if all(f'"kill.{i}"]' in text for i in range(4)) and text.count("COLLECTIVE") >= 8:
                break
            if time.monotonic() > deadline:
                print("the timeline never showed the collectives")
                return 1
            time.sleep(0.05)
        with open(pid_file) as f:
            os.kill(int(f.read()), signal.SIGKILL)
        try:
            job.wait(timeout=30)
        except subprocess.TimeoutExpired:
            job.kill()
            job.wait()
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
    with open(timeline, encoding="utf-8") as f:
        text = f.read()
    assert not text.rstrip().endswith("]"), "a killed rank 0 cannot have closed the array"
    events = load_events(timeline)
    by_track = phases_by_track(events)
    for i in range(4):
        check_tensor(by_track, f"kill.{i}", (16 + i) * 4)
    print(f"killed timeline: {len(events)} events parsed, phases present for kill.0-3")
    return 0


if __name__ == "__main__":
    sys.exit(main())
