"""Elastic training's framework-neutral parts: ``State``, ``ObjectState`` and ``run_fn``.

A training function decorated by ``run`` (``accord.torch.elastic.run``)
keeps its progress in a ``State``: ``commit()`` saves it and checks whether
the job's hosts changed, ``restore()`` goes back to the last commit, and
``sync()`` gives every rank rank 0's. The names and the behaviour are
Horovod's (``horovod.common.elastic``); docs/elastic.md says what differs.

In accordrun's elastic mode (``ACCORD_ELASTIC_DRIVER`` set; docs/elastic.md)
every generation of ranks is a new set of processes: a commit is also
written to a spill file that the next generation starts from, the ranks
report to the driver (accord.elastic_driver), and a change of hosts ends the
process with status 75 instead of starting the function again in it.

Threads: a ``State`` belongs to the training thread. ``on_hosts_updated``
may be called from any thread (it only queues the news).
"""

import atexit
import copy
import ctypes
import functools
import os
import pickle
import queue
import sys
import time
from typing import Any, Callable, Dict, Iterable, Optional, Tuple

import numpy as np

from accord import collectives
from accord.basics import shutdown
from accord.elastic_driver import DriverConnection, ElasticConfig
from accord.elastic_spill import SpillWriter
from accord.exceptions import HorovodInternalError, HostsUpdatedInterrupt, HostUpdateResult
from accord.ops import Max

# The exit status of a rank that ends its generation for a reset: the driver
# takes it as "not this rank's fault" and starts the next generation.
RESET_EXIT_STATUS = 75

# Marks a spill file's record (a dict) as one of ours, of this layout.
_SPILL_FORMAT = "accord.elastic.State/1"


class State:
    """State kept across the resets of elastic training.

    Args:
        bcast_object: broadcasts a picklable object from rank 0 to every rank.
        get_rank: returns this process's rank.
    """

    def __init__(self, bcast_object: Callable[[Any], Any], get_rank: Callable[[], int]):
        self._bcast_object = bcast_object
        self._rank = get_rank
        self._host_messages: "queue.Queue" = queue.Queue()
        self._last_updated_timestamp = 0
        self._reset_callbacks = []
        self._commit_count = 0
        # Set by run on the rank that writes its host's spill files (elastic mode).
        self._spill: Optional[SpillWriter] = None

    @property
    def commit_count(self) -> int:
        """The number of commits so far; in elastic mode it goes on from the spill file restored."""
        return self._commit_count

    def register_reset_callbacks(self, callbacks: Iterable[Callable[[], None]]) -> None:
        """Adds functions to call after every reset (e.g. to scale the learning rate to the new size)."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self) -> None:
        """Called by ``run`` after a reset: drops old news of hosts, resets, then runs the callbacks."""
        self._host_messages = queue.Queue()
        self.reset()
        for callback in self._reset_callbacks:
            callback()

    def on_hosts_updated(self, timestamp: float, update_res: HostUpdateResult) -> None:
        """Queues news that the hosts changed at ``timestamp``; the next commit acts on it."""
        self._host_messages.put((timestamp, HostUpdateResult(update_res)))

    def commit(self) -> None:
        """Saves the state (the point ``restore`` returns to), then ``check_host_updates()``.

        A commit copies the state (from the GPU where it lives there), so
        committing every few batches rather than every batch trades the work
        lost to a failure against the time each step spends committing. In
        elastic mode the first rank of each host also writes the saved state
        to its spill file (accord.elastic_spill) before the check.
        """
        self.save()
        self._commit_count += 1
        if self._spill is not None:
            record = self._spill_record(detached=self._spill.asynchronous)
            self._spill.write(self._commit_count, record, self._spill_save)
        self.check_host_updates()

    def check_host_updates(self) -> None:
        """Raises ``HostsUpdatedInterrupt`` on every rank if any rank has news of changed hosts.

        The ranks agree in one small collective (a Max allreduce of the newest
        timestamp and of what changed), so they raise at the same commit or
        none does, whichever rank the news reached first.
        """
        previous = self._last_updated_timestamp
        newest, update = previous, HostUpdateResult.no_update
        while not self._host_messages.empty():
            timestamp, result = self._host_messages.get()
            if timestamp > previous:
                newest = max(newest, timestamp)
                update |= result
        mine = np.array(
            [newest, bool(update & HostUpdateResult.removed), bool(update & HostUpdateResult.added)],
            dtype=np.float64,
        )
        agreed = collectives.allreduce(mine, op=Max, name="accord.elastic.check_host_updates")
        self._last_updated_timestamp = agreed[0]
        if agreed[0] > previous:
            removed_only = bool(agreed[1]) and not bool(agreed[2])
            raise HostsUpdatedInterrupt(removed_only)

    def save(self) -> None:
        """Saves the state in memory."""
        raise NotImplementedError()

    def restore(self) -> None:
        """Returns to the last saved state, undoing what changed since."""
        raise NotImplementedError()

    def sync(self) -> None:
        """Gives every rank rank 0's state."""
        raise NotImplementedError()

    def reset(self) -> None:
        """Adapts the state to a new set of ranks, before it is synchronized (nothing by default)."""

    # What elastic mode writes to a spill file and loads back: a dict with the
    # commit count and the subclass's payload (its saved state).

    def _spill_record(self, detached: bool) -> Dict[str, Any]:
        return {"format": _SPILL_FORMAT, "commit": self._commit_count, "state": self._spill_payload(detached)}

    def _load_spill_record(self, record: Any) -> None:
        """Makes a spill file's record the saved state, then ``restore()``s it."""
        if not isinstance(record, dict) or record.get("format") != _SPILL_FORMAT:
            raise ValueError(f"not a spill file of accord's elastic State (format {_SPILL_FORMAT})")
        self._load_payload(record["state"])
        self._commit_count = int(record["commit"])
        self.restore()

    def _spill_payload(self, detached: bool) -> Any:
        """The saved state as one object to write; ``detached``: later saves must not change it
        (a background thread writes it)."""
        raise NotImplementedError(
            f"{type(self).__name__} cannot be written to an elastic spill file: "
            "it needs _spill_payload and _load_payload"
        )

    def _load_payload(self, payload: Any) -> None:
        """Makes ``payload`` (from ``_spill_payload``) the saved state; ``restore()`` follows."""
        raise NotImplementedError(f"{type(self).__name__} cannot load an elastic spill file")

    def _spill_save(self, record: Any, path: str) -> None:
        """Writes ``record`` to a new file at ``path`` (pickle; frameworks stream their tensors)."""
        with open(path, "wb") as f:
            pickle.dump(record, f, protocol=pickle.HIGHEST_PROTOCOL)

    def _spill_load(self, path: str) -> Any:
        with open(path, "rb") as f:
            return pickle.load(f)


