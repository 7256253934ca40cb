"""accordrun's elastic driver on this host, with ranks that need no accord.

The ranks are shell commands or fake_elastic_worker.py, which speaks the
driver's channel by itself, so these tests check the driver alone: a new
generation after a rank is killed, with the commit's file handed to rank 0;
a generation ended when the hosts shrink; the blacklist and its cooldown; the
errors that end a job (blacklisted hosts past --elastic-timeout, too few
slots, the reset limit, a rank's program failing, a failing discovery
script); and --dry-run. The training itself across hosts is tested on the
bed (tests/multihost/test_elastic.py).

CTest runs each test with ACCORDRUN set (tests/launcher/CMakeLists.txt).
"""

import json
import os
import re
import sys
from pathlib import Path
from typing import List

import pytest
from test_accordrun import accordrun

HERE = Path(__file__).resolve().parent
ACCORDRUN = os.environ.get("ACCORDRUN", "")
PYTHON = os.environ.get("ACCORD_TEST_PYTHON", sys.executable)
FAKE_WORKER = str(HERE / "fake_elastic_worker.py")

pytestmark = pytest.mark.skipif(not ACCORDRUN, reason="ACCORDRUN is not set (run through CTest)")


class Discovery:
    """A discovery script that prints the hosts file, which a test or a rank rewrites."""

    def __init__(self, directory: Path, hosts: str) -> None:
        self.hosts_file = directory / "hosts"
        self.hosts_file.write_text(hosts + "\n")
        self.script = directory / "discover.sh"
        self.script.write_text(f"#!/bin/sh\ncat {self.hosts_file}\n")
        self.script.chmod(0o755)


def elastic_lines(stderr: str) -> List[str]:
    return [line for line in stderr.splitlines() if line.startswith("accordrun: elastic: ")]


