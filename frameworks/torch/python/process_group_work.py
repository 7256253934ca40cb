"""The Work of the ``torch.distributed`` backend (process_group.py) and the
threads that complete its futures.

Every operation of an accord process group is an ``Op``: how to finish it
(wait on accord's handles, copy results back) and its future. A plain
``Work.wait()`` finishes the operation in the waiting thread. A group's
``Completer`` thread waits on the operations whose future something needs
completed without waiting (DDP's ``get_future()``, ``is_completed()``, a
timed wait), and callback threads set their results: a future's callbacks run
where it is completed, and one may wait on a later collective (PowerSGD's
does). docs/decisions.md, "torch.distributed backend", says why.
"""

import atexit
import collections
import queue
import sys
import threading
import time
import weakref
from datetime import timedelta
from typing import Any, Callable, List, Optional, Tuple

import torch
import torch.distributed as dist

from accord import AccordError

__all__ = ["Completer", "Op", "Work", "backend_error"]


def backend_error(error: BaseException) -> BaseException:
    """torch's distributed error with accord's message; a request refused
    up front (bad arguments) keeps its own type."""
    if isinstance(error, (dist.DistBackendError, ValueError, TypeError, NotImplementedError)):
        return error
    if isinstance(error, (AccordError, RuntimeError, TimeoutError)):
        return dist.DistBackendError(str(error))
    return error


# Every live completer, for the exit handler below.
_completers: "weakref.WeakSet[Completer]" = weakref.WeakSet()


def _stop_completers() -> None:
    """At interpreter exit: lets each group's threads finish what is done
    (briefly), so none is inside torch's future code while Python
    finalises."""
    deadline = time.monotonic() + 2.0
    for completer in list(_completers):
        completer.stop(max(0.0, deadline - time.monotonic()))


atexit.register(_stop_completers)


class Completer:
    """Completes a group's futures: one daemon thread waits on accord's
    handles in submission order (its waits release the GIL) and hands each
    future's result, or its exception, to a callback thread that sets it.

    Setting a result runs the future's ``then`` callbacks in the setting
    thread, and a callback may wait on a later collective of the same group
    (PowerSGD's hook waits on its P allreduce inside the callback of the
    uncompressed allreduce). So the waiting thread never runs callbacks, and
    a result goes to an idle callback thread, or to a new one when every
    callback thread is busy (blocked in a callback).

    An operation reaches the waiting thread only when something needs its
    future completed without waiting itself: ``get_future()`` (DDP),
    ``is_completed()``, a timed ``wait()``, a later operation that reaches
    it, or more than ``MAX_HELD`` operations held back. A plain ``wait()``
    on an operation still held finishes it in the waiting thread
    (``Work.wait``), so a synchronous collective wakes no thread at all."""

    MAX_HELD = 32

    def __init__(self, name: str):
        self._name = name
        self._queue: "queue.SimpleQueue[Optional[Tuple[Callable[[], Any], torch.futures.Future]]]" = (
            queue.SimpleQueue()
        )
        # (future, result, error) for the callback threads; None stops one.
        self._ready: "queue.SimpleQueue[Optional[Tuple[Any, Any, Optional[BaseException]]]]" = (
            queue.SimpleQueue()
        )
        self._lock = threading.Lock()
        self._idle = 0  # callback threads waiting for a result that is not yet reserved
        self._callback_threads = 0
        # Operations submitted and not yet handed to the waiting thread, in
        # submission order (with some a waiter has already taken).
        self._held: "collections.deque[Op]" = collections.deque()
        self._thread = threading.Thread(target=self._run, name=f"accord-pg-{name}", daemon=True)
        self._thread.start()
        _completers.add(self)

    def _dispatch(self, op: "Op", result: Any, error: Optional[BaseException]) -> None:
        with self._lock:
            if self._idle > 0:
                self._idle -= 1
            else:
                self._callback_threads += 1
                threading.Thread(
                    target=self._callbacks,
                    name=f"accord-pg-{self._name}-callbacks-{self._callback_threads}",
                    daemon=True,
                ).start()
        self._ready.put((op, result, error))

    def _callbacks(self) -> None:
        while True:
            item = self._ready.get()
            if item is None:
                return
            op, result, error = item
            try:
                op.complete(result, error)
            except BaseException as failure:  # noqa: BLE001 -- the thread must keep serving
                sys.stderr.write(f"accord: completing a {self._name} group's future failed: {failure!r}\n")
            del op, result, error, item
            with self._lock:
                self._idle += 1

    def submit(self, finish: Callable[[], Any], devices: List[torch.device]) -> "Op":
        # A future that holds CUDA tensors records events on the completing
        # thread's streams, which its waiters' streams then wait on.
        future: torch.futures.Future = (
            torch.futures.Future(devices=devices) if devices else torch.futures.Future()
        )
        op = Op(finish, future, self)
        with self._lock:
            held = self._held
            while held and held[0].state != Op.HELD:
                held.popleft()  # taken by a waiter
            held.append(op)
            while len(held) > self.MAX_HELD:
                self._hand_over(held.popleft())
        return op

    def _hand_over(self, op: "Op") -> None:
        """Gives a held operation to the waiting thread; lock held."""
        if op.state == Op.HELD:
            op.state = Op.QUEUED
            self._queue.put(op)

    def release(self, op: "Op") -> None:
        """Makes sure the waiting thread completes ``op``, and every
        operation held before it."""
        with self._lock:
            if op.state != Op.HELD:
                return  # queued already, or a waiter finishes it
            held = self._held
            while held:
                first = held.popleft()
                self._hand_over(first)
                if first is op:
                    return

    def stop(self, join_seconds: float = 0.0) -> None:
        """Ends the threads once the operations before this call are done;
        waits up to ``join_seconds`` for the waiting thread to end."""
        with self._lock:
            while self._held:
                self._hand_over(self._held.popleft())
        self._queue.put(None)
        if join_seconds > 0 and self._thread is not threading.current_thread():
            self._thread.join(join_seconds)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                with self._lock:
                    threads = self._callback_threads
                for _ in range(threads):
                    self._ready.put(None)
                return
            try:
                result = item.finish()
            except BaseException as error:  # noqa: BLE001 -- handed to the waiter
                self._dispatch(item, None, backend_error(error))
            else:
                self._dispatch(item, result, None)
            del item


