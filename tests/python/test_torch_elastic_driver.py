"""accord.torch.elastic under accordrun's elastic mode, against a fake driver.

The test process plays the driver (docs/elastic.md; the protocol is written
out in accord/elastic_driver.py): a TCP server that records every rank's
lines and can send ``hosts``. Each generation is a real 2-rank mpiexec of
elastic_worker.py with the ACCORD_ELASTIC_* variables the driver would set.
The test checks every rank's lines (hello, beats, ready, commits, the
ending), loads each reported spill file back and compares it with the
values of that commit, and checks exit statuses and what the ranks printed:
a change of hosts told to one rank ends every rank at the same commit with
status 75, and the next generation starts every rank from rank 0's restore
of the last commit. The address and placement parsing, the connection and
the spill writer are also checked on their own, in this process.

Not run under mpiexec: it starts its own jobs (tests/python/CMakeLists.txt
gives it mpiexec and its flags in ACCORD_TEST_MPIEXEC[_FLAGS]).
"""

import os
import pickle
import queue
import re
import shlex
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional

import pytest

from accord.elastic_driver import DriverAddress, DriverConnection, ElasticConfig, parse_placement
from accord.elastic_spill import SpillWriter
from accord.exceptions import HostUpdateResult

torch = pytest.importorskip("torch")

from elastic_worker import BATCH, momentum_after  # noqa: E402

WORKER = Path(__file__).resolve().parent / "elastic_worker.py"
HEARTBEAT = 0.2


