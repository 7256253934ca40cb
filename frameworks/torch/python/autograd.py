"""Autograd functions behind the differentiable collectives of ``accord.torch``.

The gradients follow Horovod's conventions, which models that differentiate
through collectives rely on (``process_set`` and the grouped forms
included; ``size`` is the process set's size):

* allreduce (Sum, Average): the same reduction, with the same scale factors,
  of the output gradients.
* allreduce (Min, Max, Product): the exact elementwise gradient of the sum
  of every rank's loss. Every rank's input is allgathered and the reduction
  differentiated locally, so ties of Min and Max share the gradient evenly
  (as ``torch.amax`` does) and a Product with zeros is handled. (Horovod has
  no gradient for these ops.)
* allgather: the Average-allreduce of the output gradients, sliced to the
  rows this rank contributed.
* broadcast: the Average-allreduce of the output gradients on the root,
  multiplied by 0 on every other rank.
* alltoall: an alltoall of the output gradient back, with the received
  splits as the splits.
* reducescatter: the allgather of the output gradients, times ``size`` for
  Sum (not for Average), times the prescale and postscale factors.

Collectives issued in ``backward`` are unnamed, so every rank must run its
backward passes in the same order (as it runs its forward passes). They go
through the functions of this module, so a higher-order gradient
(``create_graph=True``) differentiates them in turn.

This module sits on the enqueue layer (``allreduce_ops``, ``movement_ops``,
``handles``) and below the blocking collectives (``differentiable_ops``),
which call these functions when autograd has to record a call.
"""

from typing import Any, List, Optional, Sequence, Tuple

import torch

from accord.ops import Average, Max, Min, Sum

from . import allreduce_ops as _allreduce
from . import movement_ops as _movement
from . import tensor_args as _args
from .basics import rank
from .handles import synchronize


def needs_grad(*tensors: torch.Tensor) -> bool:
    """Whether autograd has to record a collective applied to ``tensors``."""
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def _scaled(tensor: torch.Tensor, factor: float) -> torch.Tensor:
    return tensor if factor == 1.0 else tensor * factor


# The collectives that ``backward`` issues. Like the blocking forms in
# ``differentiable_ops`` (above this module), each runs its autograd function
# when autograd has to record it (a higher-order gradient) and otherwise
# enqueues and waits.


def _reduce_grad(
    grad: torch.Tensor, op: int, prescale_factor: float, postscale_factor: float, process_set: Any
) -> torch.Tensor:
    if needs_grad(grad):
        return AllreduceFunction.apply(grad, None, op, prescale_factor, postscale_factor, process_set)
    return synchronize(
        _allreduce.allreduce_async(
            grad,
            op=op,
            prescale_factor=prescale_factor,
            postscale_factor=postscale_factor,
            process_set=process_set,
        )
    )


def _reduce_grads(
    grads: Sequence[torch.Tensor], op: int, prescale_factor: float, postscale_factor: float, process_set: Any
) -> List[torch.Tensor]:
    if needs_grad(*grads):
        return list(
            GroupedAllreduceFunction.apply(None, op, prescale_factor, postscale_factor, process_set, *grads)
        )
    return synchronize(
        _allreduce.grouped_allreduce_async(
            list(grads),
            op=op,
            prescale_factor=prescale_factor,
            postscale_factor=postscale_factor,
            process_set=process_set,
        )
    )


def _gather_grads(grads: Sequence[torch.Tensor], process_set: Any) -> List[torch.Tensor]:
    if needs_grad(*grads):
        return list(GroupedAllgatherFunction.apply(None, process_set, *grads))
    return synchronize(_movement.grouped_allgather_async(list(grads), process_set=process_set))


# ---------------------------------------------------------------- allreduce


def _elementwise_reduction_grads(
    inputs: Sequence[torch.Tensor],
    grads: Sequence[torch.Tensor],
    op: int,
    prescale_factor: float,
    postscale_factor: float,
    process_set: Any,
) -> List[torch.Tensor]:
    """Exact gradients of Min/Max/Product allreduces of ``inputs``.

    Allgathers every rank's inputs and sums the output gradients across
    ranks, then differentiates ``post * reduce_r(pre * x_r)`` locally in
    float64 and keeps this rank's slice.
    """
    stacked = [t.detach().unsqueeze(0) for t in inputs]
    gathered_handle = _movement.grouped_allgather_async(stacked, process_set=process_set)
    summed_handle = _allreduce.grouped_allreduce_async(
        [g.contiguous() for g in grads], op=Sum, process_set=process_set
    )
    gathered = synchronize(gathered_handle)
    summed = synchronize(summed_handle)
    me = _args.set_rank(process_set)
    result = []
    for rows, grad_sum, grad in zip(gathered, summed, grads):
        with torch.enable_grad():
            every = rows.to(torch.float64).requires_grad_(True)
            scaled = every * prescale_factor
            if op == Min:
                reduced = torch.amin(scaled, dim=0)
            elif op == Max:
                reduced = torch.amax(scaled, dim=0)
            else:
                reduced = torch.prod(scaled, dim=0)
            reduced = reduced * postscale_factor
            (grad_every,) = torch.autograd.grad(reduced, every, grad_sum.to(torch.float64))
        result.append(grad_every[me].to(grad.dtype))
    return result