class ObjectState(State):
    """State of plain picklable objects, given as keyword arguments and kept as attributes.

    Args:
        bcast_object: broadcasts a picklable object from rank 0 to every rank.
        get_rank: returns this process's rank.
        kwargs: the objects; ``state.<name>`` reads and writes each.
    """

    def __init__(self, bcast_object: Callable[[Any], Any], get_rank: Callable[[], int], **kwargs: Any):
        self._saved_state: Dict[str, Any] = kwargs
        self._set_attrs()
        super().__init__(bcast_object=bcast_object, get_rank=get_rank)

    def save(self) -> None:
        self._saved_state = {name: getattr(self, name) for name in self._saved_state}

    def restore(self) -> None:
        self._set_attrs()

    def sync(self) -> None:
        if self._saved_state:
            self._saved_state = self._bcast_object(self._saved_state)
            self._set_attrs()

    def _set_attrs(self) -> None:
        for name, value in self._saved_state.items():
            setattr(self, name, value)

    def _spill_payload(self, detached: bool) -> Any:
        objects = copy.deepcopy(self._saved_state) if detached else dict(self._saved_state)
        return {"objects": objects}

    def _load_payload(self, payload: Any) -> None:
        # Objects the file lacks (added to the script since) keep their values.
        self._saved_state = {**self._saved_state, **payload["objects"]}


def run_fn(func: Callable[..., Any], reset: Callable[[], None]) -> Callable[..., Any]:
    """Wraps ``func(state, ...)`` so that it starts again after a reset.

    Each attempt first syncs the state from rank 0 (unless the hosts were
    only removed: the ranks left hold the same commit), then calls ``func``.
    ``HostsUpdatedInterrupt`` resets (``reset()``, then ``state.on_reset()``)
    and starts again from the state as it is. ``HorovodInternalError`` (a
    collective failed) ends the call: a failed rank cannot be replaced inside
    this job (docs/elastic.md).

    In accordrun's elastic mode (``ACCORD_ELASTIC_DRIVER`` set) a reset
    instead ends the process, and the driver starts a new generation from the
    last commit (``_run_in_generation``).
    """

    @functools.wraps(func)
    def wrapper(state: State, *args: Any, **kwargs: Any) -> Any:
        config = ElasticConfig.from_env()
        if config is not None:
            return _run_in_generation(config, func, state, args, kwargs)
        skip_sync = False
        while True:
            if not skip_sync:
                state.sync()
            try:
                return func(state, *args, **kwargs)
            except HorovodInternalError:
                raise
            except HostsUpdatedInterrupt as interrupt:
                skip_sync = interrupt.skip_sync
            reset()
            state.on_reset()

    return wrapper


