"""How ``DistributedOptimizer`` names its parameters and forms its groups.

Ranks match reductions by name, so every parameter of the wrapped optimizer
needs a name that is the same on every rank: the user's, from
``named_parameters``, or one made from its position in the optimizer's
parameter groups. Pure functions of the arguments; no communication.
"""

from typing import Dict, Iterable, List, Sequence, Tuple

import torch

__all__ = ["parameter_names", "parameter_groups"]


def _positions(param_groups: Sequence[dict]) -> List[Tuple[int, int, torch.Tensor]]:
    """(group index, index in the group, parameter) for every parameter of the optimizer."""
    return [(i, j, p) for i, group in enumerate(param_groups) for j, p in enumerate(group["params"])]


def _checked_pairs(named_parameters) -> List[Tuple[str, torch.Tensor]]:
    named = list(named_parameters)
    for entry in named:
        if (
            not isinstance(entry, (tuple, list))
            or len(entry) != 2
            or not isinstance(entry[0], str)
            or not isinstance(entry[1], torch.Tensor)
        ):
            raise ValueError(
                "DistributedOptimizer: named_parameters must be a sequence of "
                "(str, torch.Tensor) pairs, such as model.named_parameters(); "
                f"got an entry {entry!r:.80}"
            )
    counts: Dict[str, int] = {}
    for name, _ in named:
        counts[name] = counts.get(name, 0) + 1
    duplicates = sorted(name for name, count in counts.items() if count > 1)
    if duplicates:
        raise ValueError(
            "DistributedOptimizer: parameter names in named_parameters must be "
            f"unique; found duplicates: {', '.join(duplicates)}"
        )
    return named


def parameter_names(param_groups: Sequence[dict], named_parameters) -> Dict[torch.Tensor, str]:
    """Maps every parameter of the optimizer (and every named one) to its name.

    Without ``named_parameters`` the parameter at index ``j`` of parameter
    group ``i`` is ``allreduce.noname.<i>.<j>``. With it, every parameter of
    the optimizer must be named; names of tensors that the optimizer does not
    hold (e.g. all of ``model.named_parameters()`` for an optimizer over a
    part of the model) are kept and unused.

    Raises:
        ValueError: malformed or duplicate entries, or parameters of the
            optimizer that ``named_parameters`` leaves unnamed (named by
            position and shape in the message).
    """
    if named_parameters is None:
        # Horovod's names, which scripts and tools may look for.
        return {p: f"allreduce.noname.{i}.{j}" for i, j, p in _positions(param_groups)}
    named = _checked_pairs(named_parameters)
    names = {p: name for name, p in named}
    unnamed = [
        f"param_groups[{i}]['params'][{j}] (shape {list(p.shape)})"
        for i, j, p in _positions(param_groups)
        if p not in names
    ]
    if unnamed:
        positions = ", ".join(unnamed[:10])
        more = "" if len(unnamed) <= 10 else f" and {len(unnamed) - 10} more"
        raise ValueError(
            "DistributedOptimizer: named_parameters was specified, but "
            f"{len(unnamed)} parameter(s) of the optimizer are not named in it: "
            f"{positions}{more}. Pass a name for every parameter the optimizer "
            "holds, e.g. model.named_parameters(), or leave named_parameters out"
        )
    return names


def parameter_groups(
    groups, params: List[torch.Tensor], names: Dict[torch.Tensor, str], held: Sequence[torch.Tensor]
):
    """The explicit reduction groups: (list of tuples of parameters, parameter -> group index).

    ``groups`` is None (no groups), an int (that many contiguous groups in
    parameter order, sizes differing by at most one) or a list of lists of
    parameters; ``params`` are the parameters that get gradients, ``held``
    every parameter of the optimizer.
    """
    if groups is None:
        return [], {}
    if isinstance(groups, bool) or not isinstance(groups, (int, list, tuple)):
        raise ValueError(
            "DistributedOptimizer: groups must be a positive int (the number of "
            f"groups) or a list of lists of parameters; got {type(groups).__name__}"
        )
    if isinstance(groups, int):
        result = _split_evenly(groups, params)
    else:
        result = _listed_groups(groups, params, names, set(held))
    group_of = {p: i for i, group in enumerate(result) for p in group}
    return result, group_of


def _split_evenly(count: int, params: List[torch.Tensor]) -> List[Tuple[torch.Tensor, ...]]:
    if count < 1:
        raise ValueError(f"DistributedOptimizer: groups must be positive, got {count}")
    count = min(count, len(params))
    base, extra = divmod(len(params), count) if count else (0, 0)
    result, start = [], 0
    for i in range(count):
        end = start + base + (1 if i < extra else 0)
        result.append(tuple(params[start:end]))
        start = end
    return result


def _listed_groups(
    groups, params: List[torch.Tensor], names: Dict[torch.Tensor, str], held: set
) -> List[Tuple[torch.Tensor, ...]]:
    trainable = set(params)
    result, seen = [], set()
    for i, group in enumerate(groups):
        if isinstance(group, torch.Tensor) or not isinstance(group, Iterable):
            raise ValueError(
                "DistributedOptimizer: groups must be a list of lists of "
                f"parameters; element {i} is a {type(group).__name__}"
            )
        members = []
        for p in group:
            if not isinstance(p, torch.Tensor):
                raise ValueError(
                    f"DistributedOptimizer: groups[{i}] holds a {type(p).__name__}, not a parameter"
                )
            if p in seen:
                raise ValueError(
                    f"DistributedOptimizer: parameter '{names.get(p, '?')}' appears in more than one group"
                )
            if p not in held:
                raise ValueError(
                    f"DistributedOptimizer: groups[{i}] holds a tensor that is "
                    "not a parameter of the optimizer"
                )
            seen.add(p)
            if p in trainable:
                members.append(p)
        if members:
            result.append(tuple(members))
    return result
