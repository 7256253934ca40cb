"""Making model parameters and optimizer state the same on every rank.

Call these once after building the model and optimizer (or after loading a
checkpoint on one rank) so that every rank starts from the root rank's
values::

    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
"""

from collections.abc import Mapping
from typing import Any, Dict, Iterable, List, Optional, Tuple

import torch

from accord import global_process_set

from . import mpi_ops as _ops
from .functions import broadcast_object
from .tensor_agreement import Described, check_same_tensors, describe

__all__ = ["broadcast_parameters", "broadcast_optimizer_state"]


def _broadcast_in_place(
    entries: List[Tuple[Optional[str], torch.Tensor]], root_rank: int, process_set
) -> None:
    """Overwrites every tensor of ``entries`` with the root rank's, in place.

    All broadcasts are submitted before the first is awaited, so the core
    can fuse them.
    """
    submitted = []
    with torch.no_grad():
        for name, tensor in entries:
            target = tensor.detach()
            # The collective needs a contiguous tensor of at least one
            # dimension; other tensors travel through a copy.
            staging = target if target.is_contiguous() else target.contiguous()
            if staging.dim() == 0:
                staging = staging.view(1)
            handle = _ops.broadcast_async_(staging, root_rank, name=name, process_set=process_set)
            submitted.append((handle, target, staging))
        first_error = None
        for handle, target, staging in submitted:
            try:
                _ops.synchronize(handle)
                if staging.data_ptr() != target.data_ptr() or not target.is_contiguous():
                    target.copy_(staging.view(target.shape))
            except Exception as error:  # await the others so that nothing stays in flight
                if first_error is None:
                    first_error = error
        if first_error is not None:
            raise first_error


def broadcast_parameters(params, root_rank: int, process_set=global_process_set) -> None:
    """Overwrites, in place, every rank's tensors with those of ``root_rank``.

    Args:
        params: a ``state_dict()`` (a mapping from names to tensors), or an
            iterable of ``(name, tensor)`` pairs such as
            ``model.named_parameters()``, or of bare tensors (matched by
            position, so every rank must pass them in the same order).
        root_rank: the rank whose values every rank receives.
        process_set: the ranks that take part (default: all).

    Before any broadcast the ranks check, with one small allreduce, that
    they hold the same names with the same dtypes and shapes (unnamed
    tensors: the same dtypes and shapes in the same order). If they do not,
    every rank raises at once, instead of some of them waiting for
    broadcasts that never come.

    Raises:
        ValueError: ``params`` holds something that is not a dense tensor;
            or, on every rank of the set, the ranks' tensors differ: the
            message names the first differing tensors and the ranks that
            hold each version.
    """
    if isinstance(params, Mapping):
        items = list(params.items())
    elif isinstance(params, Iterable) and not isinstance(params, (str, bytes, torch.Tensor)):
        items = [p if isinstance(p, tuple) else (None, p) for p in params]
    else:
        raise ValueError(
            "broadcast_parameters: params must be a state_dict or an iterable of "
            f"(name, tensor) pairs, got {type(params).__name__}"
        )
    entries = []
    described = []
    for position, (name, tensor) in enumerate(items):
        label = name if name is not None else "<unnamed>"
        if not isinstance(tensor, torch.Tensor):
            raise ValueError(
                f"broadcast_parameters: '{label}' is a {type(tensor).__name__}, not a torch.Tensor"
            )
        if tensor.is_sparse:
            raise ValueError(
                f"broadcast_parameters: '{label}' is a sparse tensor; only dense "
                "tensors can be broadcast in place"
            )
        entries.append((None if name is None else f"broadcast_parameters.{name}", tensor))
        described.append(describe(str(name) if name is not None else f"#{position}", tensor))
    check_same_tensors("broadcast_parameters", described, "broadcast_parameters.check", process_set)
    _broadcast_in_place(entries, root_rank, process_set)


class _TensorSpec:
    """What a rank needs to allocate a tensor of the root's optimizer state."""

    __slots__ = ("shape", "dtype", "on_cpu")

    def __init__(self, tensor: torch.Tensor) -> None:
        self.shape = tuple(tensor.shape)
        self.dtype = tensor.dtype
        self.on_cpu = tensor.device.type == "cpu"

    def __getstate__(self):
        return (self.shape, self.dtype, self.on_cpu)

    def __setstate__(self, state):
        self.shape, self.dtype, self.on_cpu = state


# How the root describes a parameter's gradient (see _describe_grads).
_FROZEN = "frozen"  # the root's parameter does not require a gradient: left alone everywhere
_ZEROS = "zeros"  # the root's parameter has no gradient yet: zeros everywhere


def _describe_grads(params: List[torch.Tensor]) -> List[Any]:
    """For each parameter, how every rank's gradient becomes the root's.

    ``_FROZEN`` or ``_ZEROS``; a ``_TensorSpec`` for a dense gradient, which
    travels with the state's tensors; a sparse gradient itself (coalesced),
    sent by value.
    """
    described = []
    for p in params:
        if not p.requires_grad:
            described.append(_FROZEN)
        elif p.grad is None:
            described.append(_ZEROS)
        elif p.grad.is_sparse:
            described.append(p.grad.detach().coalesce())
        else:
            described.append(_TensorSpec(p.grad))
    return described


def _describe(optimizer: torch.optim.Optimizer, params: List[torch.Tensor]) -> Dict[str, Any]:
    """The optimizer's hyper-parameters, the layout of its state and of the gradients.

    Tensors of the state appear as ``_TensorSpec``; they travel separately.
    Other values (step counters, flags, lists, ``None``) are sent as they are.
    """
    index = {p: i for i, p in enumerate(params)}
    groups = []
    for group in optimizer.param_groups:
        options = {key: value for key, value in group.items() if key != "params"}
        groups.append({"options": options})
    state = {}
    for p, values in optimizer.state.items():
        if p not in index or not values:
            continue
        state[index[p]] = {
            key: _TensorSpec(value) if isinstance(value, torch.Tensor) and not value.is_sparse else value
            for key, value in values.items()
        }
    return {"groups": groups, "state": dict(sorted(state.items())), "grads": _describe_grads(params)}


