"""The allreduce family's enqueue layer: ``allreduce_async``, ``allreduce_async_``,
their grouped forms and the in-place ``allreduce_``/``grouped_allreduce_``,
with Horovod's names and arguments; ``accord.torch.mpi_ops`` re-exports them.
The differentiable ``allreduce`` and ``grouped_allreduce`` sit above
``autograd`` in ``differentiable_ops``.

The single-tensor forms have a fast path for the common case (a plain,
contiguous tensor on the CPU or a CUDA device), which hands the core the
tensor's address instead of a DLPack capsule; every other call takes the
general path, which keeps every check and error message.
"""

from typing import Any, Callable, List, Optional, Sequence, Tuple

import torch

from accord import _core, global_process_set
from accord.ops import Average, Max, Min, Product, Sum, core_op

from . import tensor_args as _args
from .handles import register as _register
from .handles import synchronize
from .handles import track as _track
from .tensor_args import ProcessSetLike

__all__ = [
    "allreduce_",
    "allreduce_async",
    "allreduce_async_",
    "grouped_allreduce_",
    "grouped_allreduce_async",
    "grouped_allreduce_async_",
]

# ---------------------------------------------------------------- allreduce


def _enqueue_allreduce(
    inputs: List[torch.Tensor],
    outputs: List[torch.Tensor],
    grouped: bool,
    name: Optional[str],
    op: int,
    prescale_factor: float,
    postscale_factor: float,
    process_set: ProcessSetLike,
    finish: Callable[[], Any],
) -> int:
    """Enqueues an allreduce of compact tensors; outputs may be the inputs."""
    what = "grouped_allreduce" if grouped else "allreduce"
    override = _args.group_override(inputs, what)
    ins = [_args.exported(t)[0] for t in inputs]
    outs = [i if o is t else _args.exported(o)[0] for t, i, o in zip(inputs, ins, outputs)]
    # Positional: keyword arguments cost more than the call itself. The
    # stream goes last, and only for CUDA tensors.
    stream = _args.stream_of(inputs[0])
    args = (
        _args.name_arg(name),
        core_op(op),
        float(prescale_factor),
        float(postscale_factor),
        _args.set_id(process_set),
        override,
    ) + (() if stream is None else (stream,))
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
_Tensor = torch.Tensor
_Parameter = torch.nn.Parameter
_strided = torch.strided
# torch dtype -> accord dtype id, for the dtypes the fast path passes by
# address (bool travels through DLPack as uint8 on the general path).
_DTYPE_IDS = {
    getattr(torch, name): _core.DTYPE_IDS[name]
    for name in ("uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64")
}
_empty_like = torch.empty_like
_contiguous_format = torch.contiguous_format
_is_grad_enabled = torch.is_grad_enabled
_current_stream = torch.cuda.current_stream
_core_allreduce_ptr = _core.allreduce_async_ptr
# Pinned CPU tensors need a CUDA (or ROCm) build of torch; the fast path
# leaves them to the general one, which reads them through DLPack.
_PINNING_BUILT = torch.version.cuda is not None or getattr(torch.version, "hip", None) is not None


def allreduce_fast(
    tensor: Any,
    in_place: bool,
    differentiable: bool,
    average: Optional[bool],
    name: Any,
    op: Any,
    prescale_factor: Any,
    postscale_factor: Any,
    process_set: ProcessSetLike,
) -> Optional[Tuple[Any, torch.Tensor]]:
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
        return _core_allreduce_ptr(
            tensor,
            address,
            address,
            code,
            tensor.shape,
            name,
            core,
            prescale_factor,
            postscale_factor,
            set_id,
            device,
            stream,
        ), tensor
    output = _empty_like(tensor, memory_format=_contiguous_format)
    return _core_allreduce_ptr(
        (tensor, output),
        address,
        output.data_ptr(),
        code,
        tensor.shape,
        name,
        core,
        prescale_factor,
        postscale_factor,
        set_id,
        device,
        stream,
    ), output


