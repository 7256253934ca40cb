"""``DistributedOptimizer``: data-parallel training by wrapping a torch optimizer.

Every rank runs the same model on its own share of the data. The wrapped
optimizer starts an allreduce of each parameter's gradient the moment
backward has produced it, so communication overlaps the rest of backward;
``step()`` waits for those allreduces and then applies the wrapped
optimizer's update to the reduced gradients, so every rank takes the same
step.
"""
import contextlib
import warnings
import weakref
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import torch

from accord import global_process_set
from accord.ops import Adasum, Average, Sum

from . import mpi_ops as _ops
from .compression import Compression
from .functions_state import broadcast_optimizer_state, broadcast_parameters

__all__ = ["DistributedOptimizer", "broadcast_parameters", "broadcast_optimizer_state"]

# Whether parameters offer a hook that runs after their .grad was accumulated
# (torch >= 2.1); older versions hook the parameter's AccumulateGrad node.
_HAS_POST_ACCUMULATE_HOOK = hasattr(torch.Tensor, "register_post_accumulate_grad_hook")


class _Pending:
    """One submitted reduction: a parameter's, or a group's."""

    __slots__ = ("handle", "params", "sent", "ctxs", "sparse")

    def __init__(self, handle: Any, params: Sequence[torch.Tensor], sent: Sequence[torch.Tensor],
                 ctxs: Sequence[Any], sparse: bool = False) -> None:
        self.handle = handle
        self.params = params    # parameters whose .grad receives the result
        self.sent = sent        # the tensors handed to the collective, one per parameter
        self.ctxs = ctxs        # compression contexts, one per parameter
        self.sparse = sparse    # the result is a new sparse tensor that replaces .grad