class Op:
    """One operation of a group: how to finish it, its future, and who
    finishes it: nobody yet (held), the completer's waiting thread (queued),
    or a thread that waits on it (taken), which then needs no hand-off."""

    HELD, QUEUED, TAKEN = 0, 1, 2
    __slots__ = ("finish", "future", "state", "ok", "_completer")

    def __init__(self, finish: Callable[[], Any], future: torch.futures.Future, completer: Completer):
        self.finish = finish
        self.future = future
        self.state = Op.HELD
        self.ok: Optional[bool] = None  # set on completion
        self._completer = completer

    def take(self) -> bool:
        """True if this thread is now to finish the operation (it was held)."""
        with self._completer._lock:
            if self.state != Op.HELD:
                return False
            self.state = Op.TAKEN
            return True

    def release(self) -> None:
        """Makes sure the operation's future gets completed without this
        thread (the completer's waiting thread does it if nobody has)."""
        self._completer.release(self)

    def settle(self) -> bool:
        """Waits for the operation (finishing it here if it is held); True if
        it succeeded."""
        if self.take():
            self.complete_here()
        else:
            self.release()
        future = self.future
        if future is not None:
            try:
                future.wait()
            except Exception:  # noqa: BLE001 -- a failed operation: its waiter reports it
                pass
        return bool(self.ok)

    def complete_here(self) -> None:
        """Finishes the operation in this thread and completes its future
        (its callbacks run here)."""
        try:
            result = self.finish()
        except BaseException as error:  # noqa: BLE001 -- stored in the future
            self.complete(None, backend_error(error))
        else:
            self.complete(result, None)

    def complete(self, result: Any, error: Optional[BaseException]) -> None:
        """Records the outcome and completes the future. The operation then
        drops the future and how to finish: a group remembers recent
        operations (_CycleNames), and must not keep their tensors alive."""
        future = self.future
        self.ok = error is None
        self.future = None
        self.finish = None
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)


def _value_or_raise(future: torch.futures.Future) -> Any:
    return future.value()  # raises what the completer's set_exception stored


class Work(dist.Work):
    """The Work of one operation, over the future the completer completes.

    Not torch's ``_create_work_from_future``: its ``wait()`` returns True
    when the future holds an error, and a Python future's
    ``set_exception`` is only a value to C++, so a failed collective would
    pass as done with its tensors untouched. Here ``wait()`` raises the
    operation's error (DistBackendError with accord's message), and
    ``get_future()`` is a future that C++ waiters (DDP's communication
    hooks) see failed too. A ``wait()`` without a timeout on an operation
    the completer has not reached finishes it in the waiting thread.
    """

    def __init__(self, op: Op):
        super().__init__()
        self._op = op
        self._done = op.future
        self._future: Optional[torch.futures.Future] = None

    def wait(self, timeout: Any = None) -> bool:
        seconds = timeout.total_seconds() if isinstance(timeout, timedelta) else 0.0
        if seconds <= 0 and not self._done.done() and self._op.take():
            self._op.complete_here()
        elif seconds > 0 and not self._done.done():
            self._op.release()
            # torch's futures have no timed wait: poll, gently, to the deadline.
            deadline = time.monotonic() + seconds
            pause = 1e-4
            while not self._done.done():
                if time.monotonic() >= deadline:
                    raise dist.DistBackendError(
                        f"accord: Work.wait timed out after {seconds:g} s; the operation is still pending "
                        "(accord's stall inspector names the ranks that have not submitted it)"
                    )
                time.sleep(pause)
                pause = min(pause * 2, 0.01)
        self._done.wait()
        return True

    def is_completed(self) -> bool:
        if not self._done.done():
            self._op.release()  # someone polls: it must complete without a wait
        return self._done.done()

    def is_success(self) -> bool:
        return self._done.done() and self.exception() is None

    def exception(self) -> Optional[BaseException]:
        if not self.is_completed():
            return None
        try:
            self._done.value()
        except Exception as error:  # noqa: BLE001 -- reported, not raised
            return error
        return None

    def result(self) -> Any:
        if self._op.take():
            self._op.complete_here()
        return self._done.wait()

    def get_future(self) -> torch.futures.Future:
        self._op.release()
        if self._future is None:
            self._future = self._done.then(_value_or_raise)
        return self._future
