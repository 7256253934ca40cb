"""accord as a ``torch.distributed`` backend: ``dist.init_process_group("accord")``.

Importing ``accord.torch`` registers the backend ``"accord"`` for CPU and CUDA
tensors. Its process group is a Python subclass of ``dist.ProcessGroup`` whose
collectives are accord.torch's asynchronous operations on an accord process
set (the global set for the default group). Every operation returns a
``Work`` made from a ``torch.futures.Future``; a completion thread per group
waits on accord's handles in submission order and completes the futures, so
``wait()``, ``is_completed()`` and ``get_future()`` (DDP's communication hooks)
all work. docs/torch_distributed.md describes what is supported and how it
differs from gloo and NCCL; docs/decisions.md says why it is built this way.

Three things are attached to torch besides the registration:

* ``env://`` under a bare MPI launch: when ``MASTER_ADDR`` is not set and the
  process was started by ``mpirun``/``srun`` (accordrun sets it), torch's
  ``env://`` rendezvous takes rank and world size from accord and a
  ``TCPStore`` on rank 0 whose address accord broadcasts.
* ``new_group``: torch creates a subgroup's backend on its members only, while
  accord's process sets are registered by every rank. A wrapper around
  torch's group creation (which every rank enters) registers the set on every
  rank first when the group's backend is accord.
* A torch without Python backends (before 2.1) gets a backend that refuses
  with one line naming the version needed.
"""

import atexit
import collections
import os
import queue
import socket
import sys
import threading
import time
import weakref
from datetime import timedelta
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.distributed as dist

import accord
from accord import AccordError, ProcessSet, add_process_set, global_process_set

from . import mpi_ops as _ops

__all__ = ["BACKEND_NAME", "AccordProcessGroup", "MIN_TORCH"]

BACKEND_NAME = "accord"
MIN_TORCH = (2, 1)


def _torch_version() -> Tuple[int, int]:
    parts = torch.__version__.split(".")
    return int(parts[0]), int("".join(c for c in parts[1] if c.isdigit()) or 0)


def _refusal() -> str:
    return (
        f"accord: init_process_group('{BACKEND_NAME}') needs torch {MIN_TORCH[0]}.{MIN_TORCH[1]} or newer "
        f"(Python backends); this is torch {torch.__version__}. accord.torch's own API "
        "(hvd.DistributedOptimizer, hvd.allreduce) works with this torch"
    )


# ---------------------------------------------------------------- reduce ops

_RedOpType = dist.ReduceOp.RedOpType
_ACCORD_OPS = {
    _RedOpType.SUM: _ops.Sum,
    _RedOpType.AVG: _ops.Average,
    _RedOpType.MIN: _ops.Min,
    _RedOpType.MAX: _ops.Max,
    _RedOpType.PRODUCT: _ops.Product,
    _RedOpType.PREMUL_SUM: _ops.Sum,
}
_BITWISE = {
    _RedOpType.BAND: torch.bitwise_and,
    _RedOpType.BOR: torch.bitwise_or,
    _RedOpType.BXOR: torch.bitwise_xor,
}


def _op_kind(reduce_op: Any) -> Any:
    """The RedOpType of an options' reduceOp (a ReduceOp, or a RedOpType)."""
    return getattr(reduce_op, "op", reduce_op)


def _premul_factor(reduce_op: Any) -> float:
    factor = getattr(reduce_op, "factor", None)
    if factor is None:
        raise ValueError("accord: PREMUL_SUM without a factor")
    if isinstance(factor, torch.Tensor):
        if factor.numel() != 1:
            raise ValueError(
                f"accord: PREMUL_SUM takes a scalar factor, got a tensor of shape {tuple(factor.shape)}"
            )
        factor = factor.item()
    return float(factor)


# ------------------------------------------------------------------- futures


def _backend_error(error: BaseException) -> BaseException:
    """torch's distributed error with accord's message; a request refused
    up front (bad arguments) keeps its own type."""
    if isinstance(error, (dist.DistBackendError, ValueError, TypeError, NotImplementedError)):
        return error
    if isinstance(error, (AccordError, RuntimeError, TimeoutError)):
        return dist.DistBackendError(str(error))
    return error


# Every live completer, for the exit handler below.
_completers: "weakref.WeakSet[_Completer]" = weakref.WeakSet()


def _stop_completers() -> None:
    """At interpreter exit: lets each group's threads finish what is done
    (briefly), so none is inside torch's future code while Python
    finalises."""
    deadline = time.monotonic() + 2.0
    for completer in list(_completers):
        completer.stop(max(0.0, deadline - time.monotonic()))


atexit.register(_stop_completers)