class _DistributedOptimizerMixin:
    """Methods that a ``DistributedOptimizer`` adds to the wrapped optimizer's class.

    The class of the object ``DistributedOptimizer`` returns derives from
    this mixin and from the wrapped optimizer's class, so ``super()`` here
    reaches the wrapped optimizer's own ``step`` and ``zero_grad``.
    """

    # ------------------------------------------------------------ set-up

    def _init_distributed(self, named_parameters, compression, backward_passes_per_step, op,
                          gradient_predivide_factor, groups, sparse_as_dense, process_set) -> None:
        if op == Adasum:
            raise NotImplementedError("DistributedOptimizer(op=Adasum) is not supported; "
                                      "use op=Average or op=Sum")
        if op != Average and op != Sum:
            raise ValueError(f"DistributedOptimizer: op must be Average or Sum, got {op!r}")
        if not isinstance(backward_passes_per_step, int) or backward_passes_per_step < 1:
            raise ValueError("DistributedOptimizer: backward_passes_per_step must be a positive "
                             f"integer, got {backward_passes_per_step!r}")
        if gradient_predivide_factor != 1.0:
            if op != Average:
                raise ValueError("DistributedOptimizer: gradient_predivide_factor is only "
                                 "supported with op=Average")
            if not gradient_predivide_factor > 0:
                raise ValueError("DistributedOptimizer: gradient_predivide_factor must be "
                                 f"positive, got {gradient_predivide_factor!r}")
        if not (hasattr(compression, "compress") and hasattr(compression, "decompress")):
            raise ValueError("DistributedOptimizer: compression must have compress() and "
                             f"decompress(), e.g. Compression.none or Compression.fp16; got "
                             f"{compression!r}")

        self._compression = compression
        self.backward_passes_per_step = backward_passes_per_step
        self.op = op
        self.gradient_predivide_factor = float(gradient_predivide_factor)
        self.sparse_as_dense = bool(sparse_as_dense)
        self.process_set = process_set
        if op == Average:
            # Divide by the factor before the sum and multiply after it; the
            # collective's Average then divides by the set's size.
            self._prescale = 1.0 / self.gradient_predivide_factor
            self._postscale = self.gradient_predivide_factor
        else:
            self._prescale = 1.0
            self._postscale = 1.0

        params = [p for group in self.param_groups for p in group["params"]]
        self._names = _parameter_names(params, named_parameters)
        self._requires_update = [p for p in params if p.requires_grad]
        self._index = {p: i for i, p in enumerate(self._requires_update)}
        self._groups, self._group_of = _parameter_groups(groups, self._requires_update, self._names)

        self._delay = {p: backward_passes_per_step for p in self._requires_update}
        self._touched = set()          # parameters whose hook ran since the last synchronize
        self._pending = {}             # ("param", index) or ("group", index) -> _Pending
        self._group_ready = [set() for _ in self._groups]
        self._seen_sparse = {}         # parameter -> sparse_dim of its last sparse gradient
        self._should_synchronize = True
        self._synchronized = False
        self._hook_handles = []
        self._grad_accs = []           # keeps each AccumulateGrad node (and its hook) alive
        if _set_included(process_set):
            self._register_hooks()

    def _register_hooks(self) -> None:
        for p in self._requires_update:
            if _HAS_POST_ACCUMULATE_HOOK:
                self._hook_handles.append(
                    p.register_post_accumulate_grad_hook(self._make_post_accumulate_hook(p)))
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

    # ------------------------------------------------------------ during backward

    def _on_gradient(self, p: torch.Tensor) -> None:
        """Runs when backward has accumulated a new gradient into ``p.grad``."""
        if p.grad is None:
            return
        if self._delay[p] <= 0:
            raise RuntimeError(
                f"DistributedOptimizer: the gradient of parameter '{self._names[p]}' was computed "
                f"more than backward_passes_per_step={self.backward_passes_per_step} times before "
                "step() or synchronize(); raise backward_passes_per_step to accumulate more "
                "backward passes locally")
        self._touched.add(p)
        self._delay[p] -= 1
        if self._delay[p] > 0:
            return
        group = self._group_of.get(p)
        if group is None:
            self._submit_single(p)
            return
        ready = self._group_ready[group]
        ready.add(p)
        if len(ready) == len(self._groups[group]):
            self._submit_group(group)

    # ------------------------------------------------------------ submission

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
                    torch.zeros((0,) + tuple(p.shape[sparse_dim:]), dtype=p.dtype,
                                device=p.device),
                    p.shape)
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
        name = self._names[p]
        if grad.is_sparse:
            handle = _ops.sparse_allreduce_async(grad, name=f"sparse_allreduce.{name}", op=self.op,
                                                 process_set=self.process_set)
            self._pending[("param", self._index[p])] = _Pending(handle, (p,), (grad,), (None,),
                                                                sparse=True)
            return
        sent, ctx = self._compress(grad)
        handle = _ops.allreduce_async_(sent, name=f"allreduce.{name}", op=self.op,
                                       prescale_factor=self._prescale,
                                       postscale_factor=self._postscale,
                                       process_set=self.process_set)
        self._pending[("param", self._index[p])] = _Pending(handle, (p,), (sent,), (ctx,))

    def _submit_group(self, group: int) -> None:
        members = self._groups[group]
        sent, ctxs = [], []
        for p in members:
            grad = self._gradient_for(p)
            if grad.is_sparse:
                raise ValueError(
                    f"DistributedOptimizer: parameter '{self._names[p]}' has a sparse gradient, "
                    "which cannot be reduced as part of a group; pass sparse_as_dense=True or "
                    "leave the parameter out of `groups`")
            s, ctx = self._compress(grad)
            sent.append(s)
            ctxs.append(ctx)
        handle = _ops.grouped_allreduce_async_(
            sent, name=f"grouped_allreduce.{self._names[members[0]]}", op=self.op,
            prescale_factor=self._prescale, postscale_factor=self._postscale,
            process_set=self.process_set)
        self._pending[("group", group)] = _Pending(handle, members, sent, ctxs)

    # ------------------------------------------------------------ public API

    def synchronize(self) -> None:
        """Waits until every gradient has been reduced across the ranks.

        Gradients whose reduction has not started yet (parameters that got
        no gradient on this rank, or fewer than ``backward_passes_per_step``
        backward passes) are submitted first, so every rank takes part in
        every reduction. Afterwards each ``p.grad`` holds the reduced
        gradient. Call it before changing gradients (e.g. clipping), then
        ``step()`` inside ``skip_synchronize()``.
        """
        if not _set_included(self.process_set):
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
        self._touched.clear()
        for ready in self._group_ready:
            ready.clear()
        for p in self._requires_update:
            self._delay[p] = self.backward_passes_per_step
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
        """Waits for the gradients' reductions, then takes the wrapped optimizer's step."""
        if self._should_synchronize:
            if not (self._synchronized and not self._touched and not self._pending):
                self.synchronize()
        self._synchronized = False
        return super().step(closure)

    def zero_grad(self, *args, **kwargs):
        """The wrapped optimizer's ``zero_grad``; refused while reductions are pending.

        Raises:
            RuntimeError: backward has produced gradients whose reduction has
                not been awaited by ``step()`` or ``synchronize()``.
        """
        if self._pending or self._touched:
            raise RuntimeError(
                "DistributedOptimizer: zero_grad() was called after backward() but before step() "
                "or synchronize(); gradients are still being reduced (or accumulated over "
                "backward_passes_per_step) and would be lost. Call step() or synchronize() first")
        return super().zero_grad(*args, **kwargs)

    def set_backward_passes_per_step(self, passes: int) -> None:
        """Changes how many backward passes are accumulated before a reduction."""
        if not isinstance(passes, int) or passes < 1:
            raise ValueError(f"backward_passes_per_step must be a positive integer, got {passes!r}")
        if self._pending or self._touched:
            raise RuntimeError("DistributedOptimizer: cannot change backward_passes_per_step while "
                               "gradients are pending; call step() or synchronize() first")
        self.backward_passes_per_step = passes
        for p in self._requires_update:
            self._delay[p] = passes


