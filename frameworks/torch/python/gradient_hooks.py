"""The gradient hooks that ``DistributedOptimizer`` puts on every parameter.

A hook runs each time backward has accumulated a new gradient into a
parameter's ``.grad``. It counts the backward passes since the last step
and, on the ``backward_passes_per_step``-th, tells the optimizer that the
parameter's gradient is final (``_gradient_ready``), so its reduction can
start while backward goes on with the rest of the model. What the optimizer
then does is up to the mode that derives from ``HookedOptimizerMixin``:
``gradient_reduction`` (Average, Sum) or ``adasum_optimizer`` (Adasum).

Hooks run on the thread that runs backward; the optimizer is not meant to
be used from several threads at once (as no torch optimizer is).
"""

import weakref
from typing import Dict, List, Sequence

import torch

from .optimizer_names import parameter_groups, parameter_names

__all__ = ["HookedOptimizerMixin", "set_included"]

# Whether parameters offer a hook that runs after their .grad was accumulated
# (torch >= 2.1); older versions hook the parameter's AccumulateGrad node.
_HAS_POST_ACCUMULATE_HOOK = hasattr(torch.Tensor, "register_post_accumulate_grad_hook")


def set_included(process_set) -> bool:
    """Whether this rank belongs to ``process_set``.

    A set that is not registered yet counts as including it, so that its
    collectives report the problem instead of training silently alone.
    """
    included = getattr(process_set, "included", None)
    return included is None or included() is not False


class HookedOptimizerMixin:
    """Parameter names, reduction groups, hooks and the count of backward passes.

    Derived modes implement ``_gradient_ready(p)``, called once per step
    for each parameter whose gradient is final, and ``_busy()``, whether
    gradients are waiting to be reduced (``zero_grad`` then refuses).
    """

    def _init_hooks(self, named_parameters, backward_passes_per_step: int, groups, process_set) -> None:
        params = [p for group in self.param_groups for p in group["params"]]
        self._parameter_names: Dict[torch.Tensor, str] = parameter_names(self.param_groups, named_parameters)
        self.backward_passes_per_step = backward_passes_per_step
        self.process_set = process_set
        self._requires_update: List[torch.Tensor] = [p for p in params if p.requires_grad]
        self._groups, self._group_of = parameter_groups(
            groups, self._requires_update, self._parameter_names, params
        )
        self._delay = {p: backward_passes_per_step for p in self._requires_update}
        self._touched = set()  # parameters whose hook ran since the last step
        self._hook_handles = []
        self._grad_accs = []  # keeps each AccumulateGrad node (and its hook) alive
        if set_included(process_set):
            self._register_hooks(self._requires_update)

    def _register_hooks(self, params: Sequence[torch.Tensor]) -> None:
        for p in params:
            if _HAS_POST_ACCUMULATE_HOOK:
                self._hook_handles.append(
                    p.register_post_accumulate_grad_hook(self._make_post_accumulate_hook(p))
                )
            else:
                # The AccumulateGrad node of a leaf is reached through any
                # differentiable view of it; its hook runs after .grad was
                # updated.
                grad_acc = p.expand_as(p).grad_fn.next_functions[0][0]
                self._hook_handles.append(grad_acc.register_hook(self._make_node_hook(p)))
                self._grad_accs.append(grad_acc)

    def _make_node_hook(self, p: torch.Tensor):
        # The hook holds the optimizer weakly: once the optimizer is gone,
        # its hooks do nothing instead of keeping it alive.
        owner = weakref.ref(self)

        def hook(*unused):
            optimizer = owner()
            if optimizer is not None:
                optimizer._on_gradient(p)

        return hook

    def _make_post_accumulate_hook(self, p: torch.Tensor):
        node_hook = self._make_node_hook(p)

        def hook(unused):
            node_hook()

        return hook

    def _on_gradient(self, p: torch.Tensor) -> None:
        """Runs when backward has accumulated a new gradient into ``p.grad``."""
        if p.grad is None:
            return
        if self._delay[p] <= 0:
            raise RuntimeError(
                f"DistributedOptimizer: the gradient of parameter '{self._parameter_names[p]}' "
                f"was computed more than backward_passes_per_step={self.backward_passes_per_step} "
                "times before step() or synchronize(); raise backward_passes_per_step to "
                "accumulate more backward passes locally"
            )
        self._touched.add(p)
        self._delay[p] -= 1
        if self._delay[p] == 0:
            self._gradient_ready(p)

    def _gradient_ready(self, p: torch.Tensor) -> None:
        raise NotImplementedError

    def _busy(self) -> bool:
        raise NotImplementedError

    def _reset_passes(self) -> None:
        """Starts counting backward passes anew (after gradients were consumed)."""
        self._touched.clear()
        for p in self._requires_update:
            self._delay[p] = self.backward_passes_per_step

    def zero_grad(self, *args, **kwargs):
        """The wrapped optimizer's ``zero_grad``; refused while gradients wait to be reduced.

        Raises:
            RuntimeError: backward has produced gradients that no
                ``step()`` or ``synchronize()`` has consumed yet.
        """
        if self._busy():
            raise RuntimeError(
                "DistributedOptimizer: zero_grad() was called after backward() but before step() "
                "or synchronize(); gradients are still being reduced (or accumulated over "
                "backward_passes_per_step) and would be lost. Call step() or synchronize() first"
            )
        return super().zero_grad(*args, **kwargs)

    def set_backward_passes_per_step(self, passes: int) -> None:
        """Changes how many backward passes are accumulated before a reduction."""
        if not isinstance(passes, int) or passes < 1:
            raise ValueError(f"backward_passes_per_step must be a positive integer, got {passes!r}")
        if self._busy():
            raise RuntimeError(
                "DistributedOptimizer: cannot change backward_passes_per_step while "
                "gradients are pending; call step() or synchronize() first"
            )
        self.backward_passes_per_step = passes
        self._reset_passes()