class _Completer:
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
    (``_Work.wait``), so a synchronous collective wakes no thread at all."""

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
        self._held: "collections.deque[_Op]" = collections.deque()
        self._thread = threading.Thread(target=self._run, name=f"accord-pg-{name}", daemon=True)
        self._thread.start()
        _completers.add(self)

    def _dispatch(self, op: "_Op", result: Any, error: Optional[BaseException]) -> None:
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

    def submit(self, finish: Callable[[], Any], devices: List[torch.device]) -> "_Op":
        # A future that holds CUDA tensors records events on the completing
        # thread's streams, which its waiters' streams then wait on.
        future: torch.futures.Future = (
            torch.futures.Future(devices=devices) if devices else torch.futures.Future()
        )
        op = _Op(finish, future, self)
        with self._lock:
            held = self._held
            while held and held[0].state != _Op.HELD:
                held.popleft()  # taken by a waiter
            held.append(op)
            while len(held) > self.MAX_HELD:
                self._hand_over(held.popleft())
        return op

    def _hand_over(self, op: "_Op") -> None:
        """Gives a held operation to the waiting thread; lock held."""
        if op.state == _Op.HELD:
            op.state = _Op.QUEUED
            self._queue.put(op)

    def release(self, op: "_Op") -> None:
        """Makes sure the waiting thread completes ``op``, and every
        operation held before it."""
        with self._lock:
            if op.state != _Op.HELD:
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
                self._dispatch(item, None, _backend_error(error))
            else:
                self._dispatch(item, result, None)
            del item


class _Op:
    """One operation of a group: how to finish it, its future, and who
    finishes it: nobody yet (held), the completer's waiting thread (queued),
    or a thread that waits on it (taken), which then needs no hand-off."""

    HELD, QUEUED, TAKEN = 0, 1, 2
    __slots__ = ("finish", "future", "state", "ok", "_completer")

    def __init__(self, finish: Callable[[], Any], future: torch.futures.Future, completer: _Completer):
        self.finish = finish
        self.future = future
        self.state = _Op.HELD
        self.ok: Optional[bool] = None  # set on completion
        self._completer = completer

    def take(self) -> bool:
        """True if this thread is now to finish the operation (it was held)."""
        with self._completer._lock:
            if self.state != _Op.HELD:
                return False
            self.state = _Op.TAKEN
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
            self.complete(None, _backend_error(error))
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


class _Work(dist.Work):
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

    def __init__(self, op: _Op):
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


# ---------------------------------------------------------------- the group


def _flat(tensor: torch.Tensor) -> torch.Tensor:
    """A contiguous 1-D view (or copy) of ``tensor``."""
    return tensor.contiguous().view(-1) if not tensor.is_contiguous() else tensor.view(-1)


def _copy_pieces(source: torch.Tensor, targets: Sequence[torch.Tensor], what: str) -> None:
    """Copies consecutive pieces of the 1-D ``source`` into ``targets``."""
    total = sum(t.numel() for t in targets)
    if source.numel() != total:
        raise ValueError(
            f"accord: {what}: the outputs hold {total} elements in all, but {source.numel()} were received"
        )
    offset = 0
    for target in targets:
        n = target.numel()
        target.copy_(source[offset : offset + n].view(target.shape))
        offset += n


def _copy_back(tensors: Sequence[torch.Tensor], wire: Sequence[torch.Tensor], needed: Sequence[bool]) -> None:
    """Copies results from contiguous stand-ins (complex ones viewed as
    real) back into the caller's tensors where they were copies."""
    for t, w, copy in zip(tensors, wire, needed):
        if copy:
            t.copy_(torch.view_as_complex(w) if t.is_complex() else w)


def _tensors_in(items: Any) -> List[torch.Tensor]:
    """The tensors in nested lists and tuples of them."""
    if isinstance(items, torch.Tensor):
        return [items]
    found: List[torch.Tensor] = []
    if isinstance(items, (list, tuple)):
        for item in items:
            found.extend(_tensors_in(item))
    return found


def _one(tensors: Sequence[torch.Tensor], what: str) -> torch.Tensor:
    if len(tensors) != 1:
        raise ValueError(f"accord: {what} takes one tensor per process, got {len(tensors)}")
    return tensors[0]


