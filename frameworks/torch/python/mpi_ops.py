"""Collectives on torch tensors, with the names and arguments of ``horovod.torch``.

Every ``*_async`` function enqueues the operation and returns an integer
handle at once; ``poll(handle)`` says whether it has finished and
``synchronize(handle)`` waits for it and returns its result. The functions
without ``_async`` enqueue and wait. A trailing underscore means in place:
the result overwrites the input tensor.

Tensors travel to the core through DLPack without a copy. The core reads and
writes them on its own thread, so a tensor handed to an ``*_async`` function
must not be modified (or, for in-place forms, read) until the handle is
synchronized; this module keeps every tensor it passed alive until then.

Conventions that go beyond Horovod's documentation:

* Non-contiguous inputs are copied to a contiguous tensor first. For the
  in-place forms the result is then copied back into the caller's tensor
  when the handle is synchronized, so in-place semantics hold for any layout.
* ``bool`` tensors are supported by every collective (Sum and Max are logical
  OR, Min and Product logical AND; Average and scale factors are refused).
* ``root_rank`` of a broadcast is a global rank (what ``rank()`` returns on
  the root), also for a broadcast restricted to a process set; it must be a
  member of that set.
* Unknown handles given to ``poll`` or ``synchronize`` raise ``ValueError``.
* ``Adasum`` is not available and raises ``NotImplementedError``.
"""
from typing import Any, Callable, List, Optional, Sequence, Tuple, Union

import torch

from accord import _core
from accord import global_process_set  # noqa: F401  (imported from here by other modules)
from accord.ops import Adasum, Average, Max, Min, Product, Sum, core_op, op_name  # noqa: F401

from . import autograd as _autograd
from . import tensor_args as _args
from .basics import (cross_rank, cross_size, is_initialized, local_rank, local_size,  # noqa: F401
                     mpi_threads_supported, rank, size)
from .compression import Compression
from .handles import poll, register as _register, synchronize, track as _track
from .sparse import sparse_allreduce_async
from .tensor_args import ProcessSetLike

__all__ = [
    "Average", "Sum", "Adasum", "Min", "Max", "Product",
    "allreduce", "allreduce_", "allreduce_async", "allreduce_async_",
    "grouped_allreduce", "grouped_allreduce_", "grouped_allreduce_async",
    "grouped_allreduce_async_",
    "allgather", "allgather_async", "grouped_allgather", "grouped_allgather_async",
    "broadcast", "broadcast_", "broadcast_async", "broadcast_async_",
    "alltoall", "alltoall_async",
    "reducescatter", "reducescatter_async", "grouped_reducescatter", "grouped_reducescatter_async",
    "sparse_allreduce_async",
    "poll", "synchronize", "join", "barrier",
]


# ---------------------------------------------------------------- allreduce


def _enqueue_allreduce(inputs: List[torch.Tensor], outputs: List[torch.Tensor], grouped: bool,
                       name: Optional[str], op: int, prescale_factor: float,
                       postscale_factor: float, process_set: ProcessSetLike,
                       finish: Callable[[], Any]) -> int:
    """Enqueues an allreduce of compact tensors; outputs may be the inputs."""
    what = "grouped_allreduce" if grouped else "allreduce"
    override = _args.group_override(inputs, what)
    ins = [_args.exported(t)[0] for t in inputs]
    outs = [i if o is t else _args.exported(o)[0] for t, i, o in zip(inputs, ins, outputs)]
    # Positional: keyword arguments cost more than the call itself. The
    # stream goes last, and only for CUDA tensors.
    stream = _args.stream_of(inputs[0])
    args = (_args.name_arg(name), core_op(op), float(prescale_factor), float(postscale_factor),
            _args.set_id(process_set), override) + (() if stream is None else (stream,))
    if grouped:
        core_handle = _core.grouped_allreduce_async(ins, outs, *args)
    else:
        core_handle = _core.allreduce_async(ins[0], outs[0], *args)
    return _register([core_handle], (inputs, outputs, ins, outs), finish, results_known=True)


