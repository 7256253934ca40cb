"""Gradient reduction for ``DistributedOptimizer`` with ``op=Average`` or ``Sum``.

The moment a parameter's gradient is final, its allreduce starts (or, for a
parameter in an explicit group, the group's grouped allreduce once every
member is final). ``synchronize()`` submits what has not started, waits for
every reduction and writes the results into ``.grad``; ``step()`` calls it
and then takes the wrapped optimizer's step.

Sparse gradients (``nn.Embedding(sparse=True)``) are reduced by allgathering
every rank's indices and values (``sparse_allreduce_async``) and handed to
the optimizer as a coalesced sparse tensor; with ``sparse_as_dense`` they
are reduced as dense tensors and turned back into sparse ones of the same
sparse dimension, so the optimizer always sees the layout backward made.
"""

import contextlib
import warnings
from typing import Any, Sequence, Tuple

import torch

from accord.ops import Average

from . import mpi_ops as _ops
from .gradient_hooks import HookedOptimizerMixin, set_included

__all__ = ["GradientReductionMixin"]

# Horovod's wording; users filter warnings on its first sentence.
_STEP_AFTER_SYNCHRONIZE = (
    "optimizer.step() called without optimizer.skip_synchronize() context after "
    "optimizer.synchronize(). This can cause training slowdown. You may want to consider "
    "using optimizer.skip_synchronize() context if you use optimizer.synchronize() in your code."
)


class _Pending:
    """One submitted reduction: a parameter's, or a group's."""

    __slots__ = ("handle", "params", "sent", "ctxs", "sparse")

    def __init__(
        self,
        handle: Any,
        params: Sequence[torch.Tensor],
        sent: Sequence[torch.Tensor],
        ctxs: Sequence[Any],
        sparse: bool = False,
    ) -> None:
        self.handle = handle
        self.params = params  # parameters whose .grad receives the result
        self.sent = sent  # the tensors handed to the collective, one per parameter
        self.ctxs = ctxs  # compression contexts, one per parameter
        self.sparse = sparse  # the result is a new sparse tensor that replaces .grad


