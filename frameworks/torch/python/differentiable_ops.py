"""The differentiable collectives of ``accord.torch``: the blocking ``allreduce``,
``allgather``, ``broadcast``, ``alltoall`` and ``reducescatter`` (and the
grouped forms), with Horovod's names and arguments; ``accord.torch.mpi_ops``
re-exports them.

Each one runs its autograd function (``autograd``) when autograd has to
record the call, and otherwise enqueues the ``_async`` form and waits. This
module is the top of the collectives: it imports ``autograd`` and the
enqueue layer (``allreduce_ops``, ``movement_ops``, ``handles``), and
nothing below imports it.
"""

from typing import Any, List, Optional, Sequence, Tuple, Union

import torch

from accord import global_process_set
from accord.ops import Average

from . import autograd as _autograd
from . import tensor_args as _args
from .allreduce_ops import allreduce_async, allreduce_fast, grouped_allreduce_async
from .compression import Compression
from .handles import synchronize
from .movement_ops import (
    allgather_async,
    alltoall_async,
    broadcast_async,
    grouped_allgather_async,
    grouped_reducescatter_async,
    reducescatter_async,
)
from .tensor_args import ProcessSetLike

__all__ = [
    "allreduce",
    "grouped_allreduce",
    "allgather",
    "grouped_allgather",
    "broadcast",
    "alltoall",
    "reducescatter",
    "grouped_reducescatter",
]

_NO_COMPRESSION = Compression.none

# ---------------------------------------------------------------- allreduce


def allreduce(
    tensor: torch.Tensor,
    average: Optional[bool] = None,
    name: Optional[str] = None,
    compression=Compression.none,
    op: Optional[int] = None,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
    process_set: ProcessSetLike = global_process_set,
) -> torch.Tensor:
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
        entry = allreduce_fast(
            tensor, False, True, average, name, op, prescale_factor, postscale_factor, process_set
        )
        if entry is not None:
            entry[0].wait()
            return entry[1]
    op = _args.resolve_op(op, average)
    _args.check_tensor(tensor, "allreduce")
    sent, ctx = compression.compress(tensor)
    if _autograd.needs_grad(sent):
        reduced = _autograd.AllreduceFunction.apply(
            sent, name, op, prescale_factor, postscale_factor, process_set
        )
    else:
        reduced = synchronize(
            allreduce_async(sent, None, name, op, prescale_factor, postscale_factor, process_set)
        )
    return compression.decompress(reduced, ctx)


def grouped_allreduce(
    tensors: Sequence[torch.Tensor],
    average: Optional[bool] = None,
    name: Optional[str] = None,
    compression=Compression.none,
    op: Optional[int] = None,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
    process_set: ProcessSetLike = global_process_set,
) -> List[torch.Tensor]:
    """Reduces a list of tensors as one unit and returns the results (differentiable)."""
    op = _args.resolve_op(op, average)
    tensors = _args.input_list(tensors, "grouped_allreduce")
    compressed = [compression.compress(t) for t in tensors]
    sent = [c[0] for c in compressed]
    if _autograd.needs_grad(*sent):
        reduced = _autograd.GroupedAllreduceFunction.apply(
            name, op, prescale_factor, postscale_factor, process_set, *sent
        )
    else:
        reduced = synchronize(
            grouped_allreduce_async(sent, None, name, op, prescale_factor, postscale_factor, process_set)
        )
    return [compression.decompress(r, c[1]) for r, c in zip(reduced, compressed)]


# ---------------------------------------------------------------- allgather


def allgather(
    tensor: torch.Tensor, name: Optional[str] = None, process_set: ProcessSetLike = global_process_set
) -> torch.Tensor:
    """Concatenates every rank's ``tensor`` along dimension 0 (differentiable).

    The gradient of a rank's input is the Average over ranks of the output
    gradients, sliced to the rows that came from this rank (Horovod's rule;
    see autograd.py).
    """
    _args.check_tensor(tensor, "allgather")
    if _autograd.needs_grad(tensor):
        return _autograd.AllgatherFunction.apply(tensor, name, process_set)
    return synchronize(allgather_async(tensor, name, process_set))


def grouped_allgather(
    tensors: Sequence[torch.Tensor],
    name: Optional[str] = None,
    process_set: ProcessSetLike = global_process_set,
) -> List[torch.Tensor]:
    """Allgathers a list of tensors as one unit (differentiable)."""
    tensors = _args.input_list(tensors, "grouped_allgather")
    if _autograd.needs_grad(*tensors):
        return list(_autograd.GroupedAllgatherFunction.apply(name, process_set, *tensors))
    return synchronize(grouped_allgather_async(tensors, name, process_set))


# ---------------------------------------------------------------- broadcast


def broadcast(
    tensor: torch.Tensor,
    root_rank: int,
    name: Optional[str] = None,
    process_set: ProcessSetLike = global_process_set,
) -> torch.Tensor:
    """Returns ``root_rank``'s ``tensor`` on every rank of the set (differentiable).

    The gradient of the root's input is the Average over ranks of the output
    gradients; other ranks' inputs get it multiplied by zero (Horovod's rule).
    """
    _args.check_tensor(tensor, "broadcast")
    if _autograd.needs_grad(tensor):
        return _autograd.BroadcastFunction.apply(tensor, root_rank, name, process_set)
    return synchronize(broadcast_async(tensor, root_rank, name, process_set))


# ----------------------------------------------------------------- alltoall


def alltoall(
    tensor: torch.Tensor,
    splits: Any = None,
    name: Optional[str] = None,
    process_set: ProcessSetLike = global_process_set,
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


def reducescatter(
    tensor: torch.Tensor,
    name: Optional[str] = None,
    compression=Compression.none,
    op: int = Average,
    process_set: ProcessSetLike = global_process_set,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
) -> torch.Tensor:
    """Reduces ``tensor`` across ranks and returns this rank's block of rows (differentiable).

    The gradient of the input is the allgather of the output gradients,
    multiplied by the scale factors, and by the set's size for Sum
    (Horovod's rule; see autograd.py).
    """
    op = _args.reducescatter_op(op, "reducescatter")
    _args.check_tensor(tensor, "reducescatter")
    sent, ctx = compression.compress(tensor)
    if _autograd.needs_grad(sent):
        reduced = _autograd.ReducescatterFunction.apply(
            sent, name, op, prescale_factor, postscale_factor, process_set
        )
    else:
        reduced = synchronize(
            reducescatter_async(sent, name, op, process_set, prescale_factor, postscale_factor)
        )
    return compression.decompress(reduced, ctx)


def grouped_reducescatter(
    tensors: Sequence[torch.Tensor],
    name: Optional[str] = None,
    compression=Compression.none,
    op: int = Average,
    process_set: ProcessSetLike = global_process_set,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
) -> List[torch.Tensor]:
    """Reducescatters a list of tensors as one unit (differentiable)."""
    op = _args.reducescatter_op(op, "grouped_reducescatter")
    tensors = _args.input_list(tensors, "grouped_reducescatter")
    compressed = [compression.compress(t) for t in tensors]
    sent = [c[0] for c in compressed]
    if _autograd.needs_grad(*sent):
        reduced = _autograd.GroupedReducescatterFunction.apply(
            name, op, prescale_factor, postscale_factor, process_set, *sent
        )
    else:
        reduced = synchronize(
            grouped_reducescatter_async(sent, name, op, process_set, prescale_factor, postscale_factor)
        )
    return [compression.decompress(r, c[1]) for r, c in zip(reduced, compressed)]