# The fast path of the single-tensor allreduces: for the common case it takes
# the place of the general checks and conversions (which cost more than the
# core's enqueue); every other call goes down the general path, which keeps
# every error message.
_FAST_OPS = {None: core_op(Average)}  # the core op of every valid ``op``; None: the default
_FAST_OPS.update({op: core_op(op) for op in (Average, Sum, Min, Max, Product)})
_NO_COMPRESSION = Compression.none
_Tensor = torch.Tensor
_Parameter = torch.nn.Parameter
_strided = torch.strided
# torch dtype -> accord dtype id, for the dtypes the fast path passes by
# address (bool travels through DLPack as uint8 on the general path).
_DTYPE_IDS = {getattr(torch, name): _core.DTYPE_IDS[name]
              for name in ("uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16",
                           "float32", "float64")}
_empty_like = torch.empty_like
_contiguous_format = torch.contiguous_format
_is_grad_enabled = torch.is_grad_enabled
_current_stream = torch.cuda.current_stream
_core_allreduce_ptr = _core.allreduce_async_ptr
# Pinned CPU tensors need a CUDA (or ROCm) build of torch; the fast path
# leaves them to the general one, which reads them through DLPack.
_PINNING_BUILT = torch.version.cuda is not None or getattr(torch.version, "hip", None) is not None


def _allreduce_fast(tensor: Any, in_place: bool, differentiable: bool, average: Optional[bool],
                    name: Any, op: Any, prescale_factor: Any, postscale_factor: Any,
                    process_set: ProcessSetLike) -> Optional[Tuple[Any, torch.Tensor]]:
    """Enqueues the common allreduce straight to the core.

    The common case: no ``average``, an op constant (or None), a str name
    (or None), and a plain ``torch.Tensor`` or ``Parameter`` that is dense,
    on the CPU (not pinned) or a CUDA device, of a dtype accord reduces
    natively (not bool) and C-contiguous; for ``differentiable`` callers
    also a plain tensor that autograd need not record. The core gets the
    tensor's address, dtype id, shape and device (and for a CUDA tensor the
    current stream, which produces it) through ``_core.allreduce_async_ptr``
    instead of a DLPack capsule: ``torch.utils.dlpack.to_dlpack`` alone
    costs more than the rest of the enqueue. The core handle holds the
    tensors until the operation completes, as it holds a capsule's producer.

    Returns ``(core handle, result)``, or None for any other call.
    """
    if average is not None or not (name is None or type(name) is str):
        return None
    try:
        core = _FAST_OPS[op]
    except (KeyError, TypeError):
        return None
    kind = type(tensor)
    if kind is not _Tensor and (differentiable or kind is not _Parameter):
        return None
    code = _DTYPE_IDS.get(tensor.dtype)
    if code is None or not (tensor.layout is _strided and tensor.is_contiguous()):
        return None
    if differentiable and tensor.requires_grad and _is_grad_enabled():
        return None
    if tensor.is_cuda:
        device = tensor.device.index
        stream = _current_stream(tensor.device).cuda_stream
    elif tensor.is_cpu and not (_PINNING_BUILT and tensor.is_pinned()):
        device, stream = -1, 0
    else:
        return None
    prescale_factor = float(prescale_factor)
    postscale_factor = float(postscale_factor)
    set_id = 0 if process_set is global_process_set else _args.set_id(process_set)
    address = tensor.data_ptr()
    if in_place:
        return _core_allreduce_ptr(tensor, address, address, code, tensor.shape, name, core,
                                   prescale_factor, postscale_factor, set_id, device, stream), tensor
    output = _empty_like(tensor, memory_format=_contiguous_format)
    return _core_allreduce_ptr((tensor, output), address, output.data_ptr(), code, tensor.shape,
                               name, core, prescale_factor, postscale_factor, set_id, device,
                               stream), output


