"""Checking that every rank is about to broadcast the same list of tensors.

``broadcast_parameters`` matches tensors across ranks by name. When one
rank's model has a layer the others lack, that rank would wait for a
broadcast no other rank submits, until the stall report or the other ranks'
shutdown. So before any broadcast the ranks agree on what they hold:

1. every rank describes its tensors as ``(name, dtype, shape)`` and hashes
   the description into a 62-bit digest;
2. one allreduce (Max) of ``[digest, -digest]`` gives every rank the largest
   and the smallest digest of the set: equal means every rank holds the
   same list, and the broadcasts go ahead;
3. otherwise (only then) the ranks allgather their full descriptions, and
   every rank raises the same ``ValueError``, naming the first tensors that
   differ and the ranks that hold each version.

Step 2 is the whole cost when the ranks agree: a hash of a few hundred
strings and one small allreduce (docs/benchmarks.md, "Checks before a
broadcast").
"""

import hashlib
from array import array
from itertools import chain
from typing import Dict, List, Optional, Sequence, Tuple

import torch

from accord.ops import Max

from . import mpi_ops as _ops
from . import tensor_args as _args
from .functions import allgather_object

__all__ = ["Described", "describe", "check_same_tensors"]

# One tensor as the check sees it: (name, dtype, shape).
Described = Tuple[str, str, Tuple[int, ...]]

# How many differing names the error spells out; the rest are counted.
_NAMED_IN_ERROR = 3
_DIGEST_MASK = (1 << 62) - 1  # so that -digest fits an int64 as well


_DTYPE_NAMES: Dict[torch.dtype, str] = {}


def describe(name: str, tensor: torch.Tensor) -> Described:
    """``(name, dtype, shape)`` of ``tensor``, with the dtype as torch spells it (``float32``)."""
    dtype = tensor.dtype
    spelled = _DTYPE_NAMES.get(dtype)
    if spelled is None:
        spelled = _DTYPE_NAMES.setdefault(dtype, str(dtype).replace("torch.", ""))
    return (name, spelled, tuple(tensor.shape))


def _digest(entries: Sequence[Described]) -> int:
    """A 62-bit hash of the list: names and dtypes NUL-separated, then every shape's rank and sizes."""
    names, dtypes, shapes = zip(*entries) if entries else ((), (), ())
    dims = array("q", map(len, shapes))
    dims.extend(chain.from_iterable(shapes))
    hasher = hashlib.blake2b(digest_size=8)
    hasher.update("\0".join(names).encode())
    hasher.update("\0".join(dtypes).encode())
    hasher.update(dims.tobytes())
    return int.from_bytes(hasher.digest(), "little") & _DIGEST_MASK


def _spell(dtype: str, shape: Tuple[int, ...]) -> str:
    return f"{dtype} {list(shape)}"


def _ranks(ranks: Sequence[int]) -> str:
    listed = ", ".join(str(r) for r in ranks)
    return f"rank {listed}" if len(ranks) == 1 else f"ranks {listed}"


def _difference(name: str, versions: Dict[Optional[Tuple[str, Tuple[int, ...]]], List[int]]) -> str:
    """One differing name: who lacks it, and who holds which dtype and shape."""
    held = [(spec, ranks) for spec, ranks in versions.items() if spec is not None]
    missing = versions.get(None)
    if missing and len(held) == 1:
        (dtype, shape), ranks = held[0]
        return (
            f"'{name}' is missing on {_ranks(missing)} (present on {_ranks(ranks)} as {_spell(dtype, shape)})"
        )
    parts = [f"{_spell(dtype, shape)} on {_ranks(ranks)}" for (dtype, shape), ranks in held]
    text = f"'{name}' is " + " and ".join(parts)
    return text + (f", missing on {_ranks(missing)}" if missing else "")


def explain(lists: Sequence[Sequence[Described]], ranks: Sequence[int]) -> str:
    """What differs between the ranks' lists (``lists[i]`` belongs to global rank ``ranks[i]``).

    Names are taken in the order of the lowest rank that holds them; the
    first few that differ are spelled out, the rest counted.
    """
    order = dict.fromkeys(name for entries in lists for name, _, _ in entries)
    held = [{name: (dtype, shape) for name, dtype, shape in entries} for entries in lists]
    differences = []
    for name in order:
        versions: Dict[Optional[Tuple[str, Tuple[int, ...]]], List[int]] = {}
        for rank, table in zip(ranks, held):
            versions.setdefault(table.get(name), []).append(rank)
        if len(versions) > 1:
            differences.append(_difference(name, versions))
    if not differences:
        # The same (name, dtype, shape) sets, listed twice or in another order.
        return "the ranks list the same tensors in a different order or with repeated names"
    text = "; ".join(differences[:_NAMED_IN_ERROR])
    if len(differences) > _NAMED_IN_ERROR:
        text += f"; and {len(differences) - _NAMED_IN_ERROR} more"
    return text


def check_same_tensors(
    caller: str, entries: List[Described], name: str, process_set, by_name: bool = True
) -> None:
    """Raises ``ValueError`` on every rank of ``process_set`` unless all of them hold ``entries``.

    Collective: every rank of the set calls it with its own ``entries``.
    With ``by_name`` (tensors matched by name, as named broadcasts are) their
    order does not matter; without it (matched by position, as an
    optimizer's state is) it does. ``caller`` begins the error's message;
    ``name`` names the collectives (``<name>`` and, when the ranks differ,
    ``<name>.lists``).
    """
    digest = _digest(sorted(entries) if by_name else entries)
    extremes = torch.tensor([digest, -digest], dtype=torch.int64)
    _ops.synchronize(_ops.allreduce_async_(extremes, name=name, op=Max, process_set=process_set))
    largest, smallest = int(extremes[0]), -int(extremes[1])
    if largest == smallest == digest:
        return
    lists = allgather_object(entries, name=f"{name}.lists", process_set=process_set)
    raise ValueError(f"{caller}: the ranks' tensors differ: {explain(lists, _args.set_ranks(process_set))}")