class _CycleNames:
    """Names for a group's allreduces that repeat, so that accord's response
    cache answers them (docs/decisions.md, "torch.distributed backend").

    torch gives its collectives no names, and an unnamed accord operation is
    negotiated in full every time. A training loop repeats its allreduces
    with a period (DDP: one per bucket per step). Every ``WINDOW``
    allreduces, the group looks at the ``WINDOW`` before the last
    ``WINDOW`` (long done, in the same order on every rank): if they all
    succeeded and their signatures (dtype, shape, op, scale) repeat with a
    period P of at most ``MAX_PERIOD``, the next allreduces are named
    ``<prefix>.<n mod K>``, K the smallest multiple of P of at least
    ``MIN_SLOTS``; otherwise they stay unnamed. The choice depends only on
    what every rank submitted and how it ended, which is the same on every
    rank, so the names agree; a rank whose request under a name differs
    still meets the others under that name, and accord reports the
    mismatch. A name is reused only once the operation that last had it is
    complete."""

    WINDOW = 32
    MAX_PERIOD = 16
    MIN_SLOTS = 8

    def __init__(self, prefix: str):
        self._prefix = prefix
        self._count = 0
        self._slots = 0  # K; 0: unnamed
        self._history: "collections.deque[Tuple[Any, Optional[_Op]]]" = collections.deque(
            maxlen=2 * self.WINDOW
        )
        self._last_user: Dict[str, _Op] = {}
        self._pending: Optional[Tuple[Any, Optional[str]]] = None

    @property
    def slots(self) -> int:
        return self._slots

    def next(self, signature: Any) -> Optional[str]:
        """The name of the next allreduce (None: unnamed); ``submitted`` follows."""
        if self._count and self._count % self.WINDOW == 0:
            self._slots = self._choose()
        name = f"{self._prefix}.{self._count % self._slots}" if self._slots else None
        self._count += 1
        if name is not None:
            previous = self._last_user.get(name)
            if previous is not None:
                previous.settle()
        self._pending = (signature, name)
        return name

    def submitted(self, op: Optional[_Op]) -> None:
        """Records the operation of the allreduce just named (None: refused)."""
        if self._pending is None:
            return
        signature, name = self._pending
        self._pending = None
        self._history.append((signature, op))
        if name is not None and op is not None:
            self._last_user[name] = op

    def _choose(self) -> int:
        if len(self._history) < 2 * self.WINDOW:
            return 0
        window = list(self._history)[: self.WINDOW]
        for _, op in window:
            if op is None or not op.settle():
                return 0
        signatures = [signature for signature, _ in window]
        for period in range(1, self.MAX_PERIOD + 1):
            if all(signatures[i] == signatures[i + period] for i in range(self.WINDOW - period)):
                return period * -(-self.MIN_SLOTS // period)
        return 0


class AccordProcessGroup(dist.ProcessGroup):
    """A torch.distributed process group whose collectives run on an accord process set.

    Made by ``init_process_group("accord")`` and ``new_group(..., backend="accord")``,
    not by hand.
    """

    def __init__(self, rank: int, size: int, process_set: ProcessSet, timeout: timedelta, name: str):
        super().__init__(rank, size)
        self._rank = rank
        self._size = size
        self._set = process_set
        self._global_ranks: List[int] = process_set.ranks
        self._timeout = timeout
        self._group_name = name
        self._group_desc = ""
        self._completer = _Completer(name)
        self._names = _CycleNames(f"torch.{name}.allreduce")
        self._named_op = False
        self._submit_lock = threading.RLock()

    # ------------------------------------------------------------- basics

    def getBackendName(self) -> str:  # noqa: N802 -- torch's name
        return BACKEND_NAME

    # torch keeps a group's name and description on the group's per-device
    # backends, which a Python group (the group itself, with none registered)
    # lacks: ProcessGroup::getGroupName() would fail with "ProcessGroup name
    # not set", and DeviceMesh, functional collectives and DTensor look groups
    # up by name. So the group keeps them (torch sets them after creation).

    def getGroupName(self) -> str:  # noqa: N802 -- torch's name
        return self._group_name

    def setGroupName(self, name: str) -> None:  # noqa: N802 -- torch's name
        self._group_name = name

    def getGroupDesc(self) -> str:  # noqa: N802 -- torch's name
        return self._group_desc

    def setGroupDesc(self, desc: str) -> None:  # noqa: N802 -- torch's name
        self._group_desc = desc

    def size(self) -> int:
        return self._size

    def rank(self) -> int:
        return self._rank

    def __repr__(self) -> str:
        return f"AccordProcessGroup(rank={self._rank}, size={self._size}, global ranks={self._global_ranks})"

    @property
    def process_set(self) -> ProcessSet:
        """The accord process set the group's collectives run on."""
        return self._set

    def _root(self, group_rank: int, what: str) -> int:
        if not 0 <= group_rank < self._size:
            raise ValueError(
                f"accord: {what}: root rank {group_rank} is not a rank of the group (size {self._size})"
            )
        return self._global_ranks[group_rank]

    def _enqueued(self, start: Callable[[], Callable[[], Any]], *tensor_lists: Any) -> Any:
        """Runs ``start`` (which enqueues and returns how to finish) and
        returns a Work for its completion; an enqueue refused because accord
        failed or stopped becomes torch's distributed error."""
        devices = sorted(
            {t.device for t in _tensors_in(tensor_lists) if t.device.type == "cuda"},
            key=lambda d: d.index or 0,
        )
        # One submission at a time per group: the allreduce names follow the
        # order in which operations reach accord.
        with self._submit_lock:
            self._named_op = False
            try:
                finish = start()
            except AccordError as error:
                if isinstance(error, ValueError):
                    raise
                raise dist.DistBackendError(str(error)) from None
            op = self._completer.submit(finish, devices)
            if self._named_op:
                self._named_op = False
                self._names.submitted(op)
        return _Work(op)

    # ---------------------------------------------------------- allreduce

    def _allreduce(self, tensors: List[torch.Tensor], reduce_op: Any, what: str) -> Callable[[], Any]:
        """Enqueues an allreduce of ``tensors`` in place; returns how to finish."""
        kind = _op_kind(reduce_op)
        if kind in _BITWISE:
            return self._bitwise_allreduce(tensors, _BITWISE[kind], what)
        if kind not in _ACCORD_OPS:
            raise ValueError(f"accord: {what}: unsupported reduce op {kind}")
        op = _ACCORD_OPS[kind]
        prescale = _premul_factor(reduce_op) if kind == _RedOpType.PREMUL_SUM else 1.0
        wire: List[torch.Tensor] = []
        copy_back: List[bool] = []
        for t in tensors:
            if t.is_complex() and kind not in (_RedOpType.SUM, _RedOpType.AVG, _RedOpType.PREMUL_SUM):
                raise ValueError(f"accord: {what}: {kind} is not defined for complex tensors ({t.dtype})")
            w = t if t.is_contiguous() else t.contiguous()
            copy_back.append(w is not t)
            wire.append(torch.view_as_real(w) if w.is_complex() else w)
        signature = (op, prescale, tuple((w.dtype, tuple(w.shape), w.device.type) for w in wire))
        name = self._names.next(signature)
        try:
            if len(wire) == 1:
                handle = _ops.allreduce_async_(
                    wire[0], name=name, op=op, prescale_factor=prescale, process_set=self._set
                )
            else:
                handle = _ops.grouped_allreduce_async_(
                    wire, name=name, op=op, prescale_factor=prescale, process_set=self._set
                )
        except BaseException:
            self._names.submitted(None)
            raise
        self._named_op = True

        def finish() -> List[torch.Tensor]:
            _ops.synchronize(handle)
            _copy_back(tensors, wire, copy_back)
            return list(tensors)

        return finish

    def _bitwise_allreduce(
        self, tensors: List[torch.Tensor], combine: Callable, what: str
    ) -> Callable[[], Any]:
        for t in tensors:
            if t.is_floating_point() or t.is_complex():
                raise TypeError(
                    f"accord: {what}: bitwise reduce ops take integer or bool tensors, got {t.dtype}"
                )
        flats = [_flat(t).unsqueeze(0) for t in tensors]
        handle = _ops.grouped_allgather_async(flats, process_set=self._set)

        def finish() -> List[torch.Tensor]:
            gathered = _ops.synchronize(handle)
            for t, rows in zip(tensors, gathered):
                acc = rows[0].clone()
                for row in rows[1:]:
                    acc = combine(acc, row)
                t.copy_(acc.view(t.shape))
            return list(tensors)

        return finish

    def allreduce(self, tensors, opts=None):
        reduce_op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
        return self._enqueued(lambda: self._allreduce(list(tensors), reduce_op, "all_reduce"), tensors)

    def allreduce_coalesced(self, tensors, opts=None):
        reduce_op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
        return self._enqueued(
            lambda: self._allreduce(list(tensors), reduce_op, "all_reduce_coalesced"), tensors
        )

    def reduce(self, tensors, opts):
        tensor = _one(tensors, "reduce")
        root = self._root(opts.rootRank, "reduce")
        me = self._global_ranks[self._rank]
        kind = _op_kind(opts.reduceOp)

        def start() -> Callable[[], Any]:
            # Every rank reduces; only the root keeps the result (gloo's and
            # NCCL's reduce leave the other ranks' tensors undefined; accord
            # leaves them unchanged).
            target = tensor if me == root else tensor.clone()
            inner = self._allreduce([target], opts.reduceOp, f"reduce ({kind})")

            def finish() -> List[torch.Tensor]:
                inner()
                return [tensor]

            return finish

        return self._enqueued(start, tensors)

    # ---------------------------------------------------------- broadcast

    def broadcast(self, tensors, opts):
        root = self._root(opts.rootRank, "broadcast")

        def start() -> Callable[[], Any]:
            contiguous = [t if t.is_contiguous() else t.contiguous() for t in tensors]
            copy_back = [c is not t for c, t in zip(contiguous, tensors)]
            wire = [torch.view_as_real(c) if c.is_complex() else c for c in contiguous]
            handles = [_ops.broadcast_async_(w, root_rank=root, process_set=self._set) for w in wire]

            def finish() -> List[torch.Tensor]:
                for h in handles:
                    _ops.synchronize(h)
                _copy_back(tensors, wire, copy_back)
                return list(tensors)

            return finish

        return self._enqueued(start, tensors)

    # ---------------------------------------------------------- allgather

    def _gather_flat(self, inputs: Sequence[torch.Tensor]) -> Callable[[], List[torch.Tensor]]:
        """Enqueues an allgather of every input, flattened; returns how to get
        the 1-D concatenations (every rank's input, in group rank order)."""
        flats = [_flat(torch.view_as_real(t) if t.is_complex() else t) for t in inputs]
        if len(flats) == 1:
            handle = _ops.allgather_async(flats[0], process_set=self._set)
            return lambda: [_ops.synchronize(handle)]
        handle = _ops.grouped_allgather_async(flats, process_set=self._set)
        return lambda: list(_ops.synchronize(handle))

    @staticmethod
    def _as_wire(t: torch.Tensor) -> torch.Tensor:
        return torch.view_as_real(t) if t.is_complex() else t

    def allgather(self, output_lists, inputs, opts=None):
        def start() -> Callable[[], Any]:
            if len(output_lists) != len(inputs):
                raise ValueError(
                    f"accord: all_gather: {len(output_lists)} output lists for {len(inputs)} input tensors"
                )
            for outputs in output_lists:
                if len(outputs) != self._size:
                    raise ValueError(
                        f"accord: all_gather: the output list has {len(outputs)} tensors, "
                        f"the group {self._size} ranks"
                    )
            gathered = self._gather_flat(inputs)

            def finish() -> List[List[torch.Tensor]]:
                for outputs, flat in zip(output_lists, gathered()):
                    _copy_pieces(flat, [self._as_wire(o) for o in outputs], "all_gather")
                return [list(o) for o in output_lists]

            return finish

        return self._enqueued(start, output_lists, inputs)

    def allgather_coalesced(self, output_lists, inputs, opts=None):
        # torch's deprecated all_gather_coalesced: output_lists[r][i] is rank
        # r's inputs[i].
        def start() -> Callable[[], Any]:
            gathered = self._gather_flat([torch.cat([_flat(self._as_wire(t)) for t in inputs])])

            def finish() -> List[List[torch.Tensor]]:
                _copy_pieces(
                    gathered()[0],
                    [self._as_wire(o) for row in output_lists for o in row],
                    "all_gather_coalesced",
                )
                return [list(o) for o in output_lists]

            return finish

        return self._enqueued(start, output_lists, inputs)

    def _gather_into(self, outputs: Sequence[torch.Tensor], inputs: Sequence[torch.Tensor], what: str):
        def start() -> Callable[[], Any]:
            for o, i in zip(outputs, inputs):
                if o.numel() != i.numel() * self._size:
                    raise ValueError(
                        f"accord: {what}: the output has {o.numel()} elements, "
                        f"expected {self._size} x {i.numel()}"
                    )
            gathered = self._gather_flat(inputs)

            def finish() -> List[torch.Tensor]:
                for o, flat in zip(outputs, gathered()):
                    _copy_pieces(flat, [self._as_wire(o)], what)
                return list(outputs)

            return finish

        return self._enqueued(start, outputs, inputs)

    def all_gather_single(self, output, input, opts=None):  # noqa: A002 -- torch's names
        return self._gather_into([output], [input], "all_gather_into_tensor")

    def _allgather_base(self, output, input, opts=None):  # noqa: A002
        return self._gather_into([output], [input], "all_gather_into_tensor")

    def all_gather_single_coalesced(self, outputs, inputs, opts=None):
        return self._gather_into(list(outputs), list(inputs), "all_gather_into_tensor_coalesced")

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts=None):
        return self._gather_into(list(outputs), list(inputs), "all_gather_into_tensor_coalesced")

    def gather(self, output_lists, inputs, opts):
        root = self._root(opts.rootRank, "gather")
        me = self._global_ranks[self._rank]
        tensor = _one(inputs, "gather")

        def start() -> Callable[[], Any]:
            if me == root and (len(output_lists) != 1 or len(output_lists[0]) != self._size):
                raise ValueError(f"accord: gather: the root needs one output list of {self._size} tensors")
            gathered = self._gather_flat([tensor])

            def finish() -> List[List[torch.Tensor]]:
                flat = gathered()[0]
                if me == root:
                    _copy_pieces(flat, [self._as_wire(o) for o in output_lists[0]], "gather")
                return [list(o) for o in output_lists]

            return finish

        return self._enqueued(start, output_lists, inputs)

    # ------------------------------------------------------ reduce-scatter

    def _reduce_scatter(
        self, outputs: Sequence[torch.Tensor], inputs: Sequence[torch.Tensor], reduce_op: Any, what: str
    ) -> Callable[[], Any]:
        """Each ``inputs[i]`` holds the group's ``outputs[i]``-sized pieces in
        rank order; every rank gets the reduction of its own piece."""
        for o, i in zip(outputs, inputs):
            if i.numel() != o.numel() * self._size:
                raise ValueError(
                    f"accord: {what}: the input has {i.numel()} elements, expected {self._size} x {o.numel()}"
                )
        kind = _op_kind(reduce_op)
        if kind in (_RedOpType.SUM, _RedOpType.AVG, _RedOpType.PREMUL_SUM) and not any(
            o.is_complex() or o.dtype == torch.bool for o in outputs
        ):
            op = _ACCORD_OPS[kind]
            prescale = _premul_factor(reduce_op) if kind == _RedOpType.PREMUL_SUM else 1.0
            flats = [_flat(i) for i in inputs]
            if len(flats) == 1:
                handle = _ops.reducescatter_async(
                    flats[0], op=op, prescale_factor=prescale, process_set=self._set
                )
            else:
                handle = _ops.grouped_reducescatter_async(
                    flats, op=op, prescale_factor=prescale, process_set=self._set
                )

            def finish() -> List[torch.Tensor]:
                results = _ops.synchronize(handle)
                if len(flats) == 1:
                    results = [results]
                for o, r in zip(outputs, results):
                    _copy_pieces(r, [o], what)
                return list(outputs)

            return finish
        # MIN, MAX, PRODUCT and the bitwise ops: an allreduce of the whole
        # input, of which each rank keeps its piece.
        copies = [_flat(i).clone() for i in inputs]
        reduced = self._allreduce(copies, reduce_op, what)

        def finish_by_allreduce() -> List[torch.Tensor]:
            reduced()
            for o, c in zip(outputs, copies):
                n = o.numel()
                o.copy_(c[self._rank * n : (self._rank + 1) * n].view(o.shape))
            return list(outputs)

        return finish_by_allreduce

    def reduce_scatter(self, outputs, input_lists, opts=None):
        reduce_op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM

        def start() -> Callable[[], Any]:
            if len(outputs) != len(input_lists):
                raise ValueError(
                    f"accord: reduce_scatter: {len(outputs)} outputs for {len(input_lists)} input lists"
                )
            inputs = []
            for o, pieces in zip(outputs, input_lists):
                if len(pieces) != self._size:
                    raise ValueError(
                        f"accord: reduce_scatter: the input list has {len(pieces)} tensors, "
                        f"the group {self._size} ranks"
                    )
                for p in pieces:
                    if p.numel() != o.numel():
                        raise ValueError(
                            f"accord: reduce_scatter: every input must have the output's "
                            f"{o.numel()} elements, one has {p.numel()}"
                        )
                inputs.append(torch.cat([_flat(p) for p in pieces]))
            return self._reduce_scatter(outputs, inputs, reduce_op, "reduce_scatter")

        return self._enqueued(start, outputs, input_lists)

    def reduce_scatter_single(self, output, input, opts=None):  # noqa: A002
        reduce_op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
        return self._enqueued(
            lambda: self._reduce_scatter([output], [input], reduce_op, "reduce_scatter_tensor"), output, input
        )

    def _reduce_scatter_base(self, output, input, opts=None):  # noqa: A002
        return self.reduce_scatter_single(output, input, opts)

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts=None):
        reduce_op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
        return self._enqueued(
            lambda: self._reduce_scatter(
                list(outputs), list(inputs), reduce_op, "reduce_scatter_tensor_coalesced"
            ),
            outputs,
            inputs,
        )

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts=None):
        return self.reduce_scatter_single_coalesced(outputs, inputs, opts)

    # ------------------------------------------------------------ alltoall

    def _alltoall_rows(
        self, source: torch.Tensor, send_rows: List[int], outputs: Sequence[torch.Tensor], what: str
    ) -> Callable[[], Any]:
        """Sends ``send_rows[r]`` rows of the 2-D ``source`` to group rank r;
        the rows received, in rank order, are copied into ``outputs``."""
        handle = _ops.alltoall_async(source, splits=send_rows, process_set=self._set)

        def finish() -> List[torch.Tensor]:
            received, _ = _ops.synchronize(handle)
            _copy_pieces(received.reshape(-1), [self._as_wire(o) for o in outputs], what)
            return list(outputs)

        return finish

    def alltoall(self, outputs, inputs, opts=None):
        def start() -> Callable[[], Any]:
            if len(outputs) != self._size or len(inputs) != self._size:
                raise ValueError(
                    f"accord: all_to_all: {len(inputs)} inputs and {len(outputs)} outputs "
                    f"for a group of {self._size}"
                )
            wire = [_flat(self._as_wire(t)) for t in inputs]
            source = torch.cat(wire) if wire else torch.empty(0)
            return self._alltoall_rows(source, [w.numel() for w in wire], outputs, "all_to_all")

        return self._enqueued(start, outputs, inputs)

    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes, opts=None):  # noqa: A002
        def start() -> Callable[[], Any]:
            source = self._as_wire(input)
            source = source if source.is_contiguous() else source.contiguous()
            rows = source.shape[0] if source.dim() > 0 else 0
            if input_split_sizes:
                splits = [int(s) for s in input_split_sizes]
                if len(splits) != self._size or sum(splits) != rows:
                    raise ValueError(
                        f"accord: all_to_all_single: input_split_sizes {splits} must have "
                        f"{self._size} entries that add up to the input's {rows} rows"
                    )
            else:
                if rows % self._size:
                    raise ValueError(
                        f"accord: all_to_all_single: the input's {rows} rows do not divide by the group's "
                        f"{self._size} ranks; pass input_split_sizes"
                    )
                splits = [rows // self._size] * self._size
            if output_split_sizes:
                expected = sum(int(s) for s in output_split_sizes)
                out_rows = output.shape[0] if output.dim() > 0 else 0
                if expected != out_rows:
                    raise ValueError(
                        f"accord: all_to_all_single: output_split_sizes add up to {expected}, "
                        f"the output has {out_rows} rows"
                    )
            return self._alltoall_rows(source, splits, [output], "all_to_all_single")

        return self._enqueued(start, output, input)

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):  # noqa: A002
        return self.all_to_all_single(output, input, output_split_sizes, input_split_sizes, opts)

    def scatter(self, outputs, input_lists, opts):
        root = self._root(opts.rootRank, "scatter")
        me = self._global_ranks[self._rank]
        output = _one(outputs, "scatter")

        def start() -> Callable[[], Any]:
            wire_out = self._as_wire(output)
            if me == root:
                if len(input_lists) != 1 or len(input_lists[0]) != self._size:
                    raise ValueError(
                        f"accord: scatter: the root needs one input list of {self._size} tensors"
                    )
                pieces = [_flat(self._as_wire(t)) for t in input_lists[0]]
                source = torch.cat(pieces)
                send = [p.numel() for p in pieces]
            else:
                source = torch.empty(0, dtype=wire_out.dtype, device=wire_out.device)
                send = [0] * self._size
            return self._alltoall_rows(source, send, [output], "scatter")

        return self._enqueued(start, outputs, input_lists)

    # -------------------------------------------------------------- barrier

    def barrier(self, opts=None):
        def start() -> Callable[[], Any]:
            handle = _ops.allreduce_async(torch.zeros(1), op=_ops.Sum, process_set=self._set)

            def finish() -> List[torch.Tensor]:
                _ops.synchronize(handle)
                return []

            return finish

        return self._enqueued(start)

    # ------------------------------------------------------ point-to-point

    def _no_p2p(self, what: str):
        raise NotImplementedError(
            f"accord: {what}: the accord backend has no point-to-point operations (send, recv, isend, irecv, "
            "batch_isend_irecv); run them on a gloo group made with dist.new_group(backend='gloo'), "
            "or use a collective"
        )

    def send(self, tensors, dst, tag=0):
        self._no_p2p("send")

    def recv(self, tensors, src, tag=0):
        self._no_p2p("recv")

    def recv_anysource(self, tensors, tag=0):
        self._no_p2p("recv")

    def monitored_barrier(self, *args, **kwargs):
        raise NotImplementedError(
            "accord: monitored_barrier is gloo's; the accord backend's barrier names the missing ranks "
            "through accord's stall inspector"
        )

    # ------------------------------------------------------------ shutdown

    def shutdown(self) -> None:
        self._completer.stop()

    def abort(self) -> None:
        self._completer.stop()