def allreduce_async(tensor: torch.Tensor, average: Optional[bool] = None,
                    name: Optional[str] = None, op: Optional[int] = None,
                    prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                    process_set: ProcessSetLike = global_process_set) -> int:
    """Starts reducing ``tensor`` across the ranks of ``process_set`` into a new tensor.

    Args:
        tensor: the input; not modified.
        average: deprecated; ``True`` means ``op=Average``, ``False`` ``op=Sum``.
        name: matches the operation across ranks; unnamed operations match
            in the order each rank submits them.
        op: ``Average`` (default), ``Sum``, ``Min``, ``Max`` or ``Product``.
        prescale_factor: multiplies each rank's input before the reduction.
        postscale_factor: multiplies the result.
        process_set: the ranks taking part (default: all).

    Returns:
        A handle for ``poll``/``synchronize``; ``synchronize`` returns the
        reduced tensor (same shape and dtype as ``tensor``).
    """
    entry = _allreduce_fast(tensor, False, False, average, name, op, prescale_factor,
                            postscale_factor, process_set)
    if entry is not None:
        return _track(entry)
    op = _args.resolve_op(op, average)
    source = _args.compact(_args.check_tensor(tensor, "allreduce_async"))
    output = torch.empty_like(source, memory_format=torch.contiguous_format)
    return _enqueue_allreduce([source], [output], False, name, op, prescale_factor,
                              postscale_factor, process_set, lambda: output)


def allreduce_async_(tensor: torch.Tensor, average: Optional[bool] = None,
                     name: Optional[str] = None, op: Optional[int] = None,
                     prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                     process_set: ProcessSetLike = global_process_set) -> int:
    """Like ``allreduce_async``, but the result overwrites ``tensor``.

    ``synchronize`` returns ``tensor``.
    """
    entry = _allreduce_fast(tensor, True, False, average, name, op, prescale_factor,
                            postscale_factor, process_set)
    if entry is not None:
        return _track(entry)
    op = _args.resolve_op(op, average)
    _args.check_tensor(tensor, "allreduce_async_")
    buffer = _args.compact(tensor)

    def finish() -> torch.Tensor:
        _args.copy_back([tensor], [buffer])
        return tensor

    return _enqueue_allreduce([buffer], [buffer], False, name, op, prescale_factor,
                              postscale_factor, process_set, finish)


def allreduce(tensor: torch.Tensor, average: Optional[bool] = None, name: Optional[str] = None,
              compression=Compression.none, op: Optional[int] = None,
              prescale_factor: float = 1.0, postscale_factor: float = 1.0,
              process_set: ProcessSetLike = global_process_set) -> torch.Tensor:
    """Reduces ``tensor`` across the ranks of ``process_set`` and returns the result.

    Differentiable: the gradient of the input is the same reduction (op and
    scale factors) of the output's gradient for Sum and Average, and the
    exact gradient of the elementwise min, max or product otherwise.

    Args:
        compression: ``Compression.none`` or ``Compression.fp16`` (floating
            tensors travel as float16 and the result is cast back).
        Other arguments: as for ``allreduce_async``.
    """
    if compression is _NO_COMPRESSION:
        entry = _allreduce_fast(tensor, False, True, average, name, op, prescale_factor,
                                postscale_factor, process_set)
        if entry is not None:
            entry[0].wait()
            return entry[1]
    op = _args.resolve_op(op, average)
    _args.check_tensor(tensor, "allreduce")
    sent, ctx = compression.compress(tensor)
    if _autograd.needs_grad(sent):
        reduced = _autograd.AllreduceFunction.apply(sent, name, op, prescale_factor,
                                                    postscale_factor, process_set)
    else:
        reduced = synchronize(allreduce_async(sent, None, name, op, prescale_factor,
                                              postscale_factor, process_set))
    return compression.decompress(reduced, ctx)


def allreduce_(tensor: torch.Tensor, average: Optional[bool] = None, name: Optional[str] = None,
               op: Optional[int] = None, prescale_factor: float = 1.0,
               postscale_factor: float = 1.0,
               process_set: ProcessSetLike = global_process_set) -> torch.Tensor:
    """Reduces ``tensor`` in place across the ranks and returns it (not differentiable)."""
    entry = _allreduce_fast(tensor, True, False, average, name, op, prescale_factor,
                            postscale_factor, process_set)
    if entry is not None:
        entry[0].wait()
        return tensor
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor,
                                        postscale_factor, process_set))