def read_log(path: Path) -> List[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_killed_rank_starts_a_new_generation_that_restores_the_commit(tmp_path: Path) -> None:
    discovery = Discovery(tmp_path, "localhost:2")
    log = tmp_path / "log"
    spill = tmp_path / "spill"
    result = accordrun(
        "--host-discovery-script", str(discovery.script), "--min-np", "2",
        "--blacklist-cooldown-range", "0", "0", "--elastic-spill-dir", str(spill),
        PYTHON, FAKE_WORKER,
        env={"FAKE_WORKER_ACTION": "kill", "FAKE_WORKER_LOG": str(log)},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    lines = elastic_lines(result.stderr)
    assert any(
        re.search(r"blacklisting localhost for 0\.0 s: rank 1 was killed by signal 9", line) for line in lines
    )
    assert any(
        re.search(r"generation 1 on localhost:2 \(2 ranks; rank 0 restores commit 1 from localhost\)", line)
        for line in lines
    ), result.stderr
    assert any(
        re.search(
            r"reset 1 timeline: first sign at [0-9.]+ \(unix time\), "
            r".* ranks connected after [0-9.]+ s, ready after",
            line,
        )
        for line in lines
    )
    entries = read_log(log)
    assert sorted((e["generation"], e["rank"]) for e in entries) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    restores = {e["restore"] for e in entries if e["generation"] == 1}
    assert len(restores) == 1
    restore = restores.pop()
    assert restore.startswith(str(spill) + "/accord-elastic-") and restore.endswith(
        "/localhost/state-g0-c1.pt"
    )
    assert not list(spill.iterdir()), "the job's spill directory outlived the job"


def test_a_failure_before_the_first_commit_restarts_from_the_initial_state(tmp_path: Path) -> None:
    discovery = Discovery(tmp_path, "localhost:2")
    log = tmp_path / "log"
    result = accordrun(
        "--host-discovery-script", str(discovery.script), "--min-np", "2",
        "--blacklist-cooldown-range", "0", "0", PYTHON, FAKE_WORKER,
        env={"FAKE_WORKER_ACTION": "early", "FAKE_WORKER_LOG": str(log)},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "generation 1 on localhost:2 (2 ranks; from the initial state)" in result.stderr
    assert [e["restore"] for e in read_log(log) if e["generation"] == 1] == ["", ""]


def test_hosts_that_shrink_end_the_generation_and_the_next_runs_on_what_is_left(tmp_path: Path) -> None:
    discovery = Discovery(tmp_path, "localhost:2")
    log = tmp_path / "log"
    result = accordrun(
        "--host-discovery-script", str(discovery.script), "--min-np", "1", PYTHON, FAKE_WORKER,
        env={
            "FAKE_WORKER_ACTION": "shrink",
            "FAKE_WORKER_HOSTS_FILE": str(discovery.hosts_file),
            "FAKE_WORKER_SHRINK_TO": "localhost:1",
            "FAKE_WORKER_LOG": str(log),
        },
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    lines = elastic_lines(result.stderr)
    assert any("the hosts changed (removed)" in line for line in lines), result.stderr
    assert any(
        re.search(r"generation 1 on localhost:1 \(1 ranks; .*reason: the hosts changed", line)
        for line in lines
    )
    assert not any("blacklisting" in line for line in lines)  # a removed host did nothing wrong
    assert sorted((e["generation"], e["rank"]) for e in read_log(log)) == [(0, 0), (0, 1), (1, 0)]


def test_every_host_blacklisted_ends_the_job_after_the_elastic_timeout(tmp_path: Path) -> None:
    discovery = Discovery(tmp_path, "localhost:2")
    result = accordrun(
        "--host-discovery-script", str(discovery.script), "--min-np", "2", "--elastic-timeout", "3",
        "sh", "-c", 'if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then kill -9 $$; fi; sleep 1',
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    assert "blacklisting localhost for the rest of the job" in result.stderr
    assert re.search(
        r"the job ends: every discovered host is blacklisted: 0 slots available "
        r"\(hosts: localhost; blacklisted: localhost\), "
        r"and 2 needed \(--min-np 2\) for 3\.0 s \(--elastic-timeout\)",
        result.stderr,
    ), result.stderr


def test_too_few_slots_for_min_np_end_the_job_after_the_elastic_timeout(tmp_path: Path) -> None:
    discovery = Discovery(tmp_path, "localhost:1")
    result = accordrun(
        "--host-discovery-script", str(discovery.script), "--min-np", "2", "--elastic-timeout", "2", "true"
    )
    assert result.returncode == 1
    assert (
        "waiting up to 2.0 s (--elastic-timeout) for 2 slots: 1 slot available (hosts: localhost)"
        in result.stderr
    )
    assert re.search(r"the job ends: too few slots: .* and 2 needed \(--min-np 2\) for 2\.0 s", result.stderr)
    assert result.seconds < 60


def test_the_reset_limit_ends_a_job_that_keeps_failing(tmp_path: Path) -> None:
    discovery = Discovery(tmp_path, "localhost:2")
    result = accordrun(
        "--host-discovery-script", str(discovery.script), "--min-np", "2", "--reset-limit", "2",
        "--blacklist-cooldown-range", "0", "0",
        "sh", "-c", 'if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then kill -9 $$; fi; sleep 1',
    )  # fmt: skip
    assert result.returncode != 0
    generations = re.findall(r"elastic: generation (\d+) on", result.stderr)
    assert generations == ["0", "1", "2"]
    assert "the job ends: it would reset 3 times, more than --reset-limit 2" in result.stderr


def test_a_program_that_fails_on_its_own_ends_the_job_with_its_status(tmp_path: Path) -> None:
    discovery = Discovery(tmp_path, "localhost:2")
    result = accordrun(
        "--host-discovery-script", str(discovery.script), "--min-np", "2", "sh", "-c", "exit 3"
    )
    assert result.returncode == 3
    assert re.search(
        r"the job ends: rank \d \(on localhost\) exited with status 3, which is the program's failure",
        result.stderr,
    )
    assert len(re.findall(r"elastic: generation \d+ on", result.stderr)) == 1


def test_an_error_the_training_function_raised_ends_the_job(tmp_path: Path) -> None:
    discovery = Discovery(tmp_path, "localhost:2")
    result = accordrun(
        "--host-discovery-script", str(discovery.script), "--min-np", "2", PYTHON, FAKE_WORKER,
        env={"FAKE_WORKER_ACTION": "error", "FAKE_WORKER_LOG": str(tmp_path / "log")},
    )  # fmt: skip
    assert result.returncode != 0
    assert (
        "the job ends: the training function raised an error that is not a failure of a host: "
        "rank 0 (on localhost): ValueError: a bad batch"
    ) in result.stderr


def test_a_failing_discovery_script_is_named(tmp_path: Path) -> None:
    script = tmp_path / "discover.sh"
    script.write_text("#!/bin/sh\necho 'h1 h2'\n")
    script.chmod(0o755)
    result = accordrun(
        "--host-discovery-script", str(script), "--min-np", "1", "--elastic-timeout", "1", "true"
    )
    assert result.returncode == 1
    assert re.search(
        r"the host discovery script .*discover.sh failed: its output: "
        r"line 1 \"h1 h2\" is not 'host' or 'host:slots'",
        result.stderr,
    )


def test_dry_run_shows_the_first_generation(tmp_path: Path) -> None:
    discovery = Discovery(tmp_path, "localhost:2")
    result = accordrun(
        "--host-discovery-script",
        str(discovery.script),
        "--min-np",
        "1",
        "--max-np",
        "1",
        "--dry-run",
        PYTHON,
        "train.py",
    )
    assert result.returncode == 0, result.stderr
    assert "generation 0 on localhost:1 (1 ranks; from the initial state); reason: start" in result.stderr
    command = result.stdout.strip()
    variables = ["DRIVER=", "GENERATION=0", "HOSTS=localhost:1", "SPILL_DIR=", "RESTORE="]
    for variable in ("ACCORD_ELASTIC_" + name for name in variables):
        assert "-x " + variable in command, command
    assert "-np 1 -H localhost:1" in command
