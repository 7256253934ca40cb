"""Collectives on numpy arrays.

Every function has an ``*_async`` form that enqueues the operation and
returns a ``Handle`` at once; ``handle.wait()`` (or ``synchronize(handle)``)
returns the result. The plain forms enqueue and wait. A trailing underscore
means in place: the result overwrites the input array.

Arrays travel to the core through DLPack without a copy. They must be
C-contiguous (a non-contiguous array raises ``ValueError``). CUDA tensors of
any framework that speaks DLPack (CuPy, JAX, ...) are taken as they are:
the core waits for their producer's work through DLPack's stream handshake
(on the legacy default stream), and outputs the core allocates for them are
DLPack tensors on the same device, for the framework's ``from_dlpack``.
Their broadcasts are in place only. ``bool`` arrays
travel as ``uint8`` views that the core treats as bool (Sum and Max are
logical OR, Min and Product logical AND). Outputs whose size the core decides
(allgather, alltoall, reducescatter) are the core's own allocation, handed
over without a copy.

``name`` matches an operation across ranks; unnamed operations are matched in
submission order. ``root_rank`` is a global rank, also within a process set.
"""

import operator
from typing import Any, List, Optional, Sequence, Tuple, Union

import numpy as np

from accord import _core
from accord._core import RequestError
from accord.handles import Handle
from accord.ops import Average, Max, Min, Product, Sum, core_op
from accord.process_sets import ProcessSet, global_process_set, process_set_id

__all__ = [
    "allreduce",
    "allreduce_",
    "allreduce_async",
    "allreduce_async_",
    "grouped_allreduce",
    "grouped_allreduce_",
    "grouped_allreduce_async",
    "grouped_allreduce_async_",
    "allgather",
    "allgather_async",
    "grouped_allgather",
    "grouped_allgather_async",
    "broadcast",
    "broadcast_",
    "broadcast_async",
    "broadcast_async_",
    "alltoall",
    "alltoall_async",
    "reducescatter",
    "reducescatter_async",
    "grouped_reducescatter",
    "grouped_reducescatter_async",
    "barrier",
    "join",
]

ProcessSetLike = Union[ProcessSet, int]
ArrayLike = Any

# ------------------------------------------------------------------ helpers


# DLPack device types of CUDA memory (kDLCUDA, kDLCUDAManaged).
_CUDA_DEVICES = (2, 13)


def _on_gpu(array: Any) -> bool:
    """Whether ``array`` is a CUDA tensor of a framework that speaks DLPack
    (CuPy, JAX, ...): it goes to the core as it is, not through numpy."""
    if isinstance(array, np.ndarray):
        return False
    device = getattr(array, "__dlpack_device__", None)
    if device is None:
        return False
    try:
        return device()[0] in _CUDA_DEVICES
    except Exception:  # noqa: BLE001 - a producer that cannot say is not on the GPU
        return False


def _input(array: ArrayLike, what: str) -> np.ndarray:
    """An array the core may read: contiguous, exportable through DLPack (a
    CUDA tensor of another framework as it is)."""
    if _on_gpu(array):
        return array
    a = np.asarray(array)
    if not a.flags.c_contiguous:
        raise RequestError(
            f"{what} is not C-contiguous (shape {a.shape}, strides {a.strides}); accord needs "
            f"C-contiguous arrays: pass np.ascontiguousarray(...) "
        )
    if not a.flags.writeable:
        a = a.copy()  # numpy's DLPack export refuses read-only arrays; the core only reads inputs
    return a


def _inplace(array: np.ndarray, what: str) -> np.ndarray:
    if _on_gpu(array):
        return array
    if not isinstance(array, np.ndarray):
        raise TypeError(
            f"{what} of an in-place operation must be a numpy.ndarray, got {type(array).__name__}"
        )
    if not array.flags.c_contiguous:
        raise RequestError(
            f"{what} is not C-contiguous (shape {array.shape}, strides {array.strides}); in-place "
            f"operations need C-contiguous arrays"
        )
    if not array.flags.writeable:
        raise RequestError(f"{what} is read-only; an in-place operation writes into it")
    return array


