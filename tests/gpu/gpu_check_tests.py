#!/usr/bin/env python3
"""The tests the GPU check runs, found by their CTest label.

    python3 tests/gpu/gpu_check_tests.py <build dir> [<repo>]

Asks CTest for the tests labelled ``gpu`` (``ctest -L gpu --show-only=json-v1``)
and prints one tab-separated line per test and per file the check runs itself:

    test    <name>  <single|mpi|python>  <programs under the build, space-separated>
    pyfile  <path of a tests/gpu/*.py that no CTest test runs>

A test is ``python`` when its command runs pytest or a ``.py`` file, ``mpi``
when it starts with mpiexec (or mpirun, orterun, prterun), and ``single``
otherwise. CTest leaves out the command of a test whose program is not built
yet; such a test is a program run on its own, so it is ``single``, and the
check builds it through the ``accord_gpu_tests`` target (tests/gpu/CMakeLists.txt).

Exits 1, printing nothing on stdout, when CTest cannot read the build.
"""

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Tuple

LABEL = "gpu"
LAUNCHERS = {"mpiexec", "mpirun", "orterun", "prterun"}
NOT_PROGRAMS = (".py", ".json", ".csv", ".cmake")


def labelled_tests(build: Path) -> List[Dict]:
    """The tests labelled ``gpu`` in ``build``, as ctest's json-v1 lists them."""
    result = subprocess.run(
        ["ctest", "--test-dir", str(build), "-L", LABEL, "--show-only=json-v1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        why = (result.stderr or result.stdout).strip() or f"exit status {result.returncode}"
        raise RuntimeError(f"ctest --test-dir {build} failed: {why}")
    return json.loads(result.stdout).get("tests", [])


def classify(command: List[str], build: Path) -> Tuple[str, List[str], List[str]]:
    """(kind, programs relative to the build, .py files) of one test's command."""
    if any(arg.endswith(".py") or arg == "pytest" for arg in command):
        kind = "python"
    elif command and os.path.basename(command[0]) in LAUNCHERS:
        kind = "mpi"
    else:
        kind = "single"
    real_build = os.path.realpath(build)
    programs = []
    for arg in command:
        path = os.path.realpath(arg) if os.path.isabs(arg) else ""
        if path.startswith(real_build + os.sep) and not path.endswith(NOT_PROGRAMS):
            programs.append(os.path.relpath(path, real_build))
    scripts = [os.path.realpath(arg) for arg in command if arg.endswith(".py")]
    return kind, programs, scripts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("build", type=Path, help="a configured build directory of accord")
    parser.add_argument(
        "repo",
        type=Path,
        nargs="?",
        default=Path(__file__).resolve().parents[2],
        help="accord's sources [the checkout holding this file]",
    )
    args = parser.parse_args()
    try:
        tests = labelled_tests(args.build)
    except (OSError, RuntimeError, ValueError) as error:
        print(f"gpu_check_tests: {error}", file=sys.stderr)
        return 1
    lines = []
    run_by_ctest = set()
    for test in tests:
        kind, programs, scripts = classify(test.get("command", []), args.build)
        run_by_ctest.update(scripts)
        lines.append("\t".join(["test", test["name"], kind, " ".join(programs)]))
    gpu_dir = args.repo / "tests" / "gpu"
    candidates = sorted(gpu_dir.glob("test_*.py")) + sorted(gpu_dir.glob("*_test.py"))
    for path in dict.fromkeys(candidates):
        if os.path.realpath(path) not in run_by_ctest:
            lines.append(f"pyfile\t{path}")
    for line in lines:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
