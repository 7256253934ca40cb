"""``DistributedOptimizer``: data-parallel training by wrapping a torch optimizer.

Every rank runs the same model on its own share of the data. With
``op=Average`` (or ``Sum``) the wrapped optimizer starts an allreduce of
each parameter's gradient the moment backward has produced it, so
communication overlaps the rest of backward; ``step()`` waits for those
allreduces and then applies the wrapped optimizer's update to the reduced
gradients, so every rank takes the same step (``gradient_reduction``). With
``op=Adasum`` every rank steps locally and the parameter deltas are combined
by Adasum (``adasum_optimizer``). Both build on ``gradient_hooks`` (hooks,
counting of backward passes) and ``optimizer_names`` (names, groups).

``broadcast_parameters`` and ``broadcast_optimizer_state`` live in
``functions_state`` and are re-exported here, where Horovod has them.
"""

import warnings
from typing import Dict, Iterable, Optional, Sequence, Tuple, Union

import torch

from accord import global_process_set
from accord.ops import Adasum, Average, Sum, core_op

from .adasum_optimizer import AdasumDeltaMixin
from .compression import Compression
from .functions_state import broadcast_optimizer_state, broadcast_parameters
from .gradient_hooks import HookedOptimizerMixin
from .gradient_reduction import GradientReductionMixin

__all__ = ["DistributedOptimizer", "broadcast_parameters", "broadcast_optimizer_state"]

_CLASS_CACHE: Dict[Tuple[type, type], type] = {}


def _distributed_class(cls: type, mode: type) -> type:
    """The subclass of ``cls`` with the methods of ``mode`` (one per pair, so isinstance holds)."""
    dist_cls = _CLASS_CACHE.get((cls, mode))
    if dist_cls is None:
        dist_cls = type(
            cls.__name__,
            (mode, cls),
            {
                "__doc__": f"{cls.__name__} whose updates are combined across ranks "
                "(made by accord.torch.DistributedOptimizer).",
                "__module__": __name__,
            },
        )
        _CLASS_CACHE[(cls, mode)] = dist_cls
    return dist_cls


def _check_arguments(optimizer, compression, backward_passes_per_step, op, gradient_predivide_factor) -> None:
    if isinstance(optimizer, HookedOptimizerMixin):
        raise ValueError("DistributedOptimizer: the optimizer is already a DistributedOptimizer")
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise ValueError(
            f"DistributedOptimizer: expected a torch.optim.Optimizer, got {type(optimizer).__name__}"
        )
    if op not in (Average, Sum, Adasum):
        raise ValueError(f"DistributedOptimizer: op must be Average, Sum or Adasum, got {op!r}")
    if op == Adasum:
        core_op(op)  # NotImplementedError where the core has no Adasum
    if not isinstance(backward_passes_per_step, int) or backward_passes_per_step < 1:
        raise ValueError(
            "DistributedOptimizer: backward_passes_per_step must be a positive "
            f"integer, got {backward_passes_per_step!r}"
        )
    if gradient_predivide_factor != 1.0:
        if op != Average:
            raise ValueError(
                "DistributedOptimizer: gradient_predivide_factor is only supported with op=Average"
            )
        if not gradient_predivide_factor > 0:
            raise ValueError(
                "DistributedOptimizer: gradient_predivide_factor must be "
                f"positive, got {gradient_predivide_factor!r}"
            )
    if not (hasattr(compression, "compress") and hasattr(compression, "decompress")):
        raise ValueError(
            "DistributedOptimizer: compression must have compress() and "
            f"decompress(), e.g. Compression.none or Compression.fp16; got "
            f"{compression!r}"
        )