def _is_bool(arrays: Sequence[np.ndarray]) -> bool:
    """Whether the arrays are bool (all of them); a group may not mix."""
    flags = {getattr(a, "dtype", None) == np.bool_ for a in arrays}
    if len(flags) > 1:
        raise RequestError("a grouped operation cannot mix bool arrays with arrays of other dtypes")
    return flags == {True}


def _wire(a: np.ndarray, is_bool: bool) -> np.ndarray:
    return a.view(np.uint8) if is_bool else a


def _override(is_bool: bool) -> Optional[str]:
    return "bool" if is_bool else None


def _received(tensor, is_bool: bool) -> np.ndarray:
    """An output the core allocated, as a writeable array (no copy).

    ``numpy.asarray`` reads the wrapper's ``__array_interface__`` and keeps
    the wrapper (which owns the memory) as the array's base;
    ``numpy.from_dlpack`` would work too, but gives read-only arrays. An
    output on a CUDA device stays a DLPack tensor (bool ones as uint8): the
    caller's framework takes it over (``cupy.from_dlpack``,
    ``jax.dlpack.from_dlpack``).
    """
    if tensor.__dlpack_device__()[0] in _CUDA_DEVICES:
        return tensor
    out = np.asarray(tensor)
    return out.view(np.bool_) if is_bool else out


def _new_output(a: Any) -> Optional[np.ndarray]:
    """The output of an out-of-place allreduce: a numpy array like ``a``, or
    None for a CUDA array (the core allocates it on the array's device)."""
    return None if _on_gpu(a) else np.empty_like(a)


def _root_in_set(root_rank: int, set_id: int) -> int:
    try:
        root_rank = operator.index(root_rank)
    except TypeError:
        raise TypeError(f"root_rank must be an int, got {type(root_rank).__name__}") from None
    if set_id == _core.GLOBAL_PROCESS_SET:
        return root_rank
    ranks = list(_core.process_set_ranks(set_id))
    if root_rank not in ranks:
        raise RequestError(
            f"root_rank {root_rank} is not a member of process set {set_id} (global ranks {ranks}); "
            f"root_rank is a global rank"
        )
    return ranks.index(root_rank)


# ---------------------------------------------------------------- allreduce


def _grouped_allreduce(
    inputs: Sequence[np.ndarray],
    outputs: Sequence[np.ndarray],
    grouped: bool,
    name: Optional[str],
    op: int,
    prescale_factor: float,
    postscale_factor: float,
    process_set: ProcessSetLike,
) -> Handle:
    is_bool = _is_bool(inputs)
    # Positional: keyword arguments cost more than the call itself.
    args = (
        name,
        core_op(op),
        float(prescale_factor),
        float(postscale_factor),
        process_set_id(process_set),
        _override(is_bool),
    )
    wire_in = [_wire(a, is_bool) for a in inputs]
    # An output of None (CUDA arrays of other frameworks) is allocated by the
    # core on the input's device and comes back from the handle.
    wire_out = [
        wire_in[i] if outputs[i] is inputs[i] else None if o is None else _wire(o, is_bool)
        for i, o in enumerate(outputs)
    ]
    if any(o is None for o in outputs):
        core_handle = (
            _core.grouped_allreduce_async(wire_in, wire_out, *args)
            if grouped
            else _core.allreduce_async(wire_in[0], None, *args)
        )

        def finish(h):
            made = iter(h.outputs())
            results = [next(made) if o is None else o for o in outputs]
            return results if grouped else results[0]

        return Handle(core_handle, finish)
    if grouped:
        core_handle = _core.grouped_allreduce_async(wire_in, wire_out, *args)
        return Handle(core_handle, lambda _: list(outputs))
    return Handle(_core.allreduce_async(wire_in[0], wire_out[0], *args), None, outputs[0])