def grouped_allreduce_async(tensors: Sequence[torch.Tensor], average: Optional[bool] = None,
                            name: Optional[str] = None, op: Optional[int] = None,
                            prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                            process_set: ProcessSetLike = global_process_set) -> int:
    """Starts reducing a list of tensors as one unit (negotiated and run together).

    ``name`` names the group. ``synchronize`` returns the list of reduced tensors.
    """
    op = _args.resolve_op(op, average)
    sources = [_args.compact(t) for t in _args.input_list(tensors, "grouped_allreduce_async")]
    outputs = [torch.empty_like(s, memory_format=torch.contiguous_format) for s in sources]
    return _enqueue_allreduce(sources, outputs, True, name, op, prescale_factor,
                              postscale_factor, process_set, lambda: list(outputs))


def grouped_allreduce_async_(tensors: Sequence[torch.Tensor], average: Optional[bool] = None,
                             name: Optional[str] = None, op: Optional[int] = None,
                             prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                             process_set: ProcessSetLike = global_process_set) -> int:
    """Like ``grouped_allreduce_async``, but each result overwrites its input."""
    op = _args.resolve_op(op, average)
    targets = _args.input_list(tensors, "grouped_allreduce_async_")
    buffers = [_args.compact(t) for t in targets]

    def finish() -> List[torch.Tensor]:
        _args.copy_back(targets, buffers)
        return list(targets)

    return _enqueue_allreduce(buffers, buffers, True, name, op, prescale_factor,
                              postscale_factor, process_set, finish)


def grouped_allreduce(tensors: Sequence[torch.Tensor], average: Optional[bool] = None,
                      name: Optional[str] = None, compression=Compression.none,
                      op: Optional[int] = None, prescale_factor: float = 1.0,
                      postscale_factor: float = 1.0,
                      process_set: ProcessSetLike = global_process_set) -> List[torch.Tensor]:
    """Reduces a list of tensors as one unit and returns the results (differentiable)."""
    op = _args.resolve_op(op, average)
    tensors = _args.input_list(tensors, "grouped_allreduce")
    compressed = [compression.compress(t) for t in tensors]
    sent = [c[0] for c in compressed]
    if _autograd.needs_grad(*sent):
        reduced = _autograd.GroupedAllreduceFunction.apply(name, op, prescale_factor,
                                                           postscale_factor, process_set, *sent)
    else:
        reduced = synchronize(grouped_allreduce_async(sent, None, name, op, prescale_factor,
                                                      postscale_factor, process_set))
    return [compression.decompress(r, c[1]) for r, c in zip(reduced, compressed)]


def grouped_allreduce_(tensors: Sequence[torch.Tensor], average: Optional[bool] = None,
                       name: Optional[str] = None, op: Optional[int] = None,
                       prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                       process_set: ProcessSetLike = global_process_set) -> List[torch.Tensor]:
    """Reduces a list of tensors in place as one unit and returns them."""
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor,
                                                postscale_factor, process_set))


# ---------------------------------------------------------------- allgather


def allgather_async(tensor: torch.Tensor, name: Optional[str] = None,
                    process_set: ProcessSetLike = global_process_set) -> int:
    """Starts concatenating every rank's ``tensor`` along dimension 0.

    Dimension 0 may differ across ranks; the other dimensions must agree.
    ``synchronize`` returns the concatenation, in rank order of the set.
    """
    source = _args.compact(_args.check_tensor(tensor, "allgather_async"))
    exported, override = _args.exported(source)
    core_handle = _core.allgather_async(exported, name=_args.name_arg(name),
                                        process_set=_args.set_id(process_set),
                                        dtype_override=override, stream=_args.stream_of(source),
                                        allocate=_args.cuda_allocator(source))
    return _register([core_handle], (source, exported),
                     lambda: _args.imported(core_handle.outputs()[0], override))


def allgather(tensor: torch.Tensor, name: Optional[str] = None,
              process_set: ProcessSetLike = global_process_set) -> torch.Tensor:
    """Concatenates every rank's ``tensor`` along dimension 0 (differentiable).

    The gradient of a rank's input is the sum over ranks of the output
    gradient's rows that came from this rank.
    """
    _args.check_tensor(tensor, "allgather")
    if _autograd.needs_grad(tensor):
        return _autograd.AllgatherFunction.apply(tensor, name, process_set)
    return synchronize(allgather_async(tensor, name, process_set))


