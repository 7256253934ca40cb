"""accordrun's elastic mode across the test bed's hosts h1-h3 (docs/elastic.md, docs/multihost.md).

Each test runs elastic_train.py under ``accordrun --host-discovery-script
elastic_discovery.py``: the hosts discovery names follow a schedule keyed on
the job's commit count (a file rank 0 rewrites at every commit), so a host
can come or go at a given commit; faults come from the training script itself
(ACCORD_TEST_ELASTIC_FAULT: a rank SIGKILLs or SIGSTOPs itself mid-step) or
from the test (every process of a host killed). Then:
  * the job ends as it should: trained (status 0), or with an error that
    names its cause (--elastic-timeout / --min-np, --reset-limit, the
    blacklist) within a bounded time, never a hang;
  * every sample was processed exactly once per epoch by the work that
    counts: a generation's batches up to the commit the next generation
    started from (which must be the newest one written), the last
    generation's all;
  * after a SIGKILL and a reset with as many ranks, the final model is the
    one of a run without a fault;
  * nothing is left: no process of the job on any host, no spill directory,
    no file descriptor that accordrun holds more after each generation.

Every process of a job carries ACCORD_TEST_ELASTIC_MARK=<a mark of its own>
in its environment: accordrun's (and mpirun's) through the test, the ranks'
through accordrun's forwarding of ACCORD_* variables, and Open MPI's daemons
through the rsh agent the job is given, a wrapper of netns-rsh that sets it
for what it starts on a host. So the leak checks see this job's processes
only, whatever else runs on the bed at the same time.

CTest runs each test alone (RESOURCE_LOCK accord_bed_elastic) with
    ACCORDRUN           the accordrun binary under test
    ACCORD_TEST_PYTHON  the interpreter the ranks run
    PYTHONPATH          the staged accord package
as root, with the bed up (the accord_bed fixture); anyone else skips.
"""

import collections
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Set

import pytest
from test_faults import bed_hosts

HERE = Path(__file__).resolve().parent
ACCORDRUN = os.environ.get("ACCORDRUN", "")
PYTHON = os.environ.get("ACCORD_TEST_PYTHON", sys.executable)
SUBNET = os.environ.get("ACCORD_BED_SUBNET", "10.77.0") + ".0/24"
BED_HOSTS = ("h1", "h2", "h3")
BED_SHM = Path("/run/accord-bed")
# The collective watchdog's timeout: how long the ranks left wait on a frozen
# or lost one before their collective fails.
COLLECTIVE_TIMEOUT_S = 8
# The bound on a whole job, for a machine half as fast as the 2-core one the
# tests were measured on: start-up of every generation (Open MPI, torch), the
# training's steps, and the detection and teardown of each reset.
JOB_TIMEOUT_S = 240
MARK_VARIABLE = "ACCORD_TEST_ELASTIC_MARK"
EPOCHS = 3
# Enough for five changes of hosts 8 commits apart (about 6 commits an epoch).
EPOCHS_FIVE_RESETS = 9
SAMPLES = 96

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="the test bed needs root"),
    pytest.mark.skipif(not ACCORDRUN, reason="ACCORDRUN is not set (run through CTest)"),
]


def spill_places(spill: str) -> List[Path]:
    """Where a job's spill directory ``spill`` (ACCORD_ELASTIC_SPILL_DIR) is on this machine.

    Under /dev/shm: in every bed host's own /dev/shm, and in this machine's
    (where accordrun runs); elsewhere (/tmp) the one directory all hosts share.
    """
    if not spill.startswith("/dev/shm/"):
        return [Path(spill)]
    inside = Path(spill).relative_to("/dev/shm")
    return [Path(spill), *(shm / inside for shm in sorted(BED_SHM.glob("*/shm")))]


@pytest.fixture(autouse=True)
def bed() -> None:
    if not set(BED_HOSTS) <= set(bed_hosts()):
        pytest.skip("the bed's hosts h1-h3 are not up (tests/multihost/bed.sh up 3)")
    for host in BED_HOSTS:
        if not (BED_SHM / host / "shm").is_dir():
            pytest.skip(f"the bed's {host} has no /dev/shm of its own: bring it up with this bed.sh")