# ------------------------------------------------------------ the creator

# group name -> the accord process set registered for it on every rank
# (by _register_group_sets) before torch creates the group on its members.
_group_sets: Dict[str, ProcessSet] = {}
_group_sets_lock = threading.Lock()


def _check_launch(rank: int, size: int) -> None:
    if rank != accord.rank() or size != accord.size():
        raise ValueError(
            f"accord: init_process_group('{BACKEND_NAME}') was given rank {rank} and world_size {size}, "
            f"but the launch made this process rank {accord.rank()} of {accord.size()}: accord takes both "
            "from mpirun/accordrun/srun; leave them out or pass those values"
        )


def _init_accord(timeout: Optional[timedelta]) -> None:
    """accord.init() if it has not run, with the group's timeout as the stall
    inspector's shutdown time unless the user set one."""
    if accord.is_initialized():
        return
    if timeout is not None and not any(
        v in os.environ for v in ("ACCORD_STALL_SHUTDOWN_TIME_SECONDS", "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS")
    ):
        seconds = max(timeout.total_seconds(), 0.001)
        os.environ["ACCORD_STALL_SHUTDOWN_TIME_SECONDS"] = repr(seconds)
        if not any(
            v in os.environ for v in ("ACCORD_STALL_CHECK_TIME_SECONDS", "HOROVOD_STALL_CHECK_TIME_SECONDS")
        ):
            os.environ["ACCORD_STALL_CHECK_TIME_SECONDS"] = repr(min(60.0, seconds / 2))
    accord.init()