def grouped_allgather_async(tensors: Sequence[torch.Tensor], name: Optional[str] = None,
                            process_set: ProcessSetLike = global_process_set) -> int:
    """Starts allgathering a list of tensors as one unit; ``synchronize`` returns a list."""
    sources = [_args.compact(t) for t in _args.input_list(tensors, "grouped_allgather_async")]
    is_bool = [s.dtype == torch.bool for s in sources]
    # The core takes one dtype override per group. A group that mixes bool
    # with other dtypes sends its bool members as plain uint8 bytes, which
    # an allgather copies unchanged.
    override = "bool" if all(is_bool) else None
    exported = [_args.exported(s)[0] for s in sources]
    core_handle = _core.grouped_allgather_async(exported, name=_args.name_arg(name),
                                                process_set=_args.set_id(process_set),
                                                dtype_override=override,
                                                stream=_args.stream_of(sources[0]),
                                                allocate=_args.cuda_allocator(sources[0]))

    def finish() -> List[torch.Tensor]:
        return [_args.imported(o, "bool" if b else None)
                for o, b in zip(core_handle.outputs(), is_bool)]

    return _register([core_handle], (sources, exported), finish)


def grouped_allgather(tensors: Sequence[torch.Tensor], name: Optional[str] = None,
                      process_set: ProcessSetLike = global_process_set) -> List[torch.Tensor]:
    """Allgathers a list of tensors as one unit (differentiable)."""
    tensors = _args.input_list(tensors, "grouped_allgather")
    if _autograd.needs_grad(*tensors):
        return list(_autograd.GroupedAllgatherFunction.apply(name, process_set, *tensors))
    return synchronize(grouped_allgather_async(tensors, name, process_set))


# ---------------------------------------------------------------- broadcast


def _enqueue_broadcast(source: torch.Tensor, output: torch.Tensor, root_rank: int,
                       name: Optional[str], process_set: ProcessSetLike,
                       finish: Callable[[], Any]) -> int:
    set_id = _args.set_id(process_set)
    root_in_set = _args.root_in_set(root_rank, set_id)
    if source.is_cuda and output is not source:
        # The core broadcasts CUDA tensors in place: the root's values go
        # into the output first, on the current stream (which the core waits for).
        if _args.set_rank(set_id) == root_in_set:
            output.copy_(source)
        source = output
    exported, override = _args.exported(source)
    out = exported if output is source else _args.exported(output)[0]
    core_handle = _core.broadcast_async(exported, out, root_in_set, name=_args.name_arg(name),
                                        process_set=set_id, dtype_override=override,
                                        stream=_args.stream_of(source))
    return _register([core_handle], (source, output, exported, out), finish, results_known=True)


def broadcast_async(tensor: torch.Tensor, root_rank: int, name: Optional[str] = None,
                    process_set: ProcessSetLike = global_process_set) -> int:
    """Starts copying ``root_rank``'s ``tensor`` to every rank of the set.

    ``root_rank`` is a global rank. ``synchronize`` returns a new tensor
    holding the root's values; ``tensor`` is not modified.
    """
    source = _args.compact(_args.check_tensor(tensor, "broadcast_async"))
    output = torch.empty_like(source, memory_format=torch.contiguous_format)
    return _enqueue_broadcast(source, output, root_rank, name, process_set, lambda: output)


def broadcast_async_(tensor: torch.Tensor, root_rank: int, name: Optional[str] = None,
                     process_set: ProcessSetLike = global_process_set) -> int:
    """Like ``broadcast_async``, but the root's values overwrite ``tensor``."""
    _args.check_tensor(tensor, "broadcast_async_")
    buffer = _args.compact(tensor)

    def finish() -> torch.Tensor:
        _args.copy_back([tensor], [buffer])
        return tensor

    return _enqueue_broadcast(buffer, buffer, root_rank, name, process_set, finish)