# ------------------------------------------------------------------ processes


def marked_processes(mark: str) -> Dict[int, str]:
    """Every process whose environment carries ``mark``: pid -> "<where>: <command line>"."""
    where: Dict[int, str] = {}
    for host in BED_HOSTS:
        out = subprocess.run(["ip", "netns", "pids", host], capture_output=True, text=True).stdout
        for pid in out.split():
            where[int(pid)] = host
    needle = f"{MARK_VARIABLE}={mark}".encode()
    found: Dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes()
            if needle not in environ.split(b"\0"):
                continue
            command = (
                Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            )
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:  # gone meanwhile
            continue
        if state == "Z":
            continue
        found[int(entry)] = f"{where.get(int(entry), 'root namespace')} [{state}]: {command.strip()}"
    return found


def kill_processes(pids: Iterable[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


# ------------------------------------------------------------------ the job


class ElasticJob:
    """accordrun in elastic mode over the bed, its output collected line by line.

    Args:
        tmp: a directory of the test's own (schedule, progress, logs, output).
        schedule: elastic_discovery.py's schedule, ``<commits> <host:slots>,...`` lines.
        min_np, max_np: accordrun's --min-np and --max-np.
        fault: ACCORD_TEST_ELASTIC_FAULT for the ranks, or None.
        spill_dir: --elastic-spill-dir, or None for accordrun's default (/dev/shm).
        elastic_timeout, reset_limit, cooldown: the flags, when not None.
        train_args: more arguments for elastic_train.py.
    """

    def __init__(
        self,
        tmp: Path,
        schedule: str,
        min_np: int,
        max_np: int,
        fault: Optional[str] = None,
        spill_dir: Optional[Path] = None,
        elastic_timeout: float = 60,
        reset_limit: Optional[int] = None,
        cooldown: Optional[Sequence[float]] = None,
        train_args: Sequence[str] = (),
        name: str = "job",
    ) -> None:
        self.dir = tmp / name
        self.dir.mkdir(parents=True)
        self.log_dir = self.dir / "log"
        self.output_path = self.dir / "model.pt"
        self.progress_path = self.dir / "progress"
        schedule_path = self.dir / "schedule"
        schedule_path.write_text(schedule)
        self.mark = uuid.uuid4().hex
        agent = self.dir / "rsh"
        # netns-rsh, with the mark in the environment of what it starts; leading
        # ssh-style options pass through.
        agent.write_text(
            "#!/usr/bin/env bash\n"
            "set -euo pipefail\n"
            "options=()\n"
            'while [[ $# -gt 0 && "$1" == -* ]]; do\n'
            '  case "$1" in\n'
            '    -o|-p|-l|-i|-F) options+=("$1" "$2"); shift 2 ;;\n'
            '    *) options+=("$1"); shift ;;\n'
            "  esac\n"
            "done\n"
            'host="$1"\n'
            "shift\n"
            f'exec {HERE / "netns-rsh"} ${{options[@]+"${{options[@]}}"}} "$host" '
            f'"export {MARK_VARIABLE}={self.mark};" "$@"\n'
        )
        agent.chmod(0o755)
        command = [
            ACCORDRUN,
            "--min-np",
            str(min_np),
            "--max-np",
            str(max_np),
            "--host-discovery-script",
            str(HERE / "elastic_discovery.py"),
            "--rsh-agent",
            str(agent),
            "--network-interfaces",
            SUBNET,
            "--collective-timeout-seconds",
            str(COLLECTIVE_TIMEOUT_S),
            "--elastic-timeout",
            str(elastic_timeout),
            "--verbose",
        ]
        if spill_dir is not None:
            command += ["--elastic-spill-dir", str(spill_dir)]
        if reset_limit is not None:
            command += ["--reset-limit", str(reset_limit)]
        if cooldown is not None:
            command += ["--blacklist-cooldown-range", *(str(s) for s in cooldown)]
        command += [
            PYTHON,
            str(HERE / "elastic_train.py"),
            "--log-dir",
            str(self.log_dir),
            "--output",
            str(self.output_path),
            *train_args,
        ]
        env = {
            **os.environ,
            MARK_VARIABLE: self.mark,
            "ACCORD_TEST_ELASTIC_SCHEDULE": str(schedule_path),
            "ACCORD_TEST_ELASTIC_PROGRESS": str(self.progress_path),
        }
        env.pop("ACCORD_TEST_ELASTIC_FAULT", None)
        if fault:
            env["ACCORD_TEST_ELASTIC_FAULT"] = fault
        self.command = command
        self.lines: List[str] = []
        # accordrun's open file descriptors while each generation trains: generation -> count.
        self.fds: Dict[int, int] = {}
        self.started = time.monotonic()
        self.process = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            stdin=subprocess.DEVNULL,
            env=env,
        )
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        threading.Thread(target=self._count_fds, daemon=True).start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))

    def _count_fds(self) -> None:
        """Fills ``fds``: a second after each generation's training began (rank 0's start
        record), when every rank has connected to accordrun, the fewest of five samples (a
        discovery run in flight holds a pipe for a moment)."""
        while self.process.poll() is None:
            started = self._started_generations() - set(self.fds)
            for generation in sorted(started):
                time.sleep(1.0)
                counts = []
                for _ in range(5):
                    try:
                        counts.append(len(os.listdir(f"/proc/{self.process.pid}/fd")))
                    except OSError:
                        return
                    time.sleep(0.1)
                self.fds[generation] = min(counts)
            time.sleep(0.2)

    def _started_generations(self) -> Set[int]:
        """The generations whose rank 0 has begun training (a start record near its log's head)."""
        started = set()
        for path in self.log_dir.glob("g*-r0.jsonl"):
            with open(path) as f:
                head = f.read(4096)
            if '"event": "start"' in head:
                started.add(int(path.name[1:].split("-")[0]))
        return started

    def progress(self) -> int:
        try:
            return int(self.progress_path.read_text().strip() or 0)
        except (FileNotFoundError, ValueError):
            return 0

    def wait_for_progress(self, commits: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.progress() >= commits:
                return
            if self.process.poll() is not None:
                break
            time.sleep(0.05)
        self.stop()
        pytest.fail(f"the job did not reach commit {commits} within {timeout} s:\n{self.output()}")

    def wait(self, timeout: float = JOB_TIMEOUT_S) -> float:
        """Waits for accordrun to exit; returns the seconds since it started. Fails after `timeout`."""
        try:
            self.process.wait(timeout=max(1.0, self.started + timeout - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.stop()
            pytest.fail(f"accordrun still running {timeout} s after it started:\n{self.output()}")
        self.reader.join(timeout=10)
        return time.monotonic() - self.started

    def stop(self) -> None:
        """Ends accordrun and everything of the job (after a failure of the test)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        kill_processes(marked_processes(self.mark))

    def output(self) -> str:
        return f"$ {' '.join(self.command)}\n" + "\n".join(self.lines)

    def records(self) -> List[dict]:
        """Every rank's log records (elastic_train.py), generation by generation, rank by rank."""
        records = []
        for path in sorted(
            self.log_dir.glob("g*-r*.jsonl"), key=lambda p: [int(n) for n in re.findall(r"\d+", p.name)]
        ):
            for line in path.read_text().splitlines():
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError:  # the last line of a rank killed as it wrote
                    pass
        return records

    def generations(self) -> Dict[int, dict]:
        """The generations whose training started: generation -> rank 0's start record."""
        return {r["generation"]: r for r in self.records() if r["event"] == "start" and r["rank"] == 0}

    def check_nothing_left(self) -> None:
        """No process of the job on any host (within 20 s of accordrun's exit), no spill directory."""
        deadline = time.monotonic() + 20
        left = marked_processes(self.mark)
        while left and time.monotonic() < deadline:
            time.sleep(0.5)
            left = marked_processes(self.mark)
        kill_processes(left)
        assert not left, "processes of the job left running:\n" + "\n".join(
            f"  {pid} {what}" for pid, what in sorted(left.items())
        )
        spills = {r["spill"] for r in self.records() if r["event"] == "start" and r["spill"]}
        left_over = [place for spill in sorted(spills) for place in spill_places(spill) if place.exists()]
        assert not left_over, "spill directories left:\n" + "\n".join(
            f"  {path}" for place in left_over for path in [place, *sorted(place.rglob("*"))]
        )


@pytest.fixture
def jobs(tmp_path: Path):
    """Makes ElasticJobs in the test's directory; whatever of them is still running at the end is ended."""
    started: List[ElasticJob] = []

    def start(*args, **kwargs) -> ElasticJob:
        job = ElasticJob(tmp_path, *args, **kwargs)
        started.append(job)
        return job

    yield start
    for job in started:
        job.stop()


# ------------------------------------------------------------------ checks


def assert_trained(job: ElasticJob) -> None:
    assert job.process.returncode == 0, f"accordrun exited with {job.process.returncode}:\n{job.output()}"
    assert "TRAINED" in job.output(), job.output()
    assert job.output_path.exists(), f"rank 0 wrote no model:\n{job.output()}"


def assert_each_sample_once_per_epoch(job: ElasticJob, epochs: int = EPOCHS, samples: int = SAMPLES) -> None:
    """Every sample processed exactly once per epoch by the work that counts.

    Generation g started from commit s_g (its start record). Its batches
    count when the commit that would hold them is one the job went on from:
    after s_g and at most s_(g+1), the commit the next generation started
    from; the last generation's count up to its final commit. The driver
    restores the newest commit on disk, so s_(g+1) lies between the newest
    commit of generation g that returned on rank 0 (every rank had saved it)
    and the newest any rank of g saved: a host lost between a save and the
    commit's check of the hosts fails that check, or ends the ranks in it
    before the commit returns.
    """
    records = job.records()
    generations = job.generations()
    numbers = sorted(generations)
    assert numbers, f"no generation started:\n{job.output()}"
    done = [r for r in records if r["event"] == "done" and r["rank"] == 0]
    assert [r["generation"] for r in done] == [numbers[-1]], f"rank 0 finished in {done}:\n{job.output()}"
    bounds = {}
    for g, following in zip(numbers, numbers[1:] + [None]):
        start = generations[g]["commit"]
        end = done[0]["commit"] if following is None else generations[following]["commit"]
        if following is not None:
            returned = [
                r["commit"]
                for r in records
                if r["event"] == "commit"
                and r["generation"] == g
                and r["rank"] == 0
                and r["outcome"] != "failure"
            ]
            saved = [r["commit"] for r in records if r["event"] == "saved" and r["generation"] == g]
            low, high = max(returned, default=start), max(saved, default=start)
            assert low <= end <= high, (
                f"generation {following} started from commit {end}, but generation {g}'s newest commit "
                f"that returned was {low} and the newest any rank saved {high}"
            )
        bounds[g] = (start, end)
    counts: Dict[int, collections.Counter] = collections.defaultdict(collections.Counter)
    for r in records:
        if r["event"] == "batch" and r["generation"] in bounds:
            start, end = bounds[r["generation"]]
            if start < r["commit"] <= end:
                counts[r["epoch"]].update(r["indices"])
    problems = []
    for epoch in range(epochs):
        missing = sorted(set(range(samples)) - set(counts[epoch]))
        repeated = sorted(i for i, n in counts[epoch].items() if n > 1)
        if missing or repeated:
            problems.append(f"epoch {epoch}: missing {missing}, more than once {repeated}")
    extra = sorted(set(counts) - set(range(epochs)))
    if extra:
        problems.append(f"samples counted in epochs {extra}")
    summary = ", ".join(
        f"g{g}: {generations[g]['size']} rank(s) on {generations[g]['hosts']}, "
        f"commits {bounds[g][0]} to {bounds[g][1]}"
        for g in numbers
    )
    assert not problems, "\n".join(problems) + f"\n({summary})\n{job.output()}"


def hosts_of(start: dict) -> List[str]:
    """The hosts of a generation, from its placement (``h1:1,h2:1``)."""
    return [entry.rpartition(":")[0] for entry in start["hosts"].split(",")]


def describe(job: ElasticJob) -> str:
    gens = job.generations()
    return "; ".join(f"g{g} {gens[g]['hosts']} from commit {gens[g]['commit']}" for g in sorted(gens))


THREE_HOSTS = "0 h1:1,h2:1,h3:1\n"


# ------------------------------------------------------------------ host changes


def test_host_removed_gracefully(jobs) -> None:
    # h3 leaves at commit 4: the ranks stop together at a commit, and the job
    # goes on from it on h1 and h2.
    job = jobs(THREE_HOSTS + "4 h1:1,h2:1\n", min_np=2, max_np=3)
    seconds = job.wait()
    assert_trained(job)
    gens = job.generations()
    first, last = gens[min(gens)], gens[max(gens)]
    assert (first["size"], hosts_of(first)) == (3, ["h1", "h2", "h3"]), describe(job)
    assert last["size"] == 2 and "h3" not in hosts_of(last), describe(job)
    outcomes = {
        r["outcome"] for r in job.records() if r["event"] == "commit" and r["generation"] == min(gens)
    }
    assert "hosts" in outcomes, f"generation 0 did not end at a commit for the change of hosts: {outcomes}"
    assert_each_sample_once_per_epoch(job)
    print(f"{describe(job)}; {seconds:.1f} s")
    job.check_nothing_left()


def test_host_added(jobs, tmp_path: Path) -> None:
    # h3 comes at commit 4; the spill goes to a directory every host shares
    # (as on a shared file system), which must be gone at the end.
    spill = tmp_path / "spill"
    job = jobs("0 h1:1,h2:1\n4 h1:1,h2:1,h3:1\n", min_np=2, max_np=3, spill_dir=spill)
    seconds = job.wait()
    assert_trained(job)
    gens = job.generations()
    first, last = gens[min(gens)], gens[max(gens)]
    assert (first["size"], hosts_of(first)) == (2, ["h1", "h2"]), describe(job)
    assert last["size"] == 3 and sorted(hosts_of(last)) == ["h1", "h2", "h3"], describe(job)
    assert_each_sample_once_per_epoch(job)
    assert not spill.exists() or not any(spill.iterdir()), (
        f"left in the spill directory: {list(spill.rglob('*'))}"
    )
    print(f"{describe(job)}; {seconds:.1f} s")
    job.check_nothing_left()


# ------------------------------------------------------------------ failures


def test_rank_killed_mid_step(jobs) -> None:
    # Rank 1 (on h2) SIGKILLs itself in the step after commit 3: the others'
    # allreduce fails, the generation ends, h2 is blacklisted, and the job
    # goes on from commit 3 on h1 and h3.
    job = jobs(THREE_HOSTS, min_np=2, max_np=3, fault="kill:rank=1:commit=3")
    seconds = job.wait()
    assert_trained(job)
    gens = job.generations()
    assert len(gens) == 2, describe(job)
    assert hosts_of(gens[0]) == ["h1", "h2", "h3"], describe(job)
    assert gens[1]["size"] == 2 and "h2" not in hosts_of(gens[1]), describe(job)
    assert gens[1]["commit"] == 3, describe(job)
    assert re.search(r"blacklist\w* h2", job.output()), job.output()
    assert_each_sample_once_per_epoch(job)
    print(f"{describe(job)}; {seconds:.1f} s")
    job.check_nothing_left()


def test_whole_host_lost(jobs) -> None:
    # h2 holds two ranks; once the job has made commit 3 every process on h2
    # (its ranks and Open MPI's daemon) is killed at once, as if it crashed.
    job = jobs("0 h1:1,h2:2,h3:1\n", min_np=2, max_np=4)
    job.wait_for_progress(3, timeout=JOB_TIMEOUT_S / 2)
    on_h2 = [pid for pid, where in marked_processes(job.mark).items() if where.startswith("h2 ")]
    assert on_h2, f"nothing of the job on h2:\n{job.output()}"
    kill_processes(on_h2)
    seconds = job.wait()
    assert_trained(job)
    gens = job.generations()
    assert gens[0]["size"] == 4, describe(job)
    last = gens[max(gens)]
    assert last["size"] == 2 and "h2" not in hosts_of(last), describe(job)
    assert_each_sample_once_per_epoch(job)
    print(f"{describe(job)}; {seconds:.1f} s")
    job.check_nothing_left()


def test_frozen_rank(jobs) -> None:
    # Rank 1 (on h2) stops itself (SIGSTOP) in the step after commit 3: it
    # neither fails nor beats. The others' collective times out
    # (--collective-timeout-seconds) or the driver misses its beats; either
    # way the generation ends, the stopped process must not outlive the job,
    # and h2 is the host to blame.
    job = jobs(THREE_HOSTS, min_np=2, max_np=3, fault="stop:rank=1:commit=3")
    seconds = job.wait()
    assert_trained(job)
    gens = job.generations()
    assert len(gens) >= 2, describe(job)
    assert "h2" not in hosts_of(gens[max(gens)]), f"the frozen rank's host was not left out: {describe(job)}"
    assert_each_sample_once_per_epoch(job)
    print(f"{describe(job)}; {seconds:.1f} s")
    job.check_nothing_left()


def test_blacklisted_host_returns_after_cooldown(jobs) -> None:
    # Two hosts, two ranks needed: after rank 1's host is blacklisted there
    # are too few slots until its cooldown (1-2 s) ends; then the job goes on
    # on both hosts.
    job = jobs("0 h1:1,h2:1\n", min_np=2, max_np=2, fault="kill:rank=1:commit=3", cooldown=(1, 2))
    seconds = job.wait()
    assert_trained(job)
    gens = job.generations()
    assert len(gens) == 2 and gens[1]["size"] == 2, describe(job)
    assert sorted(hosts_of(gens[1])) == ["h1", "h2"], describe(job)
    assert_each_sample_once_per_epoch(job)
    print(f"{describe(job)}; {seconds:.1f} s")
    job.check_nothing_left()


# ------------------------------------------------------------------ the driver gives up


def test_all_hosts_blacklisted_is_an_error_not_a_hang(jobs) -> None:
    # Rank 0 kills itself after commit 1 in every generation: h1 goes, then
    # h2, then no host is left.
    job = jobs("0 h1:1,h2:1\n", min_np=1, max_np=2, fault="kill:rank=0:commit=1:gen=any", elastic_timeout=15)
    seconds = job.wait()
    text = job.output()
    assert job.process.returncode != 0, text
    assert "TRAINED" not in text, text
    assert re.search(r"blacklist", text, re.IGNORECASE), text
    # At the latest when --elastic-timeout has passed without a host to run on
    # (a discovery script may still name a new one), plus the two generations.
    assert seconds < 15 + 90, f"ended {seconds:.1f} s after the start\n{text}"
    print(f"{describe(job)}; ended {seconds:.1f} s after the start, status {job.process.returncode}")
    job.check_nothing_left()


@pytest.mark.parametrize("when", ["at_start", "after_removal"])
def test_below_min_np_until_the_elastic_timeout(jobs, when: str) -> None:
    # Two ranks needed, one host there: from the start, or after h2 leaves
    # at commit 3. After --elastic-timeout (10 s) the driver gives up.
    schedule = "0 h1:1\n" if when == "at_start" else "0 h1:1,h2:1\n3 h1:1\n"
    job = jobs(schedule, min_np=2, max_np=2, elastic_timeout=10)
    if when == "after_removal":
        job.wait_for_progress(3, timeout=JOB_TIMEOUT_S / 2)
    waited_from = time.monotonic()
    job.wait()
    waited = time.monotonic() - waited_from
    text = job.output()
    assert job.process.returncode != 0, text
    assert "TRAINED" not in text, text
    assert re.search(r"elastic-timeout", text), text
    assert re.search(r"min-np", text), text
    assert waited >= 10 - 1, f"gave up {waited:.1f} s after the wait began\n{text}"
    assert waited <= 10 + 60, f"gave up {waited:.1f} s after the wait began\n{text}"
    print(f"{describe(job)}; gave up {waited:.1f} s after the wait began")
    job.check_nothing_left()


def test_reset_limit(jobs) -> None:
    # Rank 1 kills itself after commit 2 in every generation; one reset is
    # allowed, so the second failure ends the job.
    job = jobs(THREE_HOSTS, min_np=2, max_np=2, fault="kill:rank=1:commit=2:gen=any", reset_limit=1)
    seconds = job.wait()
    text = job.output()
    assert job.process.returncode != 0, text
    assert "TRAINED" not in text, text
    assert re.search(r"reset-limit", text), text
    assert len(job.generations()) <= 2, describe(job)
    print(f"{describe(job)}; ended {seconds:.1f} s after the start")
    job.check_nothing_left()


# ------------------------------------------------------------------ many resets, the result


def test_five_resets_leave_nothing(jobs) -> None:
    # h3 comes and goes every 8 commits: five resets, each a new mpirun. No
    # process, spill file or descriptor of accordrun may pile up.
    schedule = "0 h1:1,h2:1\n" + "".join(
        f"{8 * k + 2} h1:1,h2:1{',h3:1' if k % 2 == 0 else ''}\n" for k in range(5)
    )
    job = jobs(
        schedule,
        min_np=2,
        max_np=3,
        train_args=["--epochs", str(EPOCHS_FIVE_RESETS), "--step-seconds", "0.2"],
    )
    seconds = job.wait(timeout=2 * JOB_TIMEOUT_S)
    assert_trained(job)
    gens = job.generations()
    assert len(gens) >= 6, f"{len(gens) - 1} reset(s), not 5: {describe(job)}"
    assert_each_sample_once_per_epoch(job, epochs=EPOCHS_FIVE_RESETS)
    # Descriptors: generations of the same size must find accordrun holding
    # as many (the first is left out: the driver may open some at its first).
    by_size: Dict[int, Dict[int, int]] = collections.defaultdict(dict)
    for g, count in job.fds.items():
        if g > 0 and g in gens:
            by_size[gens[g]["size"]][g] = count
    assert sum(len(v) for v in by_size.values()) >= 3, (
        f"too few samples of accordrun's descriptors: {job.fds}"
    )
    for size, counts in by_size.items():
        assert max(counts.values()) - min(counts.values()) <= 1, (
            f"accordrun's open descriptors grow from generation to generation ({size} ranks): {counts}"
        )
    print("\n".join(line for line in job.lines if "elastic:" in line))
    print(f"{describe(job)}; descriptors {job.fds}; {seconds:.1f} s")
    job.check_nothing_left()


def test_final_model_after_a_sigkill_reset_equals_a_run_without_reset(jobs) -> None:
    # Three hosts, at most two ranks: when rank 1 is killed after commit 3 the
    # job goes on with two ranks (h1 and h3) from commit 3, over the same
    # batches a job without the fault runs, and must end with its model.
    import torch

    reference = jobs(THREE_HOSTS, min_np=2, max_np=2, name="reference")
    reference.wait()
    assert_trained(reference)
    assert len(reference.generations()) == 1, describe(reference)

    job = jobs(THREE_HOSTS, min_np=2, max_np=2, fault="kill:rank=1:commit=3", name="killed")
    seconds = job.wait()
    assert_trained(job)
    gens = job.generations()
    assert len(gens) == 2 and all(g["size"] == 2 for g in gens.values()), describe(job)
    assert_each_sample_once_per_epoch(job)

    expected = torch.load(reference.output_path)
    got = torch.load(job.output_path)
    assert expected.keys() == got.keys()
    for name in expected:
        difference = (expected[name] - got[name]).abs().max().item()
        assert torch.allclose(got[name], expected[name], rtol=1e-6, atol=1e-7), (
            f"'{name}' differs from the run without a reset by up to {difference}:\n"
            f"{got[name]}\n{expected[name]}\n{describe(job)}"
        )
    print(f"{describe(job)}; {seconds:.1f} s")
    reference.check_nothing_left()
    job.check_nothing_left()