def _create(options: Any, *_: Any) -> AccordProcessGroup:
    """The creator torch calls on a group's members (extended API)."""
    global_ranks = list(options.global_ranks_in_group)
    timeout = options.timeout
    name = str(options.group_id)
    rank, size = options.group_rank, options.group_size
    if not global_ranks:  # the default group
        _init_accord(timeout)
        _check_launch(rank, size)
        return AccordProcessGroup(rank, size, global_process_set, timeout, name or "default")
    with _group_sets_lock:
        process_set = _group_sets.get(name)
    if process_set is None:
        raise RuntimeError(
            f"accord: group {name!r} (global ranks {global_ranks}) was created without accord registering "
            "its process set on every rank; create accord groups with dist.new_group or dist.new_subgroups"
        )
    if process_set.ranks != sorted(global_ranks):
        raise RuntimeError(
            f"accord: group {name!r}: torch asks for global ranks {global_ranks}, "
            f"accord registered {process_set.ranks}"
        )
    return AccordProcessGroup(rank, size, process_set, timeout, name)


def _create_refusing(*_: Any, **__: Any) -> Any:
    raise RuntimeError(_refusal())


def _group_backend_is_accord(backend: Any) -> bool:
    if backend is None:
        return False
    text = str(backend).lower()
    return text == BACKEND_NAME or text.startswith(BACKEND_NAME + ":") or f":{BACKEND_NAME}" in text