def DistributedOptimizer(
    optimizer: torch.optim.Optimizer,
    named_parameters: Optional[Iterable[Tuple[str, torch.Tensor]]] = None,
    compression=Compression.none,
    backward_passes_per_step: int = 1,
    op=Average,
    gradient_predivide_factor: float = 1.0,
    num_groups: int = 0,
    groups: Optional[Union[int, Sequence[Sequence[torch.Tensor]]]] = None,
    sparse_as_dense: bool = False,
    process_set=global_process_set,
) -> torch.optim.Optimizer:
    """Wraps ``optimizer`` so that its gradients are reduced across the ranks.

    The returned object is an instance of a subclass of ``optimizer``'s
    class that shares its parameter groups, state and defaults, so
    ``isinstance`` checks, ``state_dict()`` and learning-rate schedulers
    keep working. A hook on every parameter starts the allreduce of its
    gradient as soon as backward has produced it; ``step()`` waits for all
    of them and then takes the wrapped optimizer's step. With
    ``op=Adasum``, ``step()`` instead steps locally and combines the
    parameter deltas of all ranks by Adasum (see ``adasum_optimizer``).

    The object maps every parameter to its name in ``_parameter_names``,
    as Horovod's does.

    Args:
        optimizer: the optimizer to wrap.
        named_parameters: ``(name, parameter)`` pairs, e.g.
            ``model.named_parameters()``. Names identify the reductions, so
            ranks match gradients by name; they must be unique and name
            every parameter of the optimizer (more are allowed). Without
            it, the parameter at index ``j`` of parameter group ``i`` is
            named ``allreduce.noname.<i>.<j>``.
        compression: ``Compression.none`` or ``Compression.fp16`` (reduce in
            float16 and cast back).
        backward_passes_per_step: backward passes accumulated locally before
            the accumulated gradient is reduced (once per ``step()``).
        op: ``Average`` (default) or ``Sum`` of the gradients across the
            ranks, or ``Adasum`` of the parameter deltas (CPU parameters of
            a floating dtype, a power-of-two number of ranks).
        gradient_predivide_factor: with ``Average``, gradients are divided
            by this factor before the sum and by ``size / factor`` after it.
        num_groups: deprecated spelling of ``groups=<int>``, kept for
            scripts written for Horovod.
        groups: an int (split the parameters into that many groups, in
            parameter order) or a list of lists of parameters; each group is
            reduced by one grouped allreduce once all its gradients are
            ready. Parameters in no group are reduced one by one.
        sparse_as_dense: reduce sparse gradients as dense tensors instead of
            allgathering their indices and values; the optimizer still gets
            them back sparse.
        process_set: the ranks that train together (default: all).

    Raises:
        ValueError: duplicate names, parameters left unnamed by
            ``named_parameters``, an unsupported ``op``, malformed ``groups``
            or other bad arguments.
        NotImplementedError: ``op=Adasum`` where the core has no Adasum.
    """
    _check_arguments(optimizer, compression, backward_passes_per_step, op, gradient_predivide_factor)
    if num_groups:
        if groups is not None:
            raise ValueError(
                "DistributedOptimizer: pass either groups or the deprecated num_groups, not both"
            )
        warnings.warn(
            "DistributedOptimizer: num_groups is deprecated; use groups=<int>",
            DeprecationWarning,
            stacklevel=2,
        )
        groups = num_groups
    mode = AdasumDeltaMixin if op == Adasum else GradientReductionMixin
    dist_cls = _distributed_class(type(optimizer), mode)
    wrapped = dist_cls.__new__(dist_cls)
    # Share the wrapped optimizer's attributes (parameter groups, state,
    # defaults, hooks) rather than constructing anew, so nothing the
    # optimizer set up is lost and a scheduler attached to either object
    # drives both.
    wrapped.__dict__.update(optimizer.__dict__)
    wrapped._init_hooks(named_parameters, backward_passes_per_step, groups, process_set)
    if op == Adasum:
        wrapped._init_adasum(compression, sparse_as_dense)
    else:
        wrapped._init_reduction(compression, op, gradient_predivide_factor, sparse_as_dense)
    return wrapped
