"""A rank's side of accordrun's elastic mode: the job's settings and the connection to the driver.

In elastic mode accordrun's driver runs one ``mpirun`` per generation and
tells every rank, through ``ACCORD_ELASTIC_*`` variables, where it listens
and how this generation is placed (``ElasticConfig``). Each rank keeps one
TCP connection to the driver (``DriverConnection``) carrying text lines,
each ending in ``\\n``:

worker -> driver

1. ``worker <token> <rank> <host>``: the first line, when the decorated
   training function is first called.
2. ``beat <rank>``: every heartbeat interval, until the process ends.
3. ``ready <rank> <restore_s> <sync_s>``: once, after the restore and sync
   that precede the training function.
4. ``commit <rank> <n> <path>``: commit ``n``'s spill file is in place at
   ``path`` (only the first rank of each host writes one).
5. One ending: ``done <rank>`` (the function returned), ``reset <rank>
   hosts`` or ``reset <rank> failure <text>`` (the rank exits with status 75
   for a new generation), or ``error <rank> <text>`` (the function raised).

driver -> worker: ``hosts <timestamp> <removed 0|1> <added 0|1>``: the hosts
changed; every registered state hears of it through ``on_hosts_updated``.

Without ``ACCORD_ELASTIC_DRIVER`` there is no driver and
``ElasticConfig.from_env()`` returns None.
"""

import os
import select
import socket
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, List, Mapping, Optional, Tuple

from accord.exceptions import HostUpdateResult

DRIVER_VAR = "ACCORD_ELASTIC_DRIVER"
GENERATION_VAR = "ACCORD_ELASTIC_GENERATION"
HOSTS_VAR = "ACCORD_ELASTIC_HOSTS"
SPILL_DIR_VAR = "ACCORD_ELASTIC_SPILL_DIR"
SPILL_MODE_VAR = "ACCORD_ELASTIC_SPILL_MODE"
RESTORE_VAR = "ACCORD_ELASTIC_RESTORE"
HEARTBEAT_VAR = "ACCORD_ELASTIC_HEARTBEAT_SECONDS"

# Texts sent to the driver stay on one line and within this many characters.
_MAX_TEXT = 2000


@dataclass(frozen=True)
class DriverAddress:
    """Where the driver listens: ``<token>@<port>@<ip>[,<ip>...]`` (the format of ACCORDRUN_REPORT).

    The token identifies this job's ranks to the driver; the addresses are
    tried in order.
    """

    token: str
    port: int
    ips: Tuple[str, ...]

    @classmethod
    def parse(cls, text: str) -> "DriverAddress":
        """Parses the address; raises ``ValueError`` naming the text when it is malformed."""
        parts = text.split("@", 2)
        if len(parts) != 3:
            raise ValueError(
                f"malformed elastic driver address {text!r}: expected <token>@<port>@<ip>[,<ip>...]"
            )
        token, port, ips = parts
        valid_port = port.isdigit() and len(port) <= 5 and 1 <= int(port) <= 65535
        addresses = tuple(ip for ip in ips.split(",") if ip)
        if not token or not valid_port or not addresses:
            raise ValueError(
                f"malformed elastic driver address {text!r}: expected <token>@<port>@<ip>[,<ip>...]"
            )
        return cls(token=token, port=int(port), ips=addresses)

    def where(self) -> str:
        """The addresses without the token, for messages: ``port 4711 at 10.0.0.1, 10.0.0.2``."""
        return f"port {self.port} at {', '.join(self.ips)}"


def parse_placement(text: str) -> Tuple[Tuple[str, int], ...]:
    """Parses ``h1:2,h2:1`` (ranks 0 and 1 on h1, rank 2 on h2) into ``(("h1", 2), ("h2", 1))``."""
    placement = []
    for entry in text.split(","):
        host, sep, slots = entry.rpartition(":")
        if not sep or not host or not slots.isdigit() or int(slots) < 1:
            raise ValueError(
                f"malformed host placement {text!r}: expected <host>:<ranks>[,<host>:<ranks>...]"
            )
        placement.append((host, int(slots)))
    return tuple(placement)