def _allreduce_grads(ctx: Any, grads: Sequence[torch.Tensor]) -> List[torch.Tensor]:
    if ctx.op in (Sum, Average):
        return _reduce_grads(grads, ctx.op, ctx.prescale_factor, ctx.postscale_factor, ctx.process_set)
    return _elementwise_reduction_grads(
        ctx.saved_tensors, grads, ctx.op, ctx.prescale_factor, ctx.postscale_factor, ctx.process_set
    )


def _save_allreduce(
    ctx: Any,
    tensors: Sequence[torch.Tensor],
    op: int,
    prescale_factor: float,
    postscale_factor: float,
    process_set: Any,
) -> None:
    ctx.op = op
    ctx.prescale_factor = prescale_factor
    ctx.postscale_factor = postscale_factor
    ctx.process_set = process_set
    if op not in (Sum, Average):
        ctx.save_for_backward(*tensors)


class AllreduceFunction(torch.autograd.Function):
    """allreduce(tensor) with the gradient described in the module docstring."""

    @staticmethod
    def forward(
        ctx: Any,
        tensor: torch.Tensor,
        name: Optional[str],
        op: int,
        prescale_factor: float,
        postscale_factor: float,
        process_set: Any,
    ) -> torch.Tensor:
        _save_allreduce(ctx, [tensor], op, prescale_factor, postscale_factor, process_set)
        return synchronize(
            _allreduce.allreduce_async(
                tensor,
                name=name,
                op=op,
                prescale_factor=prescale_factor,
                postscale_factor=postscale_factor,
                process_set=process_set,
            )
        )

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Tuple:
        if ctx.op in (Sum, Average):
            grad_input = _reduce_grad(
                grad.contiguous(), ctx.op, ctx.prescale_factor, ctx.postscale_factor, ctx.process_set
            )
        else:
            grad_input = _allreduce_grads(ctx, [grad])[0]
        return grad_input, None, None, None, None, None


class GroupedAllreduceFunction(torch.autograd.Function):
    """grouped_allreduce(*tensors); each member's gradient as for allreduce."""

    @staticmethod
    def forward(
        ctx: Any,
        name: Optional[str],
        op: int,
        prescale_factor: float,
        postscale_factor: float,
        process_set: Any,
        *tensors: torch.Tensor,
    ) -> Tuple[torch.Tensor, ...]:
        _save_allreduce(ctx, tensors, op, prescale_factor, postscale_factor, process_set)
        return tuple(
            synchronize(
                _allreduce.grouped_allreduce_async(
                    list(tensors),
                    name=name,
                    op=op,
                    prescale_factor=prescale_factor,
                    postscale_factor=postscale_factor,
                    process_set=process_set,
                )
            )
        )

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> Tuple:
        return (None,) * 5 + tuple(_allreduce_grads(ctx, grads))


# ---------------------------------------------------------------- allgather


def _rows(tensor: torch.Tensor) -> int:
    return tensor.shape[0] if tensor.dim() > 0 else 1


def _allgather_grads(ctx: Any, grads: Sequence[torch.Tensor]) -> List[torch.Tensor]:
    """Averages the output gradients over ranks and slices out this rank's rows."""
    rows_handle = _movement.allgather_async(
        torch.tensor(ctx.rows, dtype=torch.int64), process_set=ctx.process_set
    )
    averaged = _reduce_grads([g.contiguous() for g in grads], Average, 1.0, 1.0, ctx.process_set)
    # One row per rank, one column per tensor of the group.
    rows = synchronize(rows_handle).view(-1, len(ctx.rows))
    me = _args.set_rank(ctx.process_set)
    offsets = rows[:me].sum(dim=0).tolist()
    return [
        a.narrow(0, offset, count).reshape(shape)
        for a, offset, count, shape in zip(averaged, offsets, ctx.rows, ctx.shapes)
    ]


class AllgatherFunction(torch.autograd.Function):
    """allgather(tensor) with the gradient described in the module docstring."""

    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, name: Optional[str], process_set: Any) -> torch.Tensor:
        ctx.rows = [_rows(tensor)]
        ctx.shapes = [tensor.shape]
        ctx.process_set = process_set
        return synchronize(_movement.allgather_async(tensor, name=name, process_set=process_set))

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Tuple:
        return _allgather_grads(ctx, [grad])[0], None, None


