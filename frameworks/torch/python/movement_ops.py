"""The enqueue layer of the collectives that move or scatter data: allgather,
broadcast, alltoall and reducescatter in their ``_async`` and grouped forms,
and the in-place ``broadcast_``, with Horovod's names and arguments;
``accord.torch.mpi_ops`` re-exports them. The differentiable blocking forms
sit above ``autograd`` in ``differentiable_ops``.

Outputs the core sizes (allgather, alltoall, reducescatter) come back as
torch tensors without a copy: through DLPack for CPU tensors, allocated by
torch on the producer's stream for CUDA tensors (``tensor_args``).
"""

from typing import Any, Callable, List, Optional, Sequence, Tuple

import torch

from accord import _core, global_process_set
from accord.ops import Average, core_op

from . import tensor_args as _args
from .handles import register as _register
from .handles import synchronize
from .tensor_args import ProcessSetLike

__all__ = [
    "allgather_async",
    "grouped_allgather_async",
    "broadcast_",
    "broadcast_async",
    "broadcast_async_",
    "alltoall_async",
    "reducescatter_async",
    "grouped_reducescatter_async",
]

# ---------------------------------------------------------------- allgather


def allgather_async(
    tensor: torch.Tensor, name: Optional[str] = None, process_set: ProcessSetLike = global_process_set
) -> int:
    """Starts concatenating every rank's ``tensor`` along dimension 0.

    Dimension 0 may differ across ranks; the other dimensions must agree.
    ``synchronize`` returns the concatenation, in rank order of the set.
    """
    source = _args.compact(_args.check_tensor(tensor, "allgather_async"))
    exported, override = _args.exported(source)
    core_handle = _core.allgather_async(
        exported,
        name=_args.name_arg(name),
        process_set=_args.set_id(process_set),
        dtype_override=override,
        stream=_args.stream_of(source),
        allocate=_args.cuda_allocator(source),
    )
    return _register(
        [core_handle], (source, exported), lambda: _args.imported(core_handle.outputs()[0], override)
    )


def grouped_allgather_async(
    tensors: Sequence[torch.Tensor],
    name: Optional[str] = None,
    process_set: ProcessSetLike = global_process_set,
) -> int:
    """Starts allgathering a list of tensors as one unit; ``synchronize`` returns a list."""
    sources = [_args.compact(t) for t in _args.input_list(tensors, "grouped_allgather_async")]
    is_bool = [s.dtype == torch.bool for s in sources]
    # One dtype override per member: a bool member travels as a uint8 view
    # that the core treats as bool, so it still differs from a uint8 one.
    exported = [_args.exported(s)[0] for s in sources]
    core_handle = _core.grouped_allgather_async(
        exported,
        name=_args.name_arg(name),
        process_set=_args.set_id(process_set),
        dtype_override=["bool" if b else None for b in is_bool],
        stream=_args.stream_of(sources[0]),
        allocate=_args.cuda_allocator(sources[0]),
    )

    def finish() -> List[torch.Tensor]:
        return [_args.imported(o, "bool" if b else None) for o, b in zip(core_handle.outputs(), is_bool)]

    return _register([core_handle], (sources, exported), finish)


# ---------------------------------------------------------------- broadcast


def _enqueue_broadcast(
    source: torch.Tensor,
    output: torch.Tensor,
    root_rank: int,
    name: Optional[str],
    process_set: ProcessSetLike,
    finish: Callable[[], Any],
) -> int:
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
    core_handle = _core.broadcast_async(
        exported,
        out,
        root_in_set,
        name=_args.name_arg(name),
        process_set=set_id,
        dtype_override=override,
        stream=_args.stream_of(source),
    )
    return _register([core_handle], (source, output, exported, out), finish, results_known=True)


def broadcast_async(
    tensor: torch.Tensor,
    root_rank: int,
    name: Optional[str] = None,
    process_set: ProcessSetLike = global_process_set,
) -> int:
    """Starts copying ``root_rank``'s ``tensor`` to every rank of the set.

    ``root_rank`` is a global rank. ``synchronize`` returns a new tensor
    holding the root's values; ``tensor`` is not modified.
    """
    source = _args.compact(_args.check_tensor(tensor, "broadcast_async"))
    output = torch.empty_like(source, memory_format=torch.contiguous_format)
    return _enqueue_broadcast(source, output, root_rank, name, process_set, lambda: output)