def allreduce_async(
    tensor: torch.Tensor,
    average: Optional[bool] = None,
    name: Optional[str] = None,
    op: Optional[int] = None,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
    process_set: ProcessSetLike = global_process_set,
) -> int:
    """Starts reducing ``tensor`` across the ranks of ``process_set`` into a new tensor.

    Args:
        tensor: the input; not modified.
        average: deprecated; ``True`` means ``op=Average``, ``False`` ``op=Sum``.
        name: matches the operation across ranks; unnamed operations match
            in the order each rank submits them.
        op: ``Average`` (default), ``Sum``, ``Min``, ``Max``, ``Product`` or
            ``Adasum`` (CPU tensors of a floating dtype, 2^k ranks).
        prescale_factor: multiplies each rank's input before the reduction.
        postscale_factor: multiplies the result.
        process_set: the ranks taking part (default: all).

    Returns:
        A handle for ``poll``/``synchronize``; ``synchronize`` returns the
        reduced tensor (same shape and dtype as ``tensor``).
    """
    entry = allreduce_fast(
        tensor, False, False, average, name, op, prescale_factor, postscale_factor, process_set
    )
    if entry is not None:
        return _track(entry)
    op = _args.resolve_op(op, average)
    source = _args.compact(_args.check_tensor(tensor, "allreduce_async"))
    output = torch.empty_like(source, memory_format=torch.contiguous_format)
    return _enqueue_allreduce(
        [source], [output], False, name, op, prescale_factor, postscale_factor, process_set, lambda: output
    )


def allreduce_async_(
    tensor: torch.Tensor,
    average: Optional[bool] = None,
    name: Optional[str] = None,
    op: Optional[int] = None,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
    process_set: ProcessSetLike = global_process_set,
) -> int:
    """Like ``allreduce_async``, but the result overwrites ``tensor``.

    ``synchronize`` returns ``tensor``.
    """
    entry = allreduce_fast(
        tensor, True, False, average, name, op, prescale_factor, postscale_factor, process_set
    )
    if entry is not None:
        return _track(entry)
    op = _args.resolve_op(op, average)
    _args.check_tensor(tensor, "allreduce_async_")
    buffer = _args.compact(tensor)

    def finish() -> torch.Tensor:
        _args.copy_back([tensor], [buffer])
        return tensor

    return _enqueue_allreduce(
        [buffer], [buffer], False, name, op, prescale_factor, postscale_factor, process_set, finish
    )


def allreduce_(
    tensor: torch.Tensor,
    average: Optional[bool] = None,
    name: Optional[str] = None,
    op: Optional[int] = None,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
    process_set: ProcessSetLike = global_process_set,
) -> torch.Tensor:
    """Reduces ``tensor`` in place across the ranks and returns it (not differentiable)."""
    entry = allreduce_fast(
        tensor, True, False, average, name, op, prescale_factor, postscale_factor, process_set
    )
    if entry is not None:
        entry[0].wait()
        return tensor
    return synchronize(
        allreduce_async_(tensor, average, name, op, prescale_factor, postscale_factor, process_set)
    )


def grouped_allreduce_async(
    tensors: Sequence[torch.Tensor],
    average: Optional[bool] = None,
    name: Optional[str] = None,
    op: Optional[int] = None,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
    process_set: ProcessSetLike = global_process_set,
) -> int:
    """Starts reducing a list of tensors as one unit (negotiated and run together).

    ``name`` names the group. ``synchronize`` returns the list of reduced tensors.
    """
    op = _args.resolve_op(op, average)
    sources = [_args.compact(t) for t in _args.input_list(tensors, "grouped_allreduce_async")]
    outputs = [torch.empty_like(s, memory_format=torch.contiguous_format) for s in sources]
    return _enqueue_allreduce(
        sources,
        outputs,
        True,
        name,
        op,
        prescale_factor,
        postscale_factor,
        process_set,
        lambda: list(outputs),
    )


def grouped_allreduce_async_(
    tensors: Sequence[torch.Tensor],
    average: Optional[bool] = None,
    name: Optional[str] = None,
    op: Optional[int] = None,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
    process_set: ProcessSetLike = global_process_set,
) -> int:
    """Like ``grouped_allreduce_async``, but each result overwrites its input."""
    op = _args.resolve_op(op, average)
    targets = _args.input_list(tensors, "grouped_allreduce_async_")
    buffers = [_args.compact(t) for t in targets]

    def finish() -> List[torch.Tensor]:
        _args.copy_back(targets, buffers)
        return list(targets)

    return _enqueue_allreduce(
        buffers, buffers, True, name, op, prescale_factor, postscale_factor, process_set, finish
    )


def grouped_allreduce_(
    tensors: Sequence[torch.Tensor],
    average: Optional[bool] = None,
    name: Optional[str] = None,
    op: Optional[int] = None,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
    process_set: ProcessSetLike = global_process_set,
) -> List[torch.Tensor]:
    """Reduces a list of tensors in place as one unit and returns them."""
    return synchronize(
        grouped_allreduce_async_(tensors, average, name, op, prescale_factor, postscale_factor, process_set)
    )