def _set_included(process_set) -> bool:
    """Whether this rank belongs to ``process_set``.

    A set that is not registered yet counts as including it, so that its
    collectives report the problem instead of training silently alone.
    """
    included = getattr(process_set, "included", None)
    return included is None or included() is not False


def _parameter_names(params: List[torch.Tensor], named_parameters) -> Dict[torch.Tensor, str]:
    """Maps every optimizer parameter to a name that is the same on every rank."""
    names = {}
    if named_parameters is not None:
        named = list(named_parameters)
        for entry in named:
            if (not isinstance(entry, (tuple, list)) or len(entry) != 2
                    or not isinstance(entry[0], str) or not isinstance(entry[1], torch.Tensor)):
                raise ValueError("DistributedOptimizer: named_parameters must be a sequence of "
                                 f"(str, torch.Tensor) pairs, such as model.named_parameters(); "
                                 f"got an entry {entry!r:.80}")
        counts = {}
        for name, _ in named:
            counts[name] = counts.get(name, 0) + 1
        duplicates = sorted(name for name, count in counts.items() if count > 1)
        if duplicates:
            raise ValueError("DistributedOptimizer: parameter names in named_parameters must be "
                             f"unique; found duplicates: {', '.join(duplicates)}")
        for name, p in named:
            names[p] = name
    used = set(names.values())
    index = 0
    for p in params:
        if p in names:
            continue
        # Unnamed parameters are named by their position in the optimizer's
        # parameter groups, which is the same on every rank.
        name = f"noname.{index}"
        while name in used:
            index += 1
            name = f"noname.{index}"
        names[p] = name
        used.add(name)
        index += 1
    return names


def _parameter_groups(groups, params: List[torch.Tensor], names: Dict[torch.Tensor, str]):
    """Returns (list of tuples of parameters, parameter -> group index)."""
    if groups is None:
        return [], {}
    if isinstance(groups, bool) or not isinstance(groups, (int, list, tuple)):
        raise ValueError("DistributedOptimizer: groups must be a positive int (the number of "
                         f"groups) or a list of lists of parameters; got {type(groups).__name__}")
    if isinstance(groups, int):
        if groups < 1:
            raise ValueError(f"DistributedOptimizer: groups must be positive, got {groups}")
        count = min(groups, len(params))
        # Contiguous chunks in parameter order, sizes differing by at most one.
        base, extra = divmod(len(params), count) if count else (0, 0)
        result, start = [], 0
        for i in range(count):
            end = start + base + (1 if i < extra else 0)
            result.append(tuple(params[start:end]))
            start = end
    else:
        trainable = set(params)
        result, seen = [], set()
        for i, group in enumerate(groups):
            if isinstance(group, torch.Tensor) or not isinstance(group, Iterable):
                raise ValueError("DistributedOptimizer: groups must be a list of lists of "
                                 f"parameters; element {i} is a {type(group).__name__}")
            members = []
            for p in group:
                if not isinstance(p, torch.Tensor):
                    raise ValueError(f"DistributedOptimizer: groups[{i}] holds a "
                                     f"{type(p).__name__}, not a parameter")
                if p in seen:
                    raise ValueError(f"DistributedOptimizer: parameter '{names.get(p, '?')}' "
                                     "appears in more than one group")
                if p not in names:
                    raise ValueError(f"DistributedOptimizer: groups[{i}] holds a tensor that is "
                                     "not a parameter of the optimizer")
                seen.add(p)
                if p in trainable:
                    members.append(p)
            if members:
                result.append(tuple(members))
    group_of = {p: i for i, group in enumerate(result) for p in group}
    return result, group_of


