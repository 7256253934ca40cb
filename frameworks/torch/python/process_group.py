"""accord as a ``torch.distributed`` backend: ``dist.init_process_group("accord")``.

Importing ``accord.torch`` registers the backend ``"accord"`` for CPU and CUDA
tensors. Its process group is a Python subclass of ``dist.ProcessGroup`` whose
collectives are accord.torch's asynchronous operations on an accord process
set (the global set for the default group). Every operation returns a
``Work`` over a ``torch.futures.Future`` (process_group_work.py), so
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

import collections
import os
import socket
import sys
import threading
from datetime import timedelta
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.distributed as dist

import accord
from accord import AccordError, ProcessSet, add_process_set, global_process_set

from . import mpi_ops as _ops
from .process_group_work import Completer, Op, Work

__all__ = ["BACKEND_NAME", "AccordProcessGroup", "MIN_TORCH", "backend_supported"]

BACKEND_NAME = "accord"
MIN_TORCH = (2, 1)


def _torch_version() -> Tuple[int, int]:
    parts = torch.__version__.split(".")
    return int(parts[0]), int("".join(c for c in parts[1] if c.isdigit()) or 0)


def backend_supported() -> bool:
    """Whether this torch can run the backend (Python process groups: 2.1 or newer)."""
    if not dist.is_available() or _torch_version() < MIN_TORCH:
        return False
    try:
        from torch._C._distributed_c10d import _create_work_from_future  # noqa: F401
    except ImportError:
        return False
    return True


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
        self._history: "collections.deque[Tuple[Any, Optional[Op]]]" = collections.deque(
            maxlen=2 * self.WINDOW
        )
        self._last_user: Dict[str, Op] = {}
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

    def submitted(self, op: Optional[Op]) -> None:
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
        self._completer = Completer(name)
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
        return Work(op)

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
    if not backend_supported():
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