_ndarray = np.ndarray
_FAST_OPS = {op: core_op(op) for op in (Average, Sum, Min, Max, Product)}
_core_allreduce_async = _core.allreduce_async


def _allreduce_fast(
    array: Any,
    in_place: bool,
    op: Any,
    name: Optional[str],
    prescale_factor: Any,
    postscale_factor: Any,
    process_set: ProcessSetLike,
) -> Optional[Tuple[Any, np.ndarray]]:
    """Enqueues the common allreduce straight to the core.

    The common case: a C-contiguous, writeable, non-bool ``numpy.ndarray``.
    Returns ``(core handle, result)``, or None for any other array, which the
    general path then handles (and reports errors for) as before. The checks
    that remain run in the general path's order, so errors are the same.
    """
    if type(array) is not _ndarray:
        return None
    flags = array.flags
    if not (flags.c_contiguous and flags.writeable) or array.dtype.kind == "b":
        return None
    try:
        core = _FAST_OPS[op]
    except (KeyError, TypeError):
        core = core_op(op)  # raises the error for an invalid op
    prescale_factor = float(prescale_factor)
    postscale_factor = float(postscale_factor)
    set_id = 0 if process_set is global_process_set else process_set_id(process_set)
    output = array if in_place else np.empty_like(array)
    return _core_allreduce_async(
        array, output, name, core, prescale_factor, postscale_factor, set_id, None
    ), output


def allreduce_async(
    array: ArrayLike,
    op: int = Average,
    name: Optional[str] = None,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
    process_set: ProcessSetLike = global_process_set,
) -> Handle:
    """Starts an allreduce of ``array`` into a new array; ``wait()`` returns it.

    Args:
        array: the array to reduce (same dtype and shape on every rank).
        op: Average (divides by the process set's size), Sum, Min, Max, Product or
            Adasum (floating dtypes, 2^k ranks; see docs/python.md, "Adasum").
        name: matches the operation across ranks; None for submission order.
        prescale_factor: multiplies the input before the reduction.
        postscale_factor: multiplies the result.
        process_set: the ranks taking part.
    """
    fast = _allreduce_fast(array, False, op, name, prescale_factor, postscale_factor, process_set)
    if fast is not None:
        return Handle(fast[0], None, fast[1])
    a = _input(array, "input")
    return _grouped_allreduce(
        [a], [_new_output(a)], False, name, op, prescale_factor, postscale_factor, process_set
    )


def allreduce_async_(
    array: np.ndarray,
    op: int = Average,
    name: Optional[str] = None,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
    process_set: ProcessSetLike = global_process_set,
) -> Handle:
    """Starts an in-place allreduce of ``array``; ``wait()`` returns ``array``."""
    fast = _allreduce_fast(array, True, op, name, prescale_factor, postscale_factor, process_set)
    if fast is not None:
        return Handle(fast[0], None, array)
    a = _inplace(array, "input")
    return _grouped_allreduce([a], [a], False, name, op, prescale_factor, postscale_factor, process_set)


def allreduce(
    array: ArrayLike,
    op: int = Average,
    name: Optional[str] = None,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
    process_set: ProcessSetLike = global_process_set,
) -> np.ndarray:
    """Reduces ``array`` across the ranks of ``process_set``; returns a new array.

    See ``allreduce_async`` for the arguments.
    """
    fast = _allreduce_fast(array, False, op, name, prescale_factor, postscale_factor, process_set)
    if fast is not None:
        fast[0].wait()
        return fast[1]
    return allreduce_async(array, op, name, prescale_factor, postscale_factor, process_set).wait()


