"""Process sets: collectives on a subset of the ranks.

A ``ProcessSet`` is a sorted list of global ranks. It becomes usable once it
is registered, by ``init(process_sets=[...])`` or ``add_process_set()``, which
give it an id; collectives then take it as their ``process_set`` argument.
Every rank registers the same sets in the same order, members or not.
``global_process_set`` (id 0) holds every rank.
"""

import operator
from typing import Dict, List, Optional, Sequence, Union

from accord import _core

__all__ = ["ProcessSet", "global_process_set", "add_process_set", "remove_process_set"]


class ProcessSet:
    """A set of global ranks that collectives can run on.

    Args:
        ranks: the global ranks of the set (any order; duplicates are an
            error), or an mpi4py communicator whose processes form the set.

    Attributes:
        ranks: the sorted global ranks.
        process_set_id: the id accord gave the set, or None while it is not
            registered.
    """

    def __init__(self, ranks: Union[Sequence[int], "object"]):
        if hasattr(ranks, "Get_group"):  # an mpi4py communicator
            ranks = _world_ranks_of(ranks)
        try:
            values = [operator.index(r) for r in ranks]
        except TypeError:
            raise TypeError(f"a ProcessSet takes a sequence of int ranks, got {ranks!r}") from None
        if len(set(values)) != len(values):
            raise ValueError(f"process set ranks must be unique, got {values}")
        self._ranks: List[int] = sorted(values)
        self.process_set_id: Optional[int] = None

    @property
    def ranks(self) -> List[int]:
        return list(self._ranks)

    def size(self) -> Optional[int]:
        """The number of ranks in the set, or None while it is not registered."""
        if self.process_set_id is None:
            return None
        return len(self.ranks)

    def rank(self) -> Optional[int]:
        """This process's rank within the set: -1 if it is not a member, None
        while the set is not registered."""
        if self.process_set_id is None:
            return None
        return int(_core.process_set_rank(self.process_set_id))

    def included(self) -> Optional[bool]:
        """Whether this process is a member, or None while the set is not registered."""
        if self.process_set_id is None:
            return None
        return _core.rank() in self.ranks

    def __repr__(self) -> str:
        return f"ProcessSet(process_set_id={self.process_set_id}, ranks={self.ranks})"


class _GlobalProcessSet(ProcessSet):
    """The set of every rank; its ranks are known once accord is initialised."""

    def __init__(self):
        super().__init__([])
        self.process_set_id = _core.GLOBAL_PROCESS_SET

    @property
    def ranks(self) -> List[int]:
        return list(range(_core.size())) if _core.is_initialized() else []

    def size(self) -> Optional[int]:
        return _core.size() if _core.is_initialized() else None

    def rank(self) -> Optional[int]:
        return _core.rank() if _core.is_initialized() else None

    def included(self) -> Optional[bool]:
        return True if _core.is_initialized() else None

    def __repr__(self) -> str:
        return f"ProcessSet(process_set_id=0, ranks={self.ranks})"


global_process_set: ProcessSet = _GlobalProcessSet()

# Registered sets by id (the global one excluded). Guarded by the GIL.
_registered: Dict[int, ProcessSet] = {}


def _world_ranks_of(comm) -> List[int]:
    from mpi4py import MPI  # only for sets given as communicators

    group = comm.Get_group()
    return list(MPI.Group.Translate_ranks(group, list(range(group.Get_size())), MPI.COMM_WORLD.Get_group()))


def _as_process_set(value: Union[ProcessSet, Sequence[int]]) -> ProcessSet:
    return value if isinstance(value, ProcessSet) else ProcessSet(value)


def _registered_at_init(sets: Sequence[ProcessSet]) -> None:
    """Gives the sets passed to init() their ids (1, 2, ... in order)."""
    for index, s in enumerate(sets, start=1):
        s.process_set_id = index
        _registered[index] = s


def _forget_all() -> None:
    """After shutdown: every set but the global one is unregistered."""
    for s in _registered.values():
        s.process_set_id = None
    _registered.clear()


def process_set_id(process_set: Union[ProcessSet, int]) -> int:
    """The core's id of ``process_set`` (a ProcessSet or an int id).

    Raises:
        ValueError: the set is not registered.
    """
    if isinstance(process_set, ProcessSet):
        if process_set.process_set_id is None:
            raise ValueError(
                f"{process_set!r} is not registered with accord: pass it to "
                f"init(process_sets=...) or add_process_set() first"
            )
        return process_set.process_set_id
    try:
        return operator.index(process_set)
    except TypeError:
        raise TypeError(f"process_set must be a ProcessSet or an int id, got {process_set!r}") from None


def add_process_set(process_set: Union[ProcessSet, Sequence[int]]) -> ProcessSet:
    """Registers a process set while accord runs and returns it.

    Collective: every rank calls it with the same ranks, in the same order
    relative to other additions and removals. Blocks until the set exists.

    Args:
        process_set: a ``ProcessSet`` or a sequence of global ranks.

    Raises:
        ValueError: the set is already registered, or its ranks are invalid.
        AccordError: the ranks disagree.
    """
    s = _as_process_set(process_set)
    if s.process_set_id is not None:
        raise ValueError(f"{s!r} is already registered with accord")
    new_id = int(_core.add_process_set(s.ranks))
    s.process_set_id = new_id
    _registered[new_id] = s
    return s


def remove_process_set(process_set: ProcessSet) -> bool:
    """Removes a registered process set; its pending operations fail.

    Collective, like ``add_process_set``. Returns False (and does nothing)
    for the global set or a set that is not registered, True otherwise.
    """
    set_id = process_set.process_set_id
    if set_id is None or set_id == _core.GLOBAL_PROCESS_SET:
        return False
    _core.remove_process_set(set_id)
    process_set.process_set_id = None
    _registered.pop(set_id, None)
    return True
