"""``DistributedOptimizer(op=Adasum)``: Adasum of the parameter deltas of a local step.

Adasum combines update directions rather than gradients, so this mode
reduces what the wrapped optimizer does with the local gradients, as
Horovod's Adasum optimizer does. Each ``step()``:

1. copies every trainable parameter (``start``);
2. takes the wrapped optimizer's step on this rank's own gradients;
3. computes each parameter's delta, ``p - start``, and allreduces the
   deltas with ``op=Adasum`` (per parameter, or per explicit group, with
   the chosen compression), all submitted before any is awaited so the
   core can fuse them;
4. sets every parameter to ``start + Adasum(deltas)``.

If a reduction fails, every parameter is put back to ``start`` before the
error is raised (the wrapped optimizer's state keeps its local step).

Unlike Horovod, whose hooks step each parameter during backward, the local
step here is one call of the wrapped optimizer's ``step()`` after backward:
any optimizer works, including ones that look at all parameters at once,
and parameters never hold deltas. The price is that the deltas' reduction
does not overlap backward. ``synchronize()`` has nothing to wait for (the
gradients are not reduced), so ``skip_synchronize()`` is accepted and has no
effect (Horovod refuses it).
"""

import contextlib
from typing import Any, Dict, List, Tuple

import torch

from accord.ops import Adasum

from . import mpi_ops as _ops
from .gradient_hooks import HookedOptimizerMixin, set_included

__all__ = ["AdasumDeltaMixin"]


class AdasumDeltaMixin(HookedOptimizerMixin):
    """The ``DistributedOptimizer`` methods of the Adasum mode."""

    def _init_adasum(self, compression, sparse_as_dense: bool) -> None:
        self._compression = compression
        self.op = Adasum
        self.gradient_predivide_factor = 1.0
        self.sparse_as_dense = bool(sparse_as_dense)  # no effect: deltas are dense
        self._starts: Dict[torch.Tensor, torch.Tensor] = {}

    def _busy(self) -> bool:
        return bool(self._touched)

    def _gradient_ready(self, p: torch.Tensor) -> None:
        """Nothing to start: the deltas exist only after the local step."""

    def synchronize(self) -> None:
        """Does nothing: with Adasum, ``step()`` reduces parameter deltas, not gradients."""

    @contextlib.contextmanager
    def skip_synchronize(self):
        """Accepted for scripts written for the other modes; has no effect with Adasum."""
        yield

    def step(self, closure=None):
        """Steps locally, then applies the Adasum of every rank's parameter deltas."""
        params = self._requires_update
        with torch.no_grad():
            for p in params:
                start = self._starts.get(p)
                if start is None:
                    start = torch.empty_like(p, memory_format=torch.contiguous_format)
                    self._starts[p] = start
                start.copy_(p)
        loss = super().step(closure)
        self._reset_passes()
        if set_included(self.process_set):
            with torch.no_grad():
                self._apply_reduced_deltas(params)
        return loss

    def _apply_reduced_deltas(self, params: List[torch.Tensor]) -> None:
        pending: List[Tuple[Any, ...]] = []
        results: List[Tuple[torch.Tensor, torch.Tensor]] = []
        first_error = None
        try:
            self._submit_deltas(params, pending)
        except Exception as error:  # still wait for what was submitted
            first_error = error
        for members, handle, sent, ctxs in pending:
            try:
                output = _ops.synchronize(handle)
            except Exception as error:  # wait for the rest so no name stays in flight
                if first_error is None:
                    first_error = error
                continue
            outputs = [output] if isinstance(output, torch.Tensor) else list(output or sent)
            for p, out, ctx in zip(members, outputs, ctxs):
                results.append((p, self._compression.decompress(out, ctx)))
        if first_error is not None:
            for p in params:
                p.copy_(self._starts[p])
            raise first_error
        for p, delta in results:
            start = self._starts[p]
            start.add_(delta.to(start.dtype))
            p.copy_(start)

    def _submit_deltas(self, params: List[torch.Tensor], pending: List[Tuple[Any, ...]]) -> None:
        """Starts every delta's reduction; (members, handle, sent, contexts) go to ``pending``."""
        deltas = {}
        for p in params:
            sent, ctx = self._compression.compress(p.detach() - self._starts[p])
            deltas[p] = (sent.contiguous(), ctx)
        for members in self._groups:
            sent = [deltas[p][0] for p in members]
            handle = _ops.grouped_allreduce_async_(
                sent,
                name=f"grouped_adasum.{self._parameter_names[members[0]]}",
                op=Adasum,
                process_set=self.process_set,
            )
            pending.append((members, handle, sent, [deltas[p][1] for p in members]))
        for p in params:
            if p not in self._group_of:
                sent, ctx = deltas[p]
                handle = _ops.allreduce_async_(
                    sent, name=f"adasum.{self._parameter_names[p]}", op=Adasum, process_set=self.process_set
                )
                pending.append(((p,), handle, [sent], [ctx]))