_CLASS_CACHE: Dict[type, type] = {}


def _distributed_class(cls: type) -> type:
    dist_cls = _CLASS_CACHE.get(cls)
    if dist_cls is None:
        dist_cls = type(cls.__name__, (_DistributedOptimizerMixin, cls),
                        {"__doc__": f"{cls.__name__} whose gradients are reduced across ranks "
                                    "(made by accord.torch.DistributedOptimizer).",
                         "__module__": __name__})
        _CLASS_CACHE[cls] = dist_cls
    return dist_cls


def DistributedOptimizer(optimizer: torch.optim.Optimizer,
                         named_parameters: Optional[Iterable[Tuple[str, torch.Tensor]]] = None,
                         compression=Compression.none,
                         backward_passes_per_step: int = 1,
                         op=Average,
                         gradient_predivide_factor: float = 1.0,
                         num_groups: int = 0,
                         groups: Optional[Union[int, Sequence[Sequence[torch.Tensor]]]] = None,
                         sparse_as_dense: bool = False,
                         process_set=global_process_set) -> torch.optim.Optimizer:
    """Wraps ``optimizer`` so that its gradients are reduced across the ranks.

    The returned object is an instance of a subclass of ``optimizer``'s
    class that shares its parameter groups, state and defaults, so
    ``isinstance`` checks, ``state_dict()`` and learning-rate schedulers
    keep working. A hook on every parameter starts the allreduce of its
    gradient as soon as backward has produced it; ``step()`` waits for all
    of them and then takes the wrapped optimizer's step.

    Args:
        optimizer: the optimizer to wrap.
        named_parameters: ``(name, parameter)`` pairs, e.g.
            ``model.named_parameters()``. Names identify the reductions, so
            ranks match gradients by name; they must be unique. Parameters
            not named here are named by their position in the optimizer.
        compression: ``Compression.none`` or ``Compression.fp16`` (reduce in
            float16 and cast back).
        backward_passes_per_step: backward passes accumulated locally before
            the accumulated gradient is reduced (once per ``step()``).
        op: ``Average`` (default) or ``Sum`` across the ranks.
        gradient_predivide_factor: with ``Average``, gradients are divided
            by this factor before the sum and by ``size / factor`` after it.
        num_groups: deprecated spelling of ``groups=<int>``, kept for
            scripts written for Horovod.
        groups: an int (split the parameters into that many groups, in
            parameter order) or a list of lists of parameters; each group is
            reduced by one grouped allreduce once all its gradients are
            ready. Parameters in no group are reduced one by one.
        sparse_as_dense: reduce sparse gradients as dense tensors instead of
            allgathering their indices and values.
        process_set: the ranks that train together (default: all).

    Raises:
        ValueError: duplicate names, an unsupported ``op``, malformed
            ``groups`` or other bad arguments.
        NotImplementedError: ``op=Adasum``.
    """
    if isinstance(optimizer, _DistributedOptimizerMixin):
        raise ValueError("DistributedOptimizer: the optimizer is already a DistributedOptimizer")
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise ValueError("DistributedOptimizer: expected a torch.optim.Optimizer, got "
                         f"{type(optimizer).__name__}")
    if num_groups:
        if groups is not None:
            raise ValueError("DistributedOptimizer: pass either groups or the deprecated "
                             "num_groups, not both")
        warnings.warn("DistributedOptimizer: num_groups is deprecated; use groups=<int>",
                      DeprecationWarning, stacklevel=2)
        groups = num_groups
    dist_cls = _distributed_class(type(optimizer))
    wrapped = dist_cls.__new__(dist_cls)
    # Share the wrapped optimizer's attributes (parameter groups, state,
    # defaults, hooks) rather than constructing anew, so nothing the
    # optimizer set up is lost and a scheduler attached to either object
    # drives both.
    wrapped.__dict__.update(optimizer.__dict__)
    wrapped._init_distributed(named_parameters, compression, backward_passes_per_step, op,
                              gradient_predivide_factor, groups, sparse_as_dense, process_set)
    return wrapped