@dataclass(frozen=True)
class ElasticConfig:
    """The settings accordrun gives every rank of an elastic job, read once from the environment.

    Attributes:
        driver: where the driver listens.
        generation: 0 for the first set of ranks, then 1, 2, ...
        placement: this generation's hosts and their numbers of ranks, in rank order.
        spill_dir: the job's spill directory on every host; empty: commits are not written.
        spill_async: commits are written by a background thread (``ACCORD_ELASTIC_SPILL_MODE=async``).
        restore_path: the spill file rank 0 starts from; empty: the initial state.
        heartbeat_seconds: the interval between beats.
    """

    driver: DriverAddress
    generation: int = 0
    placement: Tuple[Tuple[str, int], ...] = ()
    spill_dir: str = ""
    spill_async: bool = False
    restore_path: str = ""
    heartbeat_seconds: float = 1.0

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> Optional["ElasticConfig"]:
        """The settings, or None outside elastic mode (``ACCORD_ELASTIC_DRIVER`` unset or empty).

        Raises:
            ValueError: a variable is malformed (the message names it).
        """
        driver = environ.get(DRIVER_VAR, "")
        if not driver:
            return None
        placement = environ.get(HOSTS_VAR, "")
        if not placement:
            raise ValueError(f"{HOSTS_VAR} is not set: accordrun sets it together with {DRIVER_VAR}")
        mode = environ.get(SPILL_MODE_VAR, "") or "sync"
        if mode not in ("sync", "async"):
            raise ValueError(f"{SPILL_MODE_VAR}={mode!r}: expected 'sync' or 'async'")
        generation = environ.get(GENERATION_VAR, "") or "0"
        if not generation.isdigit():
            raise ValueError(f"{GENERATION_VAR}={generation!r}: expected 0, 1, 2, ...")
        heartbeat = environ.get(HEARTBEAT_VAR, "") or "1"
        try:
            heartbeat_seconds = float(heartbeat)
        except ValueError:
            heartbeat_seconds = 0.0
        if not heartbeat_seconds > 0:
            raise ValueError(f"{HEARTBEAT_VAR}={heartbeat!r}: expected a positive number of seconds")
        return cls(
            driver=DriverAddress.parse(driver),
            generation=int(generation),
            placement=parse_placement(placement),
            spill_dir=environ.get(SPILL_DIR_VAR, ""),
            spill_async=mode == "async",
            restore_path=environ.get(RESTORE_VAR, ""),
            heartbeat_seconds=heartbeat_seconds,
        )

    def host_of(self, rank: int) -> str:
        """The host that ``rank`` runs on in this generation."""
        first = 0
        for host, slots in self.placement:
            if rank < first + slots:
                return host
            first += slots
        raise ValueError(f"rank {rank} is outside {HOSTS_VAR} (ranks 0 to {first - 1})")

    def is_host_writer(self, rank: int) -> bool:
        """Whether ``rank`` is the first rank on its host: the one that writes the host's spill files."""
        host = self.host_of(rank)
        first = 0
        for name, slots in self.placement:
            if name == host:
                return rank == first
            first += slots
        return False


def one_line(text: str) -> str:
    """``text`` as a single line of at most a couple of thousand characters, for the driver."""
    line = " ".join(text.split())
    return line if len(line) <= _MAX_TEXT else line[: _MAX_TEXT - 3] + "..."