class GroupedAllgatherFunction(torch.autograd.Function):
    """grouped_allgather(*tensors); each member's gradient as for allgather."""

    @staticmethod
    def forward(
        ctx: Any, name: Optional[str], process_set: Any, *tensors: torch.Tensor
    ) -> Tuple[torch.Tensor, ...]:
        ctx.rows = [_rows(t) for t in tensors]
        ctx.shapes = [t.shape for t in tensors]
        ctx.process_set = process_set
        return tuple(
            synchronize(_movement.grouped_allgather_async(list(tensors), name=name, process_set=process_set))
        )

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> Tuple:
        return (None, None) + tuple(_allgather_grads(ctx, grads))


# ---------------------------------------------------------------- broadcast


class BroadcastFunction(torch.autograd.Function):
    """broadcast(tensor, root_rank) with the gradient described in the module docstring."""

    @staticmethod
    def forward(
        ctx: Any, tensor: torch.Tensor, root_rank: int, name: Optional[str], process_set: Any
    ) -> torch.Tensor:
        ctx.root_rank = root_rank
        ctx.process_set = process_set
        return synchronize(_movement.broadcast_async(tensor, root_rank, name=name, process_set=process_set))

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Tuple:
        averaged = _reduce_grad(grad.contiguous(), Average, 1.0, 1.0, ctx.process_set)
        if rank() != ctx.root_rank:
            # Multiplied rather than replaced by zeros, as in Horovod: a
            # non-finite gradient stays visible on every rank.
            averaged = averaged * 0
        return averaged, None, None, None


# ----------------------------------------------------------------- alltoall


class AlltoallFunction(torch.autograd.Function):
    """alltoall(tensor, splits) -> (output, received_splits); the splits are not differentiable."""

    @staticmethod
    def forward(
        ctx: Any, tensor: torch.Tensor, splits: Any, name: Optional[str], process_set: Any
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        output, received = synchronize(
            _movement.alltoall_async(tensor, splits, name=name, process_set=process_set)
        )
        ctx.received = received
        ctx.process_set = process_set
        ctx.mark_non_differentiable(received)
        return output, received

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor, unused_splits_grad: Any) -> Tuple:
        grad_input, _ = synchronize(
            _movement.alltoall_async(grad.contiguous(), ctx.received, process_set=ctx.process_set)
        )
        return grad_input, None, None, None


# ------------------------------------------------------------ reducescatter


def _reducescatter_grads(ctx: Any, grads: Sequence[torch.Tensor]) -> List[torch.Tensor]:
    factor = ctx.prescale_factor * ctx.postscale_factor
    if ctx.op == Sum:
        factor *= _args.set_size(ctx.process_set)
    gathered = _gather_grads([g.contiguous() for g in grads], ctx.process_set)
    return [_scaled(g, factor) for g in gathered]


class ReducescatterFunction(torch.autograd.Function):
    """reducescatter(tensor) with the gradient described in the module docstring."""

    @staticmethod
    def forward(
        ctx: Any,
        tensor: torch.Tensor,
        name: Optional[str],
        op: int,
        prescale_factor: float,
        postscale_factor: float,
        process_set: Any,
    ) -> torch.Tensor:
        _save_allreduce(ctx, [], op, prescale_factor, postscale_factor, process_set)
        return synchronize(
            _movement.reducescatter_async(
                tensor,
                name=name,
                op=op,
                process_set=process_set,
                prescale_factor=prescale_factor,
                postscale_factor=postscale_factor,
            )
        )

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Tuple:
        return _reducescatter_grads(ctx, [grad])[0], None, None, None, None, None


class GroupedReducescatterFunction(torch.autograd.Function):
    """grouped_reducescatter(*tensors); each member's gradient as for reducescatter."""

    @staticmethod
    def forward(
        ctx: Any,
        name: Optional[str],
        op: int,
        prescale_factor: float,
        postscale_factor: float,
        process_set: Any,
        *tensors: torch.Tensor,
    ) -> Tuple[torch.Tensor, ...]:
        _save_allreduce(ctx, [], op, prescale_factor, postscale_factor, process_set)
        return tuple(
            synchronize(
                _movement.grouped_reducescatter_async(
                    list(tensors),
                    name=name,
                    op=op,
                    process_set=process_set,
                    prescale_factor=prescale_factor,
                    postscale_factor=postscale_factor,
                )
            )
        )

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> Tuple:
        return (None,) * 5 + tuple(_reducescatter_grads(ctx, grads))