def allreduce_(
    array: np.ndarray,
    op: int = Average,
    name: Optional[str] = None,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
    process_set: ProcessSetLike = global_process_set,
) -> np.ndarray:
    """Reduces ``array`` in place across the ranks of ``process_set``; returns it."""
    fast = _allreduce_fast(array, True, op, name, prescale_factor, postscale_factor, process_set)
    if fast is not None:
        fast[0].wait()
        return array
    return allreduce_async_(array, op, name, prescale_factor, postscale_factor, process_set).wait()


def grouped_allreduce_async(
    arrays: Sequence[ArrayLike],
    op: int = Average,
    name: Optional[str] = None,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
    process_set: ProcessSetLike = global_process_set,
) -> Handle:
    """Starts allreduces of ``arrays`` as one group (negotiated and run together);
    ``wait()`` returns a list of new arrays."""
    inputs = [_input(a, f"input {i}") for i, a in enumerate(arrays)]
    return _grouped_allreduce(
        inputs,
        [_new_output(a) for a in inputs],
        True,
        name,
        op,
        prescale_factor,
        postscale_factor,
        process_set,
    )


def grouped_allreduce_async_(
    arrays: Sequence[np.ndarray],
    op: int = Average,
    name: Optional[str] = None,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
    process_set: ProcessSetLike = global_process_set,
) -> Handle:
    """Starts in-place allreduces of ``arrays`` as one group; ``wait()`` returns ``arrays``."""
    inputs = [_inplace(a, f"input {i}") for i, a in enumerate(arrays)]
    return _grouped_allreduce(inputs, inputs, True, name, op, prescale_factor, postscale_factor, process_set)


def grouped_allreduce(
    arrays: Sequence[ArrayLike],
    op: int = Average,
    name: Optional[str] = None,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
    process_set: ProcessSetLike = global_process_set,
) -> List[np.ndarray]:
    """Reduces every array of ``arrays`` as one group; returns new arrays."""
    return grouped_allreduce_async(arrays, op, name, prescale_factor, postscale_factor, process_set).wait()


def grouped_allreduce_(
    arrays: Sequence[np.ndarray],
    op: int = Average,
    name: Optional[str] = None,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
    process_set: ProcessSetLike = global_process_set,
) -> List[np.ndarray]:
    """Reduces every array of ``arrays`` in place as one group; returns them."""
    return grouped_allreduce_async_(arrays, op, name, prescale_factor, postscale_factor, process_set).wait()


# ---------------------------------------------------------------- allgather


def allgather_async(
    array: ArrayLike, name: Optional[str] = None, process_set: ProcessSetLike = global_process_set
) -> Handle:
    """Starts an allgather: ``wait()`` returns every rank's ``array``
    concatenated along dim 0, in rank order. Dim 0 may differ between ranks;
    the other dims must agree."""
    a = _input(array, "input")
    is_bool = _is_bool([a])
    core_handle = _core.allgather_async(
        _wire(a, is_bool),
        name=name,
        process_set=process_set_id(process_set),
        dtype_override=_override(is_bool),
    )
    return Handle(core_handle, lambda h: _received(h.outputs()[0], is_bool))


def allgather(
    array: ArrayLike, name: Optional[str] = None, process_set: ProcessSetLike = global_process_set
) -> np.ndarray:
    """Concatenates every rank's ``array`` along dim 0 (see ``allgather_async``)."""
    return allgather_async(array, name, process_set).wait()


def grouped_allgather_async(
    arrays: Sequence[ArrayLike], name: Optional[str] = None, process_set: ProcessSetLike = global_process_set
) -> Handle:
    """Starts allgathers of ``arrays`` as one group; ``wait()`` returns a list.

    The group may mix bool arrays with arrays of other dtypes (as in
    accord.torch)."""
    inputs = [_input(a, f"input {i}") for i, a in enumerate(arrays)]
    is_bool = [getattr(a, "dtype", None) == np.bool_ for a in inputs]
    # One dtype override per member: bool arrays travel as uint8 views that
    # the core treats as bool, so a bool member and a uint8 one still differ.
    core_handle = _core.grouped_allgather_async(
        [_wire(a, b) for a, b in zip(inputs, is_bool)],
        name=name,
        process_set=process_set_id(process_set),
        dtype_override=[_override(b) for b in is_bool],
    )
    return Handle(core_handle, lambda h: [_received(t, b) for t, b in zip(h.outputs(), is_bool)])