class DriverConnection:
    """One rank's connection to the elastic driver.

    ``connect`` sends the ``worker`` hello and starts a daemon thread that
    sends a beat every heartbeat interval and reads the driver's lines:
    ``hosts`` updates go to every state added with ``add_state`` (those that
    came before a state was added are given to it when it is added). The
    reporting methods send one line each.

    Threads: any thread may call any method; sends are serialized by a lock.
    If the connection breaks (the driver is gone: the job is being ended),
    one warning goes to stderr and later lines are dropped, so that training
    code never fails for want of a driver that no longer listens.
    """

    def __init__(self, sock: socket.socket, rank: int, heartbeat_seconds: float):
        self._sock = sock
        self._rank = rank
        self._interval = heartbeat_seconds
        self._send_lock = threading.Lock()
        self._lost: Optional[str] = None  # guarded by _send_lock
        self._closed = threading.Event()
        self._states_lock = threading.Lock()
        self._states: List[Any] = []  # guarded by _states_lock
        self._updates: List[Tuple[float, HostUpdateResult]] = []  # guarded by _states_lock
        self._thread = threading.Thread(target=self._serve, name="accord-elastic-driver", daemon=True)

    @classmethod
    def connect(
        cls,
        address: DriverAddress,
        rank: int,
        host: str,
        heartbeat_seconds: float,
        timeout: float = 10.0,
    ) -> "DriverConnection":
        """Connects to the first of the driver's addresses that answers, says hello and starts beating.

        Raises:
            ConnectionError: no address answered within ``timeout`` seconds each; the
                message names the addresses and each one's error.
        """
        errors = []
        for ip in address.ips:
            try:
                sock = socket.create_connection((ip, address.port), timeout=timeout)
            except OSError as error:
                errors.append(f"{ip}:{address.port}: {error.strerror or error}")
                continue
            sock.settimeout(None)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            connection = cls(sock, rank, heartbeat_seconds)
            connection._send(f"worker {address.token} {rank} {host}")
            connection._thread.start()
            return connection
        raise ConnectionError(
            f"rank {rank} cannot reach accordrun's elastic driver at {address.where()} "
            f"({DRIVER_VAR}): " + "; ".join(errors)
        )

    def add_state(self, state: Any) -> None:
        """Passes every ``hosts`` update, those already received included, to ``state.on_hosts_updated``."""
        with self._states_lock:
            if any(known is state for known in self._states):
                return
            self._states.append(state)
            for timestamp, result in self._updates:
                state.on_hosts_updated(timestamp, result)

    def ready(self, restore_seconds: float, sync_seconds: float) -> None:
        self._send(f"ready {self._rank} {restore_seconds:.6f} {sync_seconds:.6f}")

    def commit(self, n: int, path: str) -> None:
        """Reports commit ``n``, whose spill file is in place at ``path``."""
        self._send(f"commit {self._rank} {n} {path}")

    def reset_hosts(self) -> None:
        self._send(f"reset {self._rank} hosts")

    def reset_failure(self, text: str) -> None:
        self._send(f"reset {self._rank} failure {one_line(text)}")

    def error(self, text: str) -> None:
        self._send(f"error {self._rank} {one_line(text)}")

    def done(self) -> None:
        self._send(f"done {self._rank}")

    def close(self) -> None:
        """Stops the beats and closes the connection (a process that exits needs not call it)."""
        self._closed.set()
        try:
            self._sock.shutdown(socket.SHUT_RDWR)  # wakes the thread's poll
        except OSError:
            pass
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()
        self._sock.close()

    def _send(self, line: str) -> None:
        with self._send_lock:
            if self._lost is not None:
                return
            try:
                self._sock.sendall((line + "\n").encode())
            except OSError as error:
                self._lose(f"sending failed: {error}")

    def _lose(self, why: str) -> None:
        """Marks the connection lost (under _send_lock) and says so once."""
        if self._lost is None and not self._closed.is_set():
            self._lost = why
            sys.stderr.write(f"accord elastic: rank {self._rank} lost its connection to the driver ({why})\n")
            sys.stderr.flush()

    def _serve(self) -> None:
        """The daemon thread: a beat every interval, and the driver's lines as they come."""
        next_beat = time.monotonic() + self._interval
        pending = b""
        poller = select.poll()  # not select(): a training process may hold more than 1024 files
        poller.register(self._sock, select.POLLIN)
        while not self._closed.is_set():
            wait_ms = max(0, int((next_beat - time.monotonic()) * 1000) + 1)
            try:
                readable = poller.poll(wait_ms)
                data = self._sock.recv(65536) if readable else None
            except (OSError, ValueError) as error:
                with self._send_lock:
                    self._lose(f"reading failed: {error}")
                return
            if data == b"":
                with self._send_lock:
                    self._lose("the driver closed it")
                return
            if data:
                pending += data
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    self._handle(line.decode(errors="replace").strip())
            now = time.monotonic()
            if now >= next_beat:
                self._send(f"beat {self._rank}")
                next_beat += self._interval
                if next_beat <= now:  # fell behind: no burst of beats to catch up
                    next_beat = now + self._interval

    def _handle(self, line: str) -> None:
        fields = line.split()
        if not fields:
            return
        update = _parse_hosts(fields) if fields[0] == "hosts" else None
        if update is None:
            sys.stderr.write(f"accord elastic: rank {self._rank} ignores the driver's line {line!r}\n")
            return
        with self._states_lock:
            self._updates.append(update)
            for state in self._states:
                state.on_hosts_updated(*update)


def _parse_hosts(fields: List[str]) -> Optional[Tuple[float, HostUpdateResult]]:
    """``hosts <timestamp> <removed 0|1> <added 0|1>`` as (timestamp, result), or None if malformed."""
    if len(fields) != 4 or fields[2] not in ("0", "1") or fields[3] not in ("0", "1"):
        return None
    try:
        timestamp = float(fields[1])
    except ValueError:
        return None
    result = HostUpdateResult.no_update
    if fields[2] == "1":
        result |= HostUpdateResult.removed
    if fields[3] == "1":
        result |= HostUpdateResult.added
    return timestamp, result


__all__ = ["DriverAddress", "DriverConnection", "ElasticConfig", "one_line", "parse_placement"]