def broadcast_async_(
    tensor: torch.Tensor,
    root_rank: int,
    name: Optional[str] = None,
    process_set: ProcessSetLike = global_process_set,
) -> int:
    """Like ``broadcast_async``, but the root's values overwrite ``tensor``."""
    _args.check_tensor(tensor, "broadcast_async_")
    buffer = _args.compact(tensor)

    def finish() -> torch.Tensor:
        _args.copy_back([tensor], [buffer])
        return tensor

    return _enqueue_broadcast(buffer, buffer, root_rank, name, process_set, finish)


def broadcast_(
    tensor: torch.Tensor,
    root_rank: int,
    name: Optional[str] = None,
    process_set: ProcessSetLike = global_process_set,
) -> torch.Tensor:
    """Overwrites ``tensor`` with ``root_rank``'s values and returns it (not differentiable)."""
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


# ----------------------------------------------------------------- alltoall


def alltoall_async(
    tensor: torch.Tensor,
    splits: Any = None,
    name: Optional[str] = None,
    process_set: ProcessSetLike = global_process_set,
) -> int:
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
    core_handle = _core.alltoall_async(
        exported,
        split_list,
        name=_args.name_arg(name),
        process_set=_args.set_id(process_set),
        dtype_override=override,
        stream=_args.stream_of(source),
        allocate=_args.cuda_allocator(source),
    )

    def finish() -> Tuple[torch.Tensor, torch.Tensor]:
        output = _args.imported(core_handle.outputs()[0], override)
        received = torch.tensor(list(core_handle.received_splits()), dtype=torch.int32)
        return output, received

    return _register([core_handle], (source, exported), finish)


# ------------------------------------------------------------ reducescatter


def reducescatter_async(
    tensor: torch.Tensor,
    name: Optional[str] = None,
    op: int = Average,
    process_set: ProcessSetLike = global_process_set,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
) -> int:
    """Starts reducing ``tensor`` across ranks and scattering the result along dimension 0.

    Rank ``i`` of the set receives the ``i``-th block of rows; dimension 0 is
    split as evenly as possible, the first ``rows % set_size`` ranks getting
    one row more. ``op`` is ``Average`` (default) or ``Sum``.
    """
    op = _args.reducescatter_op(op, "reducescatter_async")
    source = _args.compact(_args.check_tensor(tensor, "reducescatter_async"))
    exported, override = _args.exported(source)
    core_handle = _core.reducescatter_async(
        exported,
        name=_args.name_arg(name),
        op=core_op(op),
        prescale_factor=float(prescale_factor),
        postscale_factor=float(postscale_factor),
        process_set=_args.set_id(process_set),
        dtype_override=override,
        stream=_args.stream_of(source),
        allocate=_args.cuda_allocator(source),
    )
    return _register(
        [core_handle], (source, exported), lambda: _args.imported(core_handle.outputs()[0], override)
    )


def grouped_reducescatter_async(
    tensors: Sequence[torch.Tensor],
    name: Optional[str] = None,
    op: int = Average,
    process_set: ProcessSetLike = global_process_set,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
) -> int:
    """Starts a reducescatter of a list of tensors as one unit; ``synchronize`` returns a list."""
    op = _args.reducescatter_op(op, "grouped_reducescatter_async")
    sources = [_args.compact(t) for t in _args.input_list(tensors, "grouped_reducescatter_async")]
    override = _args.group_override(sources, "grouped_reducescatter_async")
    exported = [_args.exported(s)[0] for s in sources]
    core_handle = _core.grouped_reducescatter_async(
        exported,
        name=_args.name_arg(name),
        op=core_op(op),
        prescale_factor=float(prescale_factor),
        postscale_factor=float(postscale_factor),
        process_set=_args.set_id(process_set),
        dtype_override=override,
        stream=_args.stream_of(sources[0]),
        allocate=_args.cuda_allocator(sources[0]),
    )
    return _register(
        [core_handle],
        (sources, exported),
        lambda: [_args.imported(o, override) for o in core_handle.outputs()],
    )
