"""Runs a Python program of accord on every rank under valgrind and reports
the memory that accord's native code (the ``_core`` extension module and
``libaccord``) definitely lost.

Usage (a multi-rank pytest suite at 2 ranks)::

    python3 tests/soak/leak_check.py --np 2 --timeout 1800 --logs /tmp/leaks -- \\
        python3 -m pytest -x -q -p no:cacheprovider tests/python/test_numpy_collectives.py

Every rank runs ``valgrind --tool=memcheck --leak-check=full`` with
``PYTHONMALLOC=malloc`` (Python's small-object allocator hides leaks from
valgrind), ``--keep-debuginfo=yes`` (frames in objects unloaded before exit, as
Open MPI's components are in MPI_Finalize, would otherwise be nameless, and
the suppressions anchored to Open MPI's functions would not match), the
suppressions in ``valgrind.supp`` beside this file (leaks and errors of
CPython, torch and Open MPI that are theirs, each with its reason), and
without tracking of undefined values (Open MPI's buffers fill the log with
those, and the check is about leaks; reads and writes outside a block are
still reported). Each rank writes its log to
``<logs>/valgrind.<pid>.log``.

Then every "definitely lost" record, and every invalid read or write, whose
stack has a frame in accord's own objects is printed in full. The exit
status is 1 if there is any, or if the program failed or timed out; 0
otherwise. Records in other objects are only counted (their stacks are in
the logs).
"""

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
from typing import Dict, List, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
# A frame of accord's code: a symbol in its namespace, its objects (without
# debug information), or its sources (with it: logs carry full paths).
ACCORD_OBJECTS = re.compile(r"accord::|_core\.cpython|libaccord|/(?:core|bindings)/src/")
RECORD_START = re.compile(
    r"^==\d+== (\S.*are definitely lost.*|Invalid (?:read|write|free).*|Source and destination overlap.*|"
    r"Mismatched free.*|Syscall param.*)$"
)


def parse_log(path: str) -> List[Tuple[str, List[str]]]:
    """(headline, stack lines) of every leak and error record of one log."""
    records: List[Tuple[str, List[str]]] = []
    current = None
    with open(path, errors="replace") as log:
        for line in log:
            line = line.rstrip("\n")
            m = RECORD_START.match(line)
            if m:
                current = (m.group(1), [])
                records.append(current)
                continue
            if current is None:
                continue
            body = re.sub(r"^==\d+==\s?", "", line)
            if not body.strip():
                current = None  # a blank line ends a record
            else:
                current[1].append(body)
    return records


def where(frames: List[str]) -> str:
    """The object or source file of a record's innermost frame past the allocator."""
    for frame in frames:
        if re.search(r"\b(?:malloc|calloc|realloc|memalign|posix_memalign|operator new|strdup)\b", frame):
            continue
        m = re.search(r"\((?:in )?([^()]*?)(?::\d+)?\)\s*$", frame)
        if m:
            return os.path.basename(m.group(1))
    return "?"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--np", type=int, default=2, help="ranks (default 2)")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds the whole run may take")
    parser.add_argument("--logs", required=True, help="directory for the logs (emptied first)")
    parser.add_argument("--mpiexec", default="mpiexec")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- program and arguments")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the program to run after --")
    if args.np < 1:
        parser.error(f"--np must be at least 1, got {args.np}")
    if not shutil.which("valgrind"):
        parser.error("valgrind is not installed (apt-get install valgrind)")
    shutil.rmtree(args.logs, ignore_errors=True)
    os.makedirs(args.logs)

    env = dict(os.environ, PYTHONMALLOC="malloc")
    valgrind = [
        "valgrind",
        "--tool=memcheck",
        "--leak-check=full",
        "--show-leak-kinds=definite",
        "--errors-for-leak-kinds=definite",
        "--undef-value-errors=no",
        "--num-callers=40",
        "--fullpath-after=",
        "--keep-debuginfo=yes",
        f"--suppressions={os.path.join(HERE, 'valgrind.supp')}",
        "--gen-suppressions=all",
        f"--log-file={os.path.join(os.path.abspath(args.logs), 'valgrind.%p.log')}",
    ]
    full = [args.mpiexec, "-n", str(args.np), "--oversubscribe", "-x", "PYTHONMALLOC"]
    for var in ("PYTHONPATH", "ACCORD_TEST_TIMEOUT", "PYTHONDONTWRITEBYTECODE"):
        if var in env:
            full += ["-x", var]
    full += valgrind + command
    print("leak_check: " + " ".join(full), flush=True)
    try:
        status = subprocess.run(full, env=env, timeout=args.timeout).returncode
    except subprocess.TimeoutExpired:
        print(f"leak_check: FAILED: the run took longer than {args.timeout} s", flush=True)
        status = 124

    logs = sorted(glob.glob(os.path.join(args.logs, "valgrind.*.log")))
    found = 0
    elsewhere: Dict[str, int] = {}
    summaries = []
    for path in logs:
        with open(path, errors="replace") as log:
            text = log.read()
        # Only a process that ran to its end writes a leak summary; a log
        # without one is of a process that exec()ed another.
        if "LEAK SUMMARY" not in text and "All heap blocks were freed" not in text:
            continue
        definite = re.search(r"definitely lost: ([\d,]+) bytes in ([\d,]+) blocks", text)
        summaries.append(
            f"{os.path.basename(path)}: definitely lost "
            f"{definite.group(1) if definite else 0} bytes in {definite.group(2) if definite else 0} "
            f"blocks (after suppressions), {len(re.findall(r'^==[0-9]+== Invalid', text, re.M))} "
            f"invalid accesses"
        )
        for headline, stack in parse_log(path):
            frames = [s for s in stack if s.lstrip().startswith(("at ", "by "))]
            if any(ACCORD_OBJECTS.search(f) for f in frames):
                found += 1
                print(f"\nleak_check: in {os.path.basename(path)}: {headline}\n  " + "\n  ".join(frames))
            else:
                kind = (
                    (
                        "definitely lost"
                        if "lost" in headline
                        else re.split(r" of size| in |\(", headline)[0].strip()
                    )
                    + " in "
                    + where(frames)
                )
                elsewhere[kind] = elsewhere.get(kind, 0) + 1
    print(
        "\n" + "\n".join(f"leak_check: {line}" for line in summaries)
        if summaries
        else "leak_check: no rank's log found"
    )
    if elsewhere:
        print(
            "leak_check: records outside accord (not counted): "
            + ", ".join(f"{count} x {kind}" for kind, count in sorted(elsewhere.items()))
        )
    if status != 0:
        print(f"leak_check: FAILED: the program exited with status {status}")
        return 1
    if not summaries:
        return 1
    if found:
        print(f"leak_check: FAILED: {found} records in accord's code")
        return 1
    print("leak_check: nothing definitely lost, read or written out of bounds in accord's code")
    return 0


if __name__ == "__main__":
    sys.exit(main())
