#!/usr/bin/env python3
"""A host-discovery script for the elastic tests, driven by the training's progress.

accordrun (--host-discovery-script) runs it with no arguments about once a
second, with accordrun's own environment, and reads the hosts it prints, one
``host:slots`` per line. What it prints follows a schedule keyed on how far
the training got, so a test can add or remove hosts at a given commit:

    ACCORD_TEST_ELASTIC_SCHEDULE   a file of lines ``<commits> <host:slots>[,<host:slots>...]``,
                                   or ``<commits> -`` for no hosts; blank lines and
                                   ``#`` comments are skipped
    ACCORD_TEST_ELASTIC_PROGRESS   a file holding the job's commit count, which the
                                   training script's rank 0 rewrites at every commit
                                   (missing or empty: 0)

It prints the hosts of the last schedule line whose commits are at most the
progress; before the first such line, none. A malformed schedule is an error
(exit status 2), so a test's typo does not pass for "no hosts".
"""

import os
import sys
from pathlib import Path
from typing import List, Tuple


def read_schedule(path: Path) -> List[Tuple[int, List[str]]]:
    """The schedule's entries in file order: (commits, ["host:slots", ...])."""
    entries = []
    for number, raw in enumerate(path.read_text().splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        fields = line.split()
        if len(fields) != 2 or not fields[0].isdigit():
            raise ValueError(
                f"{path}:{number}: expected '<commits> <host:slots>[,...]' or '<commits> -': {raw!r}"
            )
        hosts = [] if fields[1] == "-" else fields[1].split(",")
        for host in hosts:
            name, _, slots = host.partition(":")
            if not name or not slots.isdigit() or int(slots) < 1:
                raise ValueError(f"{path}:{number}: '{host}' is not of the form host:slots")
        entries.append((int(fields[0]), hosts))
    return entries


def read_progress(path: Path) -> int:
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        return 0
    return int(text) if text else 0


def main() -> int:
    schedule_path = os.environ.get("ACCORD_TEST_ELASTIC_SCHEDULE")
    progress_path = os.environ.get("ACCORD_TEST_ELASTIC_PROGRESS")
    if not schedule_path or not progress_path:
        print(
            "elastic_discovery.py: set ACCORD_TEST_ELASTIC_SCHEDULE and ACCORD_TEST_ELASTIC_PROGRESS",
            file=sys.stderr,
        )
        return 2
    try:
        schedule = read_schedule(Path(schedule_path))
        progress = read_progress(Path(progress_path))
    except (OSError, ValueError) as error:
        print(f"elastic_discovery.py: {error}", file=sys.stderr)
        return 2
    hosts: List[str] = []
    for commits, entry in schedule:
        if commits <= progress:
            hosts = entry
    for host in hosts:
        print(host)
    return 0


if __name__ == "__main__":
    sys.exit(main())