def _register_group_sets(helper: Callable) -> Callable:
    """Wraps torch's group creation, which every rank enters for every new
    group: when the group's backend is accord, every rank registers the
    group's process set with accord first (in the same order on every rank,
    as torch requires of new_group), and the creator on the members finds it
    by the group's name."""

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            global_ranks = kwargs.get("global_ranks_in_group", args[2] if len(args) > 2 else None)
            backend = kwargs.get("backend", args[3] if len(args) > 3 else None)
            group_name = kwargs.get("group_name", args[5] if len(args) > 5 else None)
        except Exception:  # noqa: BLE001 -- an unknown signature: leave torch's call alone
            return helper(*args, **kwargs)
        if global_ranks and group_name is not None and _group_backend_is_accord(backend):
            name = str(group_name)
            with _group_sets_lock:
                known = name in _group_sets
            if not known:
                process_set = add_process_set(sorted(int(r) for r in global_ranks))
                with _group_sets_lock:
                    _group_sets[name] = process_set
        return helper(*args, **kwargs)

    wrapper.__wrapped__ = helper  # type: ignore[attr-defined]
    wrapper._accord = True  # type: ignore[attr-defined]
    return wrapper


# ---------------------------------------------------------- env:// under MPI

_MPI_LAUNCH_VARS = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "SLURM_NTASKS", "MV2_COMM_WORLD_SIZE")