def grouped_allgather(
    arrays: Sequence[ArrayLike], name: Optional[str] = None, process_set: ProcessSetLike = global_process_set
) -> List[np.ndarray]:
    """Allgathers every array of ``arrays`` as one group."""
    return grouped_allgather_async(arrays, name, process_set).wait()


# ---------------------------------------------------------------- broadcast


def _broadcast(
    a: np.ndarray, out: np.ndarray, root_rank: int, name: Optional[str], process_set: ProcessSetLike
) -> Handle:
    is_bool = _is_bool([a])
    set_id = process_set_id(process_set)
    wire_in = _wire(a, is_bool)
    wire_out = wire_in if out is a else _wire(out, is_bool)
    core_handle = _core.broadcast_async(
        wire_in,
        wire_out,
        _root_in_set(root_rank, set_id),
        name=name,
        process_set=set_id,
        dtype_override=_override(is_bool),
    )
    return Handle(core_handle, lambda _: out)


def broadcast_async(
    array: ArrayLike,
    root_rank: int,
    name: Optional[str] = None,
    process_set: ProcessSetLike = global_process_set,
) -> Handle:
    """Starts a broadcast of ``root_rank``'s ``array``; ``wait()`` returns a new
    array with the root's values on every rank. ``root_rank`` is a global rank."""
    a = _input(array, "input")
    if _on_gpu(a):
        raise RequestError(
            "a broadcast of CUDA arrays is in place: use broadcast_ (or broadcast_async_) on a copy"
        )
    return _broadcast(a, np.empty_like(a), root_rank, name, process_set)


def broadcast_async_(
    array: np.ndarray,
    root_rank: int,
    name: Optional[str] = None,
    process_set: ProcessSetLike = global_process_set,
) -> Handle:
    """Starts an in-place broadcast: ``array`` is overwritten with the root's values."""
    a = _inplace(array, "input")
    return _broadcast(a, a, root_rank, name, process_set)


def broadcast(
    array: ArrayLike,
    root_rank: int,
    name: Optional[str] = None,
    process_set: ProcessSetLike = global_process_set,
) -> np.ndarray:
    """Returns ``root_rank``'s ``array`` on every rank (a new array)."""
    return broadcast_async(array, root_rank, name, process_set).wait()


def broadcast_(
    array: np.ndarray,
    root_rank: int,
    name: Optional[str] = None,
    process_set: ProcessSetLike = global_process_set,
) -> np.ndarray:
    """Overwrites ``array`` with ``root_rank``'s on every rank; returns it."""
    return broadcast_async_(array, root_rank, name, process_set).wait()


# ----------------------------------------------------------------- alltoall


def alltoall_async(
    array: ArrayLike,
    splits: Optional[Sequence[int]] = None,
    name: Optional[str] = None,
    process_set: ProcessSetLike = global_process_set,
) -> Handle:
    """Starts an alltoall: ``splits[j]`` rows (dim 0) of ``array`` go to rank j
    of the set (``None``: dim 0 split evenly). ``wait()`` returns what every
    rank sent here, concatenated in rank order, and, when ``splits`` was
    given, also how many rows came from each rank: ``(output, received_splits)``."""
    a = _input(array, "input")
    is_bool = _is_bool([a])
    split_list = None
    if splits is not None:
        split_list = [operator.index(s) for s in np.asarray(splits).reshape(-1).tolist()]
    core_handle = _core.alltoall_async(
        _wire(a, is_bool),
        split_list,
        name=name,
        process_set=process_set_id(process_set),
        dtype_override=_override(is_bool),
    )

    def finish(h):
        out = _received(h.outputs()[0], is_bool)
        if splits is None:
            return out
        return out, np.asarray(h.received_splits(), dtype=np.int64)

    return Handle(core_handle, finish)