class FakeDriver:
    """The driver's side of the connections: records each rank's lines; sends ``hosts``.

    ``on_line(driver, rank, line)`` runs on the connection's reader thread
    for every line after the hello; what it finds wrong goes to
    ``problems`` (an exception there would otherwise go unseen).
    """

    def __init__(self, on_line: Optional[Callable[["FakeDriver", int, str], None]] = None):
        self.token = "t0k3n"
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        self._on_line = on_line
        self._lock = threading.Lock()
        self.lines: Dict[int, List[str]] = {}  # rank -> its lines, the hello first
        self.hosts: Dict[int, str] = {}
        self.problems: List[str] = []
        self._socks: Dict[int, socket.socket] = {}
        self._accepted: List[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def address(self) -> str:
        # 127.0.0.3 refuses (the server listens on 127.0.0.1 only): the
        # worker must go on to the next address.
        return f"{self.token}@{self.port}@127.0.0.3,127.0.0.1"

    def send(self, rank: int, line: str) -> None:
        self._socks[rank].sendall((line + "\n").encode())

    def wait_for_ranks(self, count: int, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while len(self._socks) < count:
            assert time.monotonic() < deadline, f"only ranks {sorted(self._socks)} said hello"
            time.sleep(0.01)

    def reports(self, rank: int) -> List[str]:
        """Rank ``rank``'s lines after the hello, without the beats."""
        with self._lock:
            return [line for line in self.lines.get(rank, [])[1:] if not line.startswith("beat ")]

    def close(self) -> None:
        self._server.close()
        for sock in self._accepted:
            sock.close()

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self._server.accept()
            except OSError:
                return
            self._accepted.append(sock)
            threading.Thread(target=self._read, args=(sock,), daemon=True).start()

    def _read(self, sock: socket.socket) -> None:
        rank = None
        for raw in sock.makefile("r", encoding="utf-8"):
            line = raw.rstrip("\n")
            if rank is None:
                fields = line.split()
                if len(fields) != 4 or fields[0] != "worker" or fields[1] != self.token:
                    self.problems.append(f"first line {line!r} is not 'worker {self.token} <rank> <host>'")
                    return
                rank = int(fields[2])
                with self._lock:
                    self.lines[rank] = [line]
                    self.hosts[rank] = fields[3]
                    self._socks[rank] = sock
                continue
            with self._lock:
                self.lines[rank].append(line)
            if self._on_line is not None:
                try:
                    self._on_line(self, rank, line)
                except Exception as error:
                    self.problems.append(f"rank {rank}: {line!r}: {type(error).__name__}: {error}")


def spill_file_problems(path: str, n: int) -> List[str]:
    """What in commit ``n``'s spill file differs from elastic_worker.py's step n (2 ranks throughout)."""
    record = torch.load(path, weights_only=False)
    state = record["state"]
    problems = []
    if record["commit"] != n:
        problems.append(f"commit {record['commit']}")
    expected = {"step": n, "history": list(range(1, n + 1)), "note": "rank 0"}
    if state["objects"] != expected:
        problems.append(f"objects {state['objects']}, expected {expected}")
    for name, value in state["handlers"]["model"].items():
        if not torch.all(value == float(n)):
            problems.append(f"model '{name}' {value.flatten()[:3]}")
    for index, values in state["handlers"]["optimizer"]["state"].items():
        buffer = values["momentum_buffer"]
        if not torch.allclose(buffer, torch.full_like(buffer, momentum_after(n))):
            problems.append(f"momentum of parameter {index}: {buffer.flatten()[:3]}")
    sampler = state["handlers"]["sampler"]
    if sampler["epoch"] != 0 or len(sampler["processed_indices"]) != BATCH * 2 * n:
        problems.append(f"sampler epoch {sampler['epoch']}, {len(sampler['processed_indices'])} processed")
    return [f"{path}: {problem}" for problem in problems]


class Generation:
    """One generation of a 2-rank elastic job: its fake driver, its variables and its mpiexec.

    Every ``commit`` line is checked at once: the path is this generation's
    file for the rank's host, the file exists and holds commit n's values.
    Then the rank is let go on (the ack file elastic_worker.py waits for).
    ``after_commit(driver, rank, n)`` runs after the check, before the ack.
    """

    def __init__(
        self,
        workdir: Path,
        number: int,
        placement: str,
        restore: str = "",
        mode: str = "sync",
        after_commit: Optional[Callable[[FakeDriver, int, int], None]] = None,
    ):
        self.spill = workdir / "spill"
        self.ack = workdir / f"ack-g{number}"
        self.ack.mkdir(parents=True)
        self.number = number
        self.after_commit = after_commit
        self.commits: Dict[int, List[int]] = {}
        self.driver = FakeDriver(self._on_line)
        self.env = {
            "ACCORD_ELASTIC_DRIVER": self.driver.address,
            "ACCORD_ELASTIC_GENERATION": str(number),
            "ACCORD_ELASTIC_HOSTS": placement,
            "ACCORD_ELASTIC_SPILL_DIR": str(self.spill),
            "ACCORD_ELASTIC_SPILL_MODE": mode,
            "ACCORD_ELASTIC_RESTORE": restore,
            "ACCORD_ELASTIC_HEARTBEAT_SECONDS": str(HEARTBEAT),
            "ACCORD_TEST_ACK_DIR": str(self.ack),
        }

    def run(self, *args: str) -> subprocess.CompletedProcess:
        mpiexec = os.environ.get("ACCORD_TEST_MPIEXEC") or shutil.which("mpiexec")
        if not mpiexec:
            pytest.skip("no mpiexec")
        flags = shlex.split(
            os.environ.get("ACCORD_TEST_MPIEXEC_FLAGS", "--allow-run-as-root --oversubscribe")
        )
        forward = [arg for var in [*self.env, "PYTHONPATH"] for arg in ("-x", var)]
        command = [mpiexec, "-n", "2", *flags, *forward, sys.executable, str(WORKER), *args]
        # Buffered output, as usual: run must flush what the ranks wrote before they exit.
        env = {name: value for name, value in os.environ.items() if name != "PYTHONUNBUFFERED"}
        try:
            return subprocess.run(
                command, env={**env, **self.env}, capture_output=True, text=True, timeout=150
            )
        finally:
            self.driver.close()

    def _on_line(self, driver: FakeDriver, rank: int, line: str) -> None:
        fields = line.split(" ", 3)
        if fields[0] != "commit":
            return
        n, path = int(fields[2]), fields[3]
        self.commits.setdefault(rank, []).append(n)
        host = driver.hosts[rank]
        expected = str(self.spill / host / f"state-g{self.number}-c{n}.pt")
        if path != expected:
            driver.problems.append(f"rank {rank} reported commit {n} at {path}, expected {expected}")
        elif not os.path.exists(path):
            driver.problems.append(f"rank {rank} reported commit {n} at {path}, which does not exist")
        else:
            driver.problems.extend(spill_file_problems(path, n))
        if self.after_commit is not None:
            self.after_commit(driver, rank, n)
        (self.ack / f"{host}-c{n}").touch()


def describe(result: subprocess.CompletedProcess, generation: Generation) -> str:
    lines = "\n".join(f"rank {r}: {lines}" for r, lines in sorted(generation.driver.lines.items()))
    return f"status {result.returncode}\n{lines}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"


def check_started(generation: Generation, placement_hosts: List[str]) -> None:
    """Each rank said hello with its host of the placement, then ``ready`` before anything else."""
    driver = generation.driver
    assert driver.problems == []
    for rank, host in enumerate(placement_hosts):
        assert driver.lines[rank][0] == f"worker {driver.token} {rank} {host}"
        ready = driver.reports(rank)[0].split()
        assert ready[:2] == ["ready", str(rank)] and len(ready) == 4, driver.reports(rank)
        assert float(ready[2]) >= 0 and float(ready[3]) >= 0


# ------------------------------------------------------- in this process


def test_the_driver_address_and_the_placement_parse_as_accordrun_writes_them():
    address = DriverAddress.parse("abc@4711@10.0.0.1,,10.0.0.2")
    assert address == DriverAddress("abc", 4711, ("10.0.0.1", "10.0.0.2"))
    assert address.where() == "port 4711 at 10.0.0.1, 10.0.0.2"
    for bad in [
        "",
        "abc",
        "abc@4711",
        "@4711@10.0.0.1",
        "abc@0@10.0.0.1",
        "abc@99999@1.2.3.4",
        "abc@x@1.2.3.4",
    ]:
        with pytest.raises(ValueError, match="malformed elastic driver address"):
            DriverAddress.parse(bad)
    assert parse_placement("h1:2,h2:1") == (("h1", 2), ("h2", 1))
    for bad in ["h1", "h1:0", ":2", "h1:2,"]:
        with pytest.raises(ValueError, match="malformed host placement"):
            parse_placement(bad)


def test_the_config_reads_the_variables_and_places_the_ranks():
    assert ElasticConfig.from_env({}) is None
    env = {
        "ACCORD_ELASTIC_DRIVER": "abc@4711@10.0.0.1",
        "ACCORD_ELASTIC_GENERATION": "3",
        "ACCORD_ELASTIC_HOSTS": "h1:2,h2:1",
        "ACCORD_ELASTIC_SPILL_MODE": "async",
        "ACCORD_ELASTIC_HEARTBEAT_SECONDS": "0.5",
    }
    config = ElasticConfig.from_env(env)
    assert (config.generation, config.spill_async, config.heartbeat_seconds) == (3, True, 0.5)
    assert (config.spill_dir, config.restore_path) == ("", "")
    assert [config.host_of(r) for r in range(3)] == ["h1", "h1", "h2"]
    assert [config.is_host_writer(r) for r in range(3)] == [True, False, True]
    with pytest.raises(ValueError, match="rank 3 is outside ACCORD_ELASTIC_HOSTS"):
        config.host_of(3)
    for var, value in [
        ("ACCORD_ELASTIC_SPILL_MODE", "later"),
        ("ACCORD_ELASTIC_GENERATION", "-1"),
        ("ACCORD_ELASTIC_HEARTBEAT_SECONDS", "0"),
        ("ACCORD_ELASTIC_HOSTS", ""),
    ]:
        with pytest.raises(ValueError, match=var):
            ElasticConfig.from_env({**env, var: value})


def test_a_driver_that_cannot_be_reached_is_named_in_the_error():
    with socket.create_server(("127.0.0.1", 0)) as probe:
        port = probe.getsockname()[1]  # closed again below: nothing listens there
    address = DriverAddress.parse(f"abc@{port}@127.0.0.1")
    with pytest.raises(ConnectionError, match=f"rank 2 cannot reach .* driver at port {port} at 127.0.0.1"):
        DriverConnection.connect(address, rank=2, host="h1", heartbeat_seconds=1.0, timeout=5)


class RecordingState:
    def __init__(self):
        self.updates: "queue.Queue" = queue.Queue()

    def on_hosts_updated(self, timestamp, result):
        self.updates.put((timestamp, result))


def test_the_connection_says_hello_beats_and_hands_hosts_to_every_state():
    driver = FakeDriver()
    connection = DriverConnection.connect(
        DriverAddress.parse(driver.address), 4, "h9", heartbeat_seconds=0.05
    )
    try:
        driver.wait_for_ranks(1)
        assert driver.lines[4][0] == f"worker {driver.token} 4 h9"
        first = RecordingState()
        connection.add_state(first)
        driver.send(4, "hosts 17.5 1 0")
        driver.send(4, "nonsense")  # ignored, with a warning
        driver.send(4, "hosts 18 0 1")
        received = [first.updates.get(timeout=10) for _ in range(2)]
        assert received == [(17.5, HostUpdateResult.removed), (18.0, HostUpdateResult.added)]
        second = RecordingState()
        connection.add_state(second)  # given what came before, at once
        assert [second.updates.get_nowait() for _ in range(2)] == received
        driver.send(4, "hosts 19 1 1")
        for state in (first, second):
            assert state.updates.get(timeout=10) == (19.0, HostUpdateResult.mixed)
        connection.commit(3, "/spill/h9/state-g0-c3.pt")
        connection.reset_failure("AccordError: one\nline")
        deadline = time.monotonic() + 10
        while len(driver.reports(4)) < 2 or sum(line == "beat 4" for line in driver.lines[4]) < 3:
            assert time.monotonic() < deadline, driver.lines[4]
            time.sleep(0.01)
        assert driver.reports(4) == [
            "commit 4 3 /spill/h9/state-g0-c3.pt",
            "reset 4 failure AccordError: one line",
        ]
    finally:
        connection.close()
        driver.close()


def test_the_spill_writer_keeps_one_file_and_reports_it_once_written(tmp_path):
    reported = []

    def save(record, path):
        with open(path, "wb") as f:
            pickle.dump(record, f)

    for asynchronous in (False, True):
        directory = tmp_path / f"async{asynchronous}" / "h1"
        writer = SpillWriter(str(directory), 2, asynchronous, lambda n, path: reported.append((n, path)))
        for n in (1, 2, 3):
            writer.write(n, {"n": n}, save)
        writer.wait()
        path = str(directory / "state-g2-c3.pt")
        assert os.listdir(directory) == ["state-g2-c3.pt"]
        with open(path, "rb") as f:
            assert pickle.load(f) == {"n": 3}
        assert reported[-3:] == [(n, str(directory / f"state-g2-c{n}.pt")) for n in (1, 2, 3)]
        writer.remove_directory()
        assert not directory.exists()

    def failing(record, path):
        raise OSError(28, "No space left on device")

    writer = SpillWriter(str(tmp_path / "full"), 0, True, lambda n, path: reported.append((n, path)))
    writer.write(1, {}, failing)
    for _ in range(2):  # the first error stays
        with pytest.raises(OSError, match="No space left"):
            writer.write(2, {}, save)
    assert os.listdir(tmp_path / "full") == [] and reported[-1][0] == 3


# ------------------------------------------------- generations of 2 ranks


@pytest.mark.watchdog_seconds(200)
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_each_commit_is_reported_with_its_spill_file_and_done_removes_them(tmp_path, mode):
    generation = Generation(tmp_path, 0, "a:2", mode=mode)
    result = generation.run("train", "3")
    assert result.returncode == 0, describe(result, generation)
    check_started(generation, ["a", "a"])
    driver = generation.driver
    # Rank 0 writes host a's files; rank 1, on the same host, writes none.
    assert driver.reports(0)[1:] == [
        f"commit 0 {n} {generation.spill}/a/state-g0-c{n}.pt" for n in (1, 2, 3)
    ] + ["done 0"]
    assert driver.reports(1)[1:] == ["done 1"]
    for rank in (0, 1):
        assert sum(line == f"beat {rank}" for line in driver.lines[rank]) >= 2, (
            "beats while the function sleeps"
        )
        assert f"RETURNED rank={rank} step=3" in result.stdout
    assert not (generation.spill / "a").exists(), "done: the host's spill directory is deleted"


@pytest.mark.watchdog_seconds(300)
def test_a_host_change_ends_every_rank_at_one_commit_and_the_next_generation_restores_it(tmp_path):
    def announce(driver, rank, n):
        # Told to rank 1 alone, while rank 0 waits: every rank must still stop together.
        if rank == 0 and n == 2:
            driver.send(1, "hosts 1700000000.25 0 1")

    first = Generation(tmp_path, 0, "a:1,b:1", after_commit=announce)
    result = first.run("until-reset")
    assert result.returncode == 75, describe(result, first)
    check_started(first, ["a", "b"])
    interrupted = sorted(re.findall(r"INTERRUPTED rank=(\d+) commit=(\d+);", result.stdout))
    assert [rank for rank, _ in interrupted] == ["0", "1"], describe(result, first)
    n = int(interrupted[0][1])
    # Commit 2 when rank 1 hears before its own commit 2's check, a later one otherwise.
    assert n >= 2 and interrupted[1][1] == str(n), f"the ranks stopped at different commits: {interrupted}"
    for rank in (0, 1):  # both write (one rank per host), the last commit included
        assert first.commits[rank] == list(range(1, n + 1))
        assert first.driver.reports(rank)[-1] == f"reset {rank} hosts"
    restore = first.spill / "b" / f"state-g0-c{n}.pt"
    assert restore.exists() and (first.spill / "a" / f"state-g0-c{n}.pt").exists()

    # Generation 1, both ranks on host a: rank 0 restores host b's file.
    second = Generation(tmp_path, 1, "a:2", restore=str(restore))
    result = second.run("resume")
    assert result.returncode == 0, describe(result, second)
    check_started(second, ["a", "a"])
    assert float(second.driver.reports(0)[0].split()[2]) > 0, "rank 0's restore took time"
    assert second.driver.reports(0)[1:] == [
        f"commit 0 {n + 1} {second.spill}/a/state-g1-c{n + 1}.pt",
        "done 0",
    ]
    assert second.driver.reports(1)[1:] == ["done 1"]
    assert f"RETURNED rank=1 step={n + 1}" in result.stdout


@pytest.mark.watchdog_seconds(200)
@pytest.mark.parametrize(
    "scenario, ending, status",
    [
        ("error", "error {rank} ValueError: bad batch on rank {rank}", 1),
        ("failure", "reset {rank} failure AccordError: peer lost, seen by rank {rank}", 75),
    ],
)
def test_an_exception_is_reported_as_an_error_or_a_failure(tmp_path, scenario, ending, status):
    generation = Generation(tmp_path, 0, "a:2")
    result = generation.run(scenario)
    assert result.returncode == status, describe(result, generation)
    check_started(generation, ["a", "a"])
    for rank in (0, 1):
        assert generation.driver.reports(rank)[-1] == ending.format(rank=rank), describe(result, generation)
    if scenario == "error":
        assert "ValueError: bad batch on rank" in result.stderr, "the exception propagates"
    else:
        assert "Traceback" not in result.stderr, describe(result, generation)
