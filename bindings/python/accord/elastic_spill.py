"""SpillWriter: a host's commits of an elastic State, written to files for the next generation.

In elastic mode every rank process ends with its generation, so what a
commit saved in memory must also reach a file that the next generation's
rank 0 can load. The first rank of each host writes each commit to
``<spill dir>/<host>/state-g<generation>-c<n>.pt``:

1. The record is written (streamed by the state's own save function) to
   ``<name>.tmp`` in that directory.
2. ``os.replace`` puts it at ``<name>``, so a reader never sees half a file.
3. The host's other ``state-*`` files (older commits, a crashed write's
   ``.tmp``) are deleted: one commit's file per host at a time.
4. The commit is reported (``commit <rank> <n> <path>`` to the driver).

Synchronous writes finish before ``State.commit()`` returns. Asynchronous
ones run on a background thread while training goes on; the next commit,
or ``wait()``, first waits for the write before it, so at most one is in
flight and the driver only hears of a commit once its file is in place.

Threads: ``write``, ``wait`` and ``remove_directory`` belong to the training
thread. The background thread (asynchronous mode) records the first error
of a write; every later ``write`` or ``wait`` raises it.
"""

import glob
import os
import shutil
import threading
from typing import Any, Callable, Optional, Tuple

# save(record, path): writes the record to a new file at path.
SaveFunction = Callable[[Any, str], None]


class SpillWriter:
    """Writes commits to ``<directory>/state-g<generation>-c<n>.pt``, one file kept at a time.

    Args:
        directory: this host's spill directory (created at the first write).
        generation: this generation's number, part of every file name.
        asynchronous: write on a background thread instead of in ``write``.
        on_written: called with (n, path) once commit ``n``'s file is in place
            (from the background thread in asynchronous mode).
    """

    def __init__(
        self,
        directory: str,
        generation: int,
        asynchronous: bool,
        on_written: Callable[[int, str], None],
    ):
        self.directory = directory
        self.generation = generation
        self.asynchronous = asynchronous
        self._on_written = on_written
        self._made_directory = False
        self._cond = threading.Condition()
        self._pending: Optional[Tuple[int, Any, SaveFunction]] = None  # guarded by _cond
        self._writing = False  # guarded by _cond
        self._error: Optional[BaseException] = None  # guarded by _cond
        self._thread: Optional[threading.Thread] = None

    def path_for(self, n: int) -> str:
        return os.path.join(self.directory, f"state-g{self.generation}-c{n}.pt")

    def write(self, n: int, record: Any, save: SaveFunction) -> None:
        """Writes commit ``n``'s ``record`` with ``save``; in asynchronous mode, starts writing it.

        In asynchronous mode ``record`` is written after this returns, so it
        must not change afterwards. Raises the error of an earlier
        asynchronous write, or (synchronous mode) this write's ``OSError``.
        """
        self.wait()
        if not self.asynchronous:
            self._write(n, record, save)
            return
        with self._cond:
            self._pending = (n, record, save)
            self._cond.notify_all()
        if self._thread is None:
            self._thread = threading.Thread(target=self._serve, name="accord-elastic-spill", daemon=True)
            self._thread.start()

    def wait(self) -> None:
        """Waits until no write is in flight; raises the first error an asynchronous write met."""
        with self._cond:
            self._cond.wait_for(lambda: self._pending is None and not self._writing)
            if self._error is not None:
                raise self._error

    def remove_directory(self) -> None:
        """Deletes this host's spill directory and everything in it (the job is done)."""
        shutil.rmtree(self.directory, ignore_errors=True)

    def _write(self, n: int, record: Any, save: SaveFunction) -> None:
        if not self._made_directory:
            os.makedirs(self.directory, exist_ok=True)
            self._made_directory = True
        path = self.path_for(n)
        temporary = path + ".tmp"
        try:
            save(record, temporary)
            os.replace(temporary, path)
        except BaseException:
            _remove_quietly(temporary)
            raise
        for other in glob.glob(os.path.join(glob.escape(self.directory), "state-*")):
            if other != path:
                _remove_quietly(other)
        self._on_written(n, path)

    def _serve(self) -> None:
        """The background thread: writes each pending commit in turn."""
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._pending is not None)
                n, record, save = self._pending
                self._pending = None
                self._writing = True
            try:
                self._write(n, record, save)
            except BaseException as error:  # handed to the training thread
                with self._cond:
                    if self._error is None:
                        self._error = error
            finally:
                del record
                with self._cond:
                    self._writing = False
                    self._cond.notify_all()


def _remove_quietly(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass


__all__ = ["SpillWriter"]