def broadcast(tensor: torch.Tensor, root_rank: int, name: Optional[str] = None,
              process_set: ProcessSetLike = global_process_set) -> torch.Tensor:
    """Returns ``root_rank``'s ``tensor`` on every rank of the set (differentiable).

    The gradient of the root's input is the sum over ranks of the output
    gradients; other ranks' inputs get zeros.
    """
    _args.check_tensor(tensor, "broadcast")
    if _autograd.needs_grad(tensor):
        return _autograd.BroadcastFunction.apply(tensor, root_rank, name, process_set)
    return synchronize(broadcast_async(tensor, root_rank, name, process_set))


def broadcast_(tensor: torch.Tensor, root_rank: int, name: Optional[str] = None,
               process_set: ProcessSetLike = global_process_set) -> torch.Tensor:
    """Overwrites ``tensor`` with ``root_rank``'s values and returns it (not differentiable)."""
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


# ----------------------------------------------------------------- alltoall


def alltoall_async(tensor: torch.Tensor, splits: Any = None, name: Optional[str] = None,
                   process_set: ProcessSetLike = global_process_set) -> int:
    """Starts sending slices of ``tensor`` (along dimension 0) to every rank.

    Args:
        splits: how many rows go to each rank of the set (a list or 1-D
            integer tensor with one entry per rank); ``None`` splits
            dimension 0 evenly, which must then divide by the set's size.

    Returns:
        A handle; ``synchronize`` returns ``(output, received_splits)``:
        the rows received from every rank, concatenated in rank order, and
        an int32 tensor of how many rows came from each rank.
    """
    source = _args.compact(_args.check_tensor(tensor, "alltoall_async"))
    split_list = _args.splits_list(splits)
    exported, override = _args.exported(source)
    core_handle = _core.alltoall_async(exported, split_list, name=_args.name_arg(name),
                                       process_set=_args.set_id(process_set),
                                       dtype_override=override, stream=_args.stream_of(source),
                                       allocate=_args.cuda_allocator(source))

    def finish() -> Tuple[torch.Tensor, torch.Tensor]:
        output = _args.imported(core_handle.outputs()[0], override)
        received = torch.tensor(list(core_handle.received_splits()), dtype=torch.int32)
        return output, received

    return _register([core_handle], (source, exported), finish)


def alltoall(tensor: torch.Tensor, splits: Any = None, name: Optional[str] = None,
             process_set: ProcessSetLike = global_process_set
             ) -> Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]:
    """Sends slices of ``tensor`` to every rank and returns what this rank received.

    Differentiable: the gradient travels back with an alltoall using the
    received splits.

    Returns:
        The received rows, concatenated in rank order; when ``splits`` is
        given, ``(output, received_splits)`` as Horovod returns.
    """
    _args.check_tensor(tensor, "alltoall")
    if _autograd.needs_grad(tensor):
        output, received = _autograd.AlltoallFunction.apply(tensor, splits, name, process_set)
    else:
        output, received = synchronize(alltoall_async(tensor, splits, name, process_set))
    return output if splits is None else (output, received)


# ------------------------------------------------------------ reducescatter


def _reducescatter_op(op: Optional[int], what: str) -> int:
    op = _args.resolve_op(op)
    if op not in (Sum, Average):
        raise ValueError(f"{what} supports op=Sum or op=Average, got op={op_name(op)}")
    return op


def reducescatter_async(tensor: torch.Tensor, name: Optional[str] = None, op: int = Average,
                        process_set: ProcessSetLike = global_process_set,
                        prescale_factor: float = 1.0, postscale_factor: float = 1.0) -> int:
    """Starts reducing ``tensor`` across ranks and scattering the result along dimension 0.

    Rank ``i`` of the set receives the ``i``-th block of rows; dimension 0 is
    split as evenly as possible, the first ``rows % set_size`` ranks getting
    one row more. ``op`` is ``Average`` (default) or ``Sum``.
    """
    op = _reducescatter_op(op, "reducescatter_async")
    source = _args.compact(_args.check_tensor(tensor, "reducescatter_async"))
    exported, override = _args.exported(source)
    core_handle = _core.reducescatter_async(
        exported, name=_args.name_arg(name), op=core_op(op), prescale_factor=float(prescale_factor),
        postscale_factor=float(postscale_factor), process_set=_args.set_id(process_set),
        dtype_override=override, stream=_args.stream_of(source), allocate=_args.cuda_allocator(source))
    return _register([core_handle], (source, exported),
                     lambda: _args.imported(core_handle.outputs()[0], override))