def _described_params(optimizer: torch.optim.Optimizer) -> List[Described]:
    """Each parameter by its place in ``param_groups`` (its name too, where the optimizer knows it)."""
    names = getattr(optimizer, "_parameter_names", None) or {}
    described = []
    for g, group in enumerate(optimizer.param_groups):
        for j, p in enumerate(group["params"]):
            label = f"param_groups[{g}][{j}]"
            if p in names:
                label += f" ({names[p]})"
            described.append(describe(label, p))
    return described


def _receive_grads(
    params: List[torch.Tensor], described: List[Any], entries: List[Tuple[Optional[str], torch.Tensor]]
) -> List[Tuple[torch.Tensor, torch.Tensor]]:
    """Prepares this rank's gradients to become the root's.

    Dense gradients the root has are appended to ``entries`` (to be
    broadcast in place, into this rank's gradient where it fits); every rank
    takes part in those broadcasts, also where its own parameter is frozen.
    Returns the ``(parameter, gradient)`` pairs to assign once they arrived.
    """
    assign = []
    for i, (p, how) in enumerate(zip(params, described)):
        if isinstance(how, _TensorSpec):
            grad = p.grad
            if (
                not p.requires_grad
                or grad is None
                or grad.is_sparse
                or tuple(grad.shape) != how.shape
                or grad.dtype != how.dtype
            ):
                grad = torch.empty(how.shape, dtype=how.dtype, device=p.device)
            entries.append((f"broadcast_optimizer_state.grad.{i}", grad))
        elif isinstance(how, torch.Tensor):
            grad = how.to(p.device)
        elif how == _ZEROS:
            grad = torch.zeros_like(p.detach())
        else:
            continue
        if p.requires_grad:
            assign.append((p, grad))
    return assign


def broadcast_optimizer_state(
    optimizer: torch.optim.Optimizer, root_rank: int, process_set=global_process_set
) -> None:
    """Makes every rank's optimizer state and hyper-parameters equal to the root rank's.

    Scalar hyper-parameters of every parameter group (``lr``, ``momentum``,
    ``betas``, ...) and the per-parameter state (momentum buffers, Adam's
    moments and step counters, ...) are copied from ``root_rank``; tensors
    of the state are broadcast in place where this rank already has one of
    the right shape and type.

    Optimizers create their state lazily, at their first ``step()``. The
    root first sends the layout of its state, so ranks whose state is
    missing (or differs in layout) receive the root's state exactly, and a
    rank has no state for a parameter exactly when the root has none. State
    entries that are not tensors (``None`` momentum buffers, step counters,
    flags) are copied as they are. No step is taken, so the parameters and
    the step counters are untouched.

    Gradients end equal on every rank too: each parameter that requires a
    gradient gets the root's gradient, or zeros where the root has none yet
    (what Horovod's initialising step leaves, so code that reads ``.grad``
    right after finds a tensor). The gradients of frozen parameters
    (``requires_grad=False``) are left as they are, ``None`` normally.
    Call it when no backward pass is in flight.

    Args:
        optimizer: a ``torch.optim.Optimizer`` or a ``DistributedOptimizer``.
        root_rank: the rank whose state every rank receives.
        process_set: the ranks that take part (default: all).

    Raises:
        ValueError: on every rank, when the ranks' parameter groups differ
            in number or in their parameters' dtypes or shapes; the message
            names the first differing parameters and the ranks that hold
            each version.
    """
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise ValueError(
            f"broadcast_optimizer_state: expected a torch.optim.Optimizer, got {type(optimizer).__name__}"
        )
    params = [p for group in optimizer.param_groups for p in group["params"]]
    # Every rank learns whether the ranks' parameters differ, so that all of
    # them raise instead of some waiting for broadcasts that never come.
    check_same_tensors(
        "broadcast_optimizer_state",
        _described_params(optimizer),
        "broadcast_optimizer_state.check",
        process_set,
        by_name=False,
    )
    root = broadcast_object(
        _describe(optimizer, params),
        root_rank=root_rank,
        name="broadcast_optimizer_state.layout",
        process_set=process_set,
    )

    new_state = {}
    entries = []
    for i, values in root["state"].items():
        p = params[i]
        mine = optimizer.state.get(p, {})
        received = {}
        for key, value in values.items():
            if isinstance(value, _TensorSpec):
                tensor = mine.get(key)
                if (
                    not isinstance(tensor, torch.Tensor)
                    or tensor.is_sparse
                    or tuple(tensor.shape) != value.shape
                    or tensor.dtype != value.dtype
                ):
                    device = torch.device("cpu") if value.on_cpu else p.device
                    tensor = torch.empty(value.shape, dtype=value.dtype, device=device)
                entries.append((f"broadcast_optimizer_state.{i}.{key}", tensor))
                received[key] = tensor
            else:
                received[key] = value
        new_state[p] = received
    grads = _receive_grads(params, root["grads"], entries)
    _broadcast_in_place(entries, root_rank, process_set)

    with torch.no_grad():
        for p, grad in grads:
            p.grad = grad
    for group, root_group in zip(optimizer.param_groups, root["groups"]):
        options = root_group["options"]
        for key in [key for key in group if key != "params" and key not in options]:
            del group[key]
        group.update(options)
    for p in params:
        optimizer.state.pop(p, None)
    for p, values in new_state.items():
        optimizer.state[p] = values