class _Generation:
    """This process's part in its generation of an elastic job: the driver connection and spill writer.

    A generation's ranks are processes of their own, so there is one per
    process, made when a decorated function is first called (``of_process``).
    Belongs to the training thread.
    """

    _current: Optional["_Generation"] = None

    def __init__(self, config: ElasticConfig, rank: int):
        self.config = config
        self.rank = rank
        host = config.host_of(rank)
        self.connection = DriverConnection.connect(config.driver, rank, host, config.heartbeat_seconds)
        self.spill: Optional[SpillWriter] = None
        if config.spill_dir and config.is_host_writer(rank):
            self.spill = SpillWriter(
                os.path.join(config.spill_dir, host),
                config.generation,
                config.spill_async,
                self.connection.commit,
            )
        self.started = False

    @classmethod
    def of_process(cls, config: ElasticConfig, rank: int) -> "_Generation":
        if cls._current is None:
            cls._current = cls(config, rank)
        return cls._current

    def start(self, state: State) -> None:
        """Brings ``state`` to where the job left off, before the function first runs.

        1. Rank 0 loads the spill file named by ACCORD_ELASTIC_RESTORE (when
           set): the commit becomes its saved and its current state.
        2. Every rank syncs the state, and the commit count, from rank 0.
        3. After a reset (generation > 0), ``state.on_reset()``: the state
           adapts to the new ranks (ElasticSampler re-partitions) and the
           reset callbacks run.
        4. News of hosts starts reaching the state (what came since the
           connection opened included), and ``ready`` tells the driver how
           long steps 1 and 2 took.
        """
        began = time.monotonic()
        if self.rank == 0 and self.config.restore_path:
            state._load_spill_record(state._spill_load(self.config.restore_path))
        restored = time.monotonic()
        self._sync(state)
        synced = time.monotonic()
        if self.config.generation > 0:
            state.on_reset()
        self.connection.add_state(state)
        self.started = True
        self.connection.ready(restored - began, synced - restored)

    def resume(self, state: State) -> None:
        """Prepares ``state`` for a later call of a decorated function in this process: a sync."""
        self._sync(state)
        self.connection.add_state(state)

    @staticmethod
    def _sync(state: State) -> None:
        state.sync()
        state._commit_count = state._bcast_object(state._commit_count)

    def finish_writes(self) -> None:
        """Waits for a spill file still being written (its ``commit`` line goes out first)."""
        if self.spill is None:
            return
        try:
            self.spill.wait()
        except Exception as error:  # the commit before stays the one to restore
            sys.stderr.write(f"accord elastic: rank {self.rank}: writing a spill file failed: {error}\n")


def _run_in_generation(
    config: ElasticConfig,
    func: Callable[..., Any],
    state: State,
    args: Tuple[Any, ...],
    kwargs: Dict[str, Any],
) -> Any:
    """Runs ``func(state, *args, **kwargs)`` once in this generation, reporting to the driver.

    ``HostsUpdatedInterrupt`` and ``HorovodInternalError`` end the process
    with status 75 after a ``reset`` line: the driver starts the next
    generation from the last commit. Any other exception is reported
    (``error``) and propagates. When ``func`` returns, ``done`` is reported
    and this host's spill directory deleted.
    """
    generation = _Generation.of_process(config, state._rank())
    connection = generation.connection
    try:
        if generation.started:
            generation.resume(state)
        else:
            generation.start(state)
        state._spill = generation.spill
        result = func(state, *args, **kwargs)
    except HostsUpdatedInterrupt:
        generation.finish_writes()
        connection.reset_hosts()
        _end_process(RESET_EXIT_STATUS, peers_healthy=True)
    except HorovodInternalError as error:
        generation.finish_writes()
        connection.reset_failure(f"{type(error).__name__}: {error}")
        _end_process(RESET_EXIT_STATUS, peers_healthy=False)
    except Exception as error:
        connection.error(f"{type(error).__name__}: {error}")
        raise
    finally:
        state._spill = None
    generation.finish_writes()
    connection.done()
    if generation.spill is not None:
        generation.spill.remove_directory()
    return result


def _end_process(status: int, peers_healthy: bool) -> None:
    """Ends this process with ``status``; never returns.

    The streams are flushed, accord is shut down and Python's exit handlers
    run. Then, when every rank is known to be ending here too
    (``peers_healthy``: the hosts changed), the C library's ``exit`` runs the
    C exit handlers, MPI_Finalize among them, so mpirun sees the ranks end
    cleanly. After a failure a peer may be dead or frozen and never reach
    MPI_Finalize, which waits for every rank, so the process ends at once
    (``os._exit``). Either way the interpreter is not finalized, so no more
    of the caller's code runs (a ``finally``, whatever follows the training
    function): the process ends where the generation did.
    """
    _flush_streams()
    try:
        shutdown()
    except Exception as error:  # the process ends all the same
        sys.stderr.write(f"accord elastic: shutting accord down before the exit failed: {error}\n")
    atexit._run_exitfuncs()
    _flush_streams()
    try:
        if peers_healthy:
            # PyDLL keeps the GIL: no other Python thread runs while C exits.
            ctypes.PyDLL(None).exit(status)
    finally:
        os._exit(status)


def _flush_streams() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass


__all__ = ["RESET_EXIT_STATUS", "ObjectState", "State", "run_fn"]