def reducescatter(tensor: torch.Tensor, name: Optional[str] = None,
                  compression=Compression.none, op: int = Average,
                  process_set: ProcessSetLike = global_process_set,
                  prescale_factor: float = 1.0, postscale_factor: float = 1.0) -> torch.Tensor:
    """Reduces ``tensor`` across ranks and returns this rank's block of rows (differentiable).

    The gradient of the input is the allgather of the output gradients,
    scaled by the scale factors (and divided by the set size for Average).
    """
    op = _reducescatter_op(op, "reducescatter")
    _args.check_tensor(tensor, "reducescatter")
    sent, ctx = compression.compress(tensor)
    if _autograd.needs_grad(sent):
        reduced = _autograd.ReducescatterFunction.apply(sent, name, op, prescale_factor,
                                                        postscale_factor, process_set)
    else:
        reduced = synchronize(reducescatter_async(sent, name, op, process_set, prescale_factor,
                                                  postscale_factor))
    return compression.decompress(reduced, ctx)


def grouped_reducescatter_async(tensors: Sequence[torch.Tensor], name: Optional[str] = None,
                                op: int = Average,
                                process_set: ProcessSetLike = global_process_set,
                                prescale_factor: float = 1.0,
                                postscale_factor: float = 1.0) -> int:
    """Starts a reducescatter of a list of tensors as one unit; ``synchronize`` returns a list."""
    op = _reducescatter_op(op, "grouped_reducescatter_async")
    sources = [_args.compact(t) for t in _args.input_list(tensors, "grouped_reducescatter_async")]
    override = _args.group_override(sources, "grouped_reducescatter_async")
    exported = [_args.exported(s)[0] for s in sources]
    core_handle = _core.grouped_reducescatter_async(
        exported, name=_args.name_arg(name), op=core_op(op), prescale_factor=float(prescale_factor),
        postscale_factor=float(postscale_factor), process_set=_args.set_id(process_set),
        dtype_override=override, stream=_args.stream_of(sources[0]),
        allocate=_args.cuda_allocator(sources[0]))
    return _register([core_handle], (sources, exported),
                     lambda: [_args.imported(o, override) for o in core_handle.outputs()])


def grouped_reducescatter(tensors: Sequence[torch.Tensor], name: Optional[str] = None,
                          compression=Compression.none, op: int = Average,
                          process_set: ProcessSetLike = global_process_set,
                          prescale_factor: float = 1.0,
                          postscale_factor: float = 1.0) -> List[torch.Tensor]:
    """Reducescatters a list of tensors as one unit (differentiable)."""
    op = _reducescatter_op(op, "grouped_reducescatter")
    tensors = _args.input_list(tensors, "grouped_reducescatter")
    compressed = [compression.compress(t) for t in tensors]
    sent = [c[0] for c in compressed]
    if _autograd.needs_grad(*sent):
        reduced = _autograd.GroupedReducescatterFunction.apply(
            name, op, prescale_factor, postscale_factor, process_set, *sent)
    else:
        reduced = synchronize(grouped_reducescatter_async(sent, name, op, process_set,
                                                          prescale_factor, postscale_factor))
    return [compression.decompress(r, c[1]) for r, c in zip(reduced, compressed)]


# ------------------------------------------------------------ join, barrier


def join(device: int = -1, process_set: ProcessSetLike = global_process_set) -> int:
    """Declares that this rank has no more data; returns when every rank has joined.

    Until then this rank takes part in the other ranks' allreduces (Sum and
    Average) with zeros. ``device`` is accepted for compatibility and unused.

    Returns:
        The last rank to join.
    """
    del device
    core_handle = _core.join_async(process_set=_args.set_id(process_set))
    core_handle.wait()
    return int(core_handle.value())


def barrier(process_set: ProcessSetLike = global_process_set) -> None:
    """Returns once every rank of ``process_set`` has called ``barrier``."""
    _core.barrier_async(process_set=_args.set_id(process_set)).wait()