def alltoall(
    array: ArrayLike,
    splits: Optional[Sequence[int]] = None,
    name: Optional[str] = None,
    process_set: ProcessSetLike = global_process_set,
) -> Union[np.ndarray, Tuple[np.ndarray, np.ndarray]]:
    """Exchanges rows of ``array`` between the ranks (see ``alltoall_async``).

    Returns the output, or ``(output, received_splits)`` when ``splits`` is given.
    """
    return alltoall_async(array, splits, name, process_set).wait()


# ------------------------------------------------------------ reducescatter


def reducescatter_async(
    array: ArrayLike,
    op: int = Average,
    name: Optional[str] = None,
    process_set: ProcessSetLike = global_process_set,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
) -> Handle:
    """Starts a reducescatter: the arrays are reduced (Sum or Average) and rank
    i of the set gets the i-th block of dim 0; dim 0 is split as evenly as
    possible, the first ``dim0 % size`` ranks getting one row more."""
    a = _input(array, "input")
    is_bool = _is_bool([a])
    core_handle = _core.reducescatter_async(
        _wire(a, is_bool),
        name=name,
        op=core_op(op),
        prescale_factor=float(prescale_factor),
        postscale_factor=float(postscale_factor),
        process_set=process_set_id(process_set),
        dtype_override=_override(is_bool),
    )
    return Handle(core_handle, lambda h: _received(h.outputs()[0], is_bool))


def reducescatter(
    array: ArrayLike,
    op: int = Average,
    name: Optional[str] = None,
    process_set: ProcessSetLike = global_process_set,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
) -> np.ndarray:
    """Reduces ``array`` across the ranks and returns this rank's block of dim 0."""
    return reducescatter_async(array, op, name, process_set, prescale_factor, postscale_factor).wait()


def grouped_reducescatter_async(
    arrays: Sequence[ArrayLike],
    op: int = Average,
    name: Optional[str] = None,
    process_set: ProcessSetLike = global_process_set,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
) -> Handle:
    """Starts reducescatters of ``arrays`` as one group; ``wait()`` returns a list."""
    inputs = [_input(a, f"input {i}") for i, a in enumerate(arrays)]
    is_bool = _is_bool(inputs)
    core_handle = _core.grouped_reducescatter_async(
        [_wire(a, is_bool) for a in inputs],
        name=name,
        op=core_op(op),
        prescale_factor=float(prescale_factor),
        postscale_factor=float(postscale_factor),
        process_set=process_set_id(process_set),
        dtype_override=_override(is_bool),
    )
    return Handle(core_handle, lambda h: [_received(t, is_bool) for t in h.outputs()])


def grouped_reducescatter(
    arrays: Sequence[ArrayLike],
    op: int = Average,
    name: Optional[str] = None,
    process_set: ProcessSetLike = global_process_set,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
) -> List[np.ndarray]:
    """Reducescatters every array of ``arrays`` as one group."""
    return grouped_reducescatter_async(
        arrays, op, name, process_set, prescale_factor, postscale_factor
    ).wait()


# ------------------------------------------------------------------ control


def barrier(process_set: ProcessSetLike = global_process_set) -> None:
    """Returns once every rank of ``process_set`` has called ``barrier``."""
    _core.barrier_async(process_set_id(process_set)).wait()


def join(process_set: ProcessSetLike = global_process_set) -> int:
    """Declares that this rank has no more work and waits for the others.

    Until every rank of the set has joined, this rank takes part in the
    others' Sum and Average allreduces with zeros; any other collective they
    submit meanwhile raises ``AccordError`` on each of them, naming the
    joined ranks. Returns the last rank to join.
    """
    handle = _core.join_async(process_set_id(process_set))
    handle.wait()
    return handle.value()