def _mpi_launched() -> bool:
    return any(v in os.environ for v in _MPI_LAUNCH_VARS)


def _accord_env_rendezvous(original: Callable) -> Callable:
    """torch's env:// handler, which under an MPI launch without
    MASTER_ADDR takes rank and world size from accord and a TCPStore that
    rank 0 serves at an address accord broadcasts."""

    def handler(url: str, timeout: timedelta = timedelta(minutes=30), **kwargs: Any):
        if "MASTER_ADDR" in os.environ or not _mpi_launched():
            yield from original(url, timeout=timeout, **kwargs)
            return
        from urllib.parse import parse_qs, urlparse

        query = {k: v[-1] for k, v in parse_qs(urlparse(url).query).items()}
        # init_process_group hands its timeout to the rendezvous, which runs
        # before the creator: accord's stall inspector takes it here.
        _init_accord(timeout)
        rank, size = accord.rank(), accord.size()
        for key, value in (("rank", rank), ("world_size", size)):
            given = query.get(key, os.environ.get(key.upper()))
            if given is not None and int(given) not in (-1, value):
                raise ValueError(
                    f"accord: env:// without MASTER_ADDR under an MPI launch takes {key} from the launch "
                    f"({value}), but {given} was given"
                )
        from . import functions as _functions

        store = None
        if rank == 0:
            host = socket.gethostname()
            store = dist.TCPStore(host, 0, size, True, timeout=timeout, wait_for_workers=False)
            address = (host, store.port)
        else:
            address = None
        host, port = _functions.broadcast_object(address, root_rank=0, name="accord.torch.rendezvous")
        if store is None:
            store = dist.TCPStore(host, port, size, False, timeout=timeout)
        yield store, rank, size
        raise RuntimeError("accord: the env:// rendezvous under an MPI launch cannot be repeated")

    handler._accord = True  # type: ignore[attr-defined]
    return handler


# --------------------------------------------------------------- register


def register() -> None:
    """Registers the backend with this torch (idempotent); ``import accord.torch`` calls it."""
    if not dist.is_available() or hasattr(dist.Backend, BACKEND_NAME.upper()):
        return
    supported = _torch_version() >= MIN_TORCH
    try:
        from torch._C._distributed_c10d import _create_work_from_future  # noqa: F401
    except ImportError:
        supported = False
    if not supported:
        dist.Backend.register_backend(BACKEND_NAME, _create_refusing)
        return
    dist.Backend.register_backend(BACKEND_NAME, _create, extended_api=True, devices=["cpu", "cuda"])
    c10d = dist.distributed_c10d
    helper = getattr(c10d, "_new_process_group_helper", None)
    if helper is not None and not getattr(helper, "_accord", False):
        c10d._new_process_group_helper = _register_group_sets(helper)
    rendezvous = sys.modules.get("torch.distributed.rendezvous")
    handlers = getattr(rendezvous, "_rendezvous_handlers", None)
    if isinstance(handlers, dict) and "env" in handlers and not getattr(handlers["env"], "_accord", False):
        handlers["env"] = _accord_env_rendezvous(handlers["env"])