class GradientReductionMixin(HookedOptimizerMixin):
    """The ``DistributedOptimizer`` methods of the Average and Sum modes."""

    def _init_reduction(
        self, compression, op, gradient_predivide_factor: float, sparse_as_dense: bool
    ) -> None:
        self._compression = compression
        self.op = op
        self.gradient_predivide_factor = float(gradient_predivide_factor)
        self.sparse_as_dense = bool(sparse_as_dense)
        if op == Average:
            # Divide by the factor before the sum and multiply after it; the
            # collective's Average then divides by the set's size.
            self._prescale = 1.0 / self.gradient_predivide_factor
            self._postscale = self.gradient_predivide_factor
        else:
            self._prescale = 1.0
            self._postscale = 1.0
        self._index = {p: i for i, p in enumerate(self._requires_update)}
        self._pending = {}  # ("param", index) or ("group", index) -> _Pending
        self._group_ready = [set() for _ in self._groups]
        self._seen_sparse = {}  # parameter -> sparse_dim of its last sparse gradient
        self._should_synchronize = True
        self._synchronized = False

    # ------------------------------------------------------------ submission

    def _busy(self) -> bool:
        return bool(self._pending or self._touched)

    def _gradient_ready(self, p: torch.Tensor) -> None:
        group = self._group_of.get(p)
        if group is None:
            self._submit_single(p)
            return
        ready = self._group_ready[group]
        ready.add(p)
        if len(ready) == len(self._groups[group]):
            self._submit_group(group)

    def _gradient_for(self, p: torch.Tensor) -> torch.Tensor:
        """``p.grad``, made to exist (zeros) and dense where the options say so."""
        if p.grad is None:
            # No gradient reached p on this rank (it took no part in the
            # forward pass), but other ranks may reduce one: take part with
            # zeros so that no rank waits forever.
            sparse_dim = self._seen_sparse.get(p)
            if sparse_dim is not None and not self.sparse_as_dense:
                # An empty sparse gradient, so that this rank joins the same
                # allgathers as the ranks that have one.
                p.grad = torch.sparse_coo_tensor(
                    torch.zeros((sparse_dim, 0), dtype=torch.int64, device=p.device),
                    torch.zeros((0,) + tuple(p.shape[sparse_dim:]), dtype=p.dtype, device=p.device),
                    p.shape,
                )
            else:
                p.grad = torch.zeros_like(p, memory_format=torch.contiguous_format)
        elif p.grad.is_sparse:
            self._seen_sparse[p] = p.grad.sparse_dim()
            if self.sparse_as_dense:
                p.grad = p.grad.to_dense()
        return p.grad

    def _compress(self, grad: torch.Tensor) -> Tuple[torch.Tensor, Any]:
        sent, ctx = self._compression.compress(grad)
        if not sent.is_contiguous():
            sent = sent.contiguous()
        return sent, ctx

    def _submit_single(self, p: torch.Tensor) -> None:
        grad = self._gradient_for(p)
        name = self._parameter_names[p]
        if grad.is_sparse:
            handle = _ops.sparse_allreduce_async(
                grad, name=f"sparse_allreduce.{name}", op=self.op, process_set=self.process_set
            )
            self._pending[("param", self._index[p])] = _Pending(handle, (p,), (grad,), (None,), sparse=True)
            return
        sent, ctx = self._compress(grad)
        handle = _ops.allreduce_async_(
            sent,
            name=f"allreduce.{name}",
            op=self.op,
            prescale_factor=self._prescale,
            postscale_factor=self._postscale,
            process_set=self.process_set,
        )
        self._pending[("param", self._index[p])] = _Pending(handle, (p,), (sent,), (ctx,))

    def _submit_group(self, group: int) -> None:
        members = self._groups[group]
        sent, ctxs = [], []
        for p in members:
            grad = self._gradient_for(p)
            if grad.is_sparse:
                raise ValueError(
                    f"DistributedOptimizer: parameter '{self._parameter_names[p]}' has a sparse "
                    "gradient, which cannot be reduced as part of a group; pass "
                    "sparse_as_dense=True or leave the parameter out of `groups`"
                )
            s, ctx = self._compress(grad)
            sent.append(s)
            ctxs.append(ctx)
        handle = _ops.grouped_allreduce_async_(
            sent,
            name=f"grouped_allreduce.{self._parameter_names[members[0]]}",
            op=self.op,
            prescale_factor=self._prescale,
            postscale_factor=self._postscale,
            process_set=self.process_set,
        )
        self._pending[("group", group)] = _Pending(handle, members, sent, ctxs)

    # ------------------------------------------------------------ completion

    def synchronize(self) -> None:
        """Waits until every gradient has been reduced across the ranks.

        Gradients whose reduction has not started yet (parameters that got
        no gradient on this rank, or fewer than ``backward_passes_per_step``
        backward passes) are submitted first, so every rank takes part in
        every reduction. Afterwards each ``p.grad`` holds the reduced
        gradient. Call it before changing gradients (e.g. clipping), then
        ``step()`` inside ``skip_synchronize()``.
        """
        if not set_included(self.process_set):
            self._synchronized = True
            return
        for p in self._requires_update:
            group = self._group_of.get(p)
            if group is None:
                if ("param", self._index[p]) not in self._pending:
                    self._submit_single(p)
            elif ("group", group) not in self._pending:
                self._submit_group(group)

        first_error = None
        for pending in self._pending.values():
            try:
                self._finish(pending)
            except Exception as error:  # wait for the rest so no name stays in flight
                if first_error is None:
                    first_error = error
        self._pending.clear()
        for ready in self._group_ready:
            ready.clear()
        self._reset_passes()
        self._synchronized = True
        if first_error is not None:
            raise first_error

    def _finish(self, pending: _Pending) -> None:
        if pending.sparse:
            pending.params[0].grad = _ops.synchronize(pending.handle)
            return
        output = _ops.synchronize(pending.handle)
        if len(pending.params) == 1:
            outputs = [output if isinstance(output, torch.Tensor) else pending.sent[0]]
        else:
            outputs = list(output) if isinstance(output, (list, tuple)) else list(pending.sent)
        for p, out, ctx in zip(pending.params, outputs, pending.ctxs):
            reduced = self._compression.decompress(out, ctx)
            if reduced is not p.grad:
                p.grad.copy_(reduced)
            sparse_dim = self._seen_sparse.get(p)
            if sparse_dim is not None and self.sparse_as_dense:
                # sparse_as_dense: back to the layout backward produced, so
                # that optimizers that need sparse gradients work.
                p.grad = p.grad.to_sparse(sparse_dim)

    # ------------------------------------------------------------ public API

    @contextlib.contextmanager
    def skip_synchronize(self):
        """A context in which ``step()`` does not call ``synchronize()``.

        For updates that change the reduced gradients first::

            loss.backward()
            optimizer.synchronize()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            with optimizer.skip_synchronize():
                optimizer.step()
        """
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def step(self, closure=None):
        """Waits for the gradients' reductions, then takes the wrapped optimizer's step.

        After an explicit ``synchronize()``, call it inside
        ``skip_synchronize()``; otherwise it warns (as Horovod does) and
        reduces only gradients that backward produced since, if any.
        """
        if self._should_synchronize:
            if self._synchronized:
                warnings.warn(_STEP_AFTER_SYNCHRONIZE, UserWarning, stacklevel=2)
            if not (self._synchronized and not self._touched and not self._pending):
                self.synchronize()
        self._synchronized = False
        return super().step(closure)
