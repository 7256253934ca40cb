"""Argument checks and tensor conversions shared by ``accord.torch``'s collectives.

Tensors reach the core through DLPack: ``compact`` gives a detached,
contiguous tensor, ``exported`` the object the core is handed (a uint8 view
for bool, which torch 1.13's DLPack refuses), and ``imported`` turns an output the
core allocated back into a torch tensor without a copy. For CUDA tensors,
``stream_of`` names the stream the core waits for and ``cuda_allocator``
makes the outputs the core sizes.
"""

import operator
import warnings
from typing import Any, Callable, List, Optional, Sequence, Tuple

import torch
from torch.utils.dlpack import from_dlpack

from accord import _core
from accord._core import RequestError
from accord.ops import Average, Sum, core_op, op_name
from accord.process_sets import process_set_id as set_id

ProcessSetLike = Any  # an accord ProcessSet (or its integer id)


def resolve_op(op: Optional[int], average: Optional[bool] = None) -> int:
    """The op to use, from ``op`` and Horovod's deprecated ``average`` flag.

    Raises ValueError for unknown ops.
    """
    if average is not None:
        if op is not None:
            raise RequestError("give either op or the deprecated average argument, not both")
        warnings.warn(
            "the average argument is deprecated; use op=Average or op=Sum", DeprecationWarning, stacklevel=3
        )
        op = Average if average else Sum
    if op is None:
        return Average
    core_op(op)  # validates
    return op


def reducescatter_op(op: Optional[int], what: str) -> int:
    """The op of a reducescatter: ``op`` resolved, and Sum or Average."""
    op = resolve_op(op)
    if op not in (Sum, Average):
        raise RequestError(f"{what} supports op=Sum or op=Average, got op={op_name(op)}")
    return op


def name_arg(name: Optional[str]) -> Optional[str]:
    """``name`` if it is a str or None; TypeError otherwise."""
    if name is not None and not isinstance(name, str):
        raise TypeError(f"name must be a str or None, got {type(name).__name__} {name!r}")
    return name


def set_ranks(process_set: ProcessSetLike) -> List[int]:
    """The global ranks of a process set."""
    return list(_core.process_set_ranks(set_id(process_set)))


def set_size(process_set: ProcessSetLike) -> int:
    """The number of ranks in a process set."""
    return len(set_ranks(process_set))


def set_rank(process_set: ProcessSetLike) -> int:
    """This process's rank within a process set (-1 if it is not a member)."""
    return int(_core.process_set_rank(set_id(process_set)))


def root_in_set(root_rank: int, ps_id: int) -> int:
    """Translates a global root rank to its rank within process set ``ps_id``."""
    try:
        root_rank = operator.index(root_rank)
    except TypeError:
        raise TypeError(f"root_rank must be an int, got {type(root_rank).__name__}") from None
    if ps_id == 0:
        return root_rank
    ranks = list(_core.process_set_ranks(ps_id))
    try:
        return ranks.index(root_rank)
    except ValueError:
        raise RequestError(
            f"root_rank {root_rank} is not a member of process set {ps_id} "
            f"(global ranks {ranks}); root_rank is a global rank"
        ) from None


def splits_list(splits: Any) -> Optional[List[int]]:
    """alltoall splits as a list of ints (from a tensor, array or sequence)."""
    if splits is None:
        return None
    if isinstance(splits, torch.Tensor):
        if splits.dim() != 1 or splits.dtype.is_floating_point or splits.dtype == torch.bool:
            raise RequestError(
                f"alltoall splits must be a 1-D integer tensor, got dtype "
                f"{splits.dtype} with shape {list(splits.shape)}"
            )
        return [int(s) for s in splits.tolist()]
    try:
        return [operator.index(s) for s in splits]
    except TypeError:
        raise TypeError("alltoall splits must be a sequence of ints or a 1-D integer tensor") from None


# ------------------------------------------------------- tensors and DLPack


def check_tensor(tensor: Any, what: str) -> torch.Tensor:
    """``tensor`` if it is a dense torch tensor; TypeError or ValueError naming ``what`` if not."""
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"{what} expects a torch.Tensor, got {type(tensor).__name__}")
    if tensor.layout != torch.strided:
        raise RequestError(
            f"{what} expects a dense tensor, got layout {tensor.layout}"
            + ("; use sparse_allreduce_async for sparse tensors" if tensor.is_sparse else "")
        )
    return tensor


def compact(tensor: torch.Tensor) -> torch.Tensor:
    """A detached, C-contiguous tensor holding ``tensor``'s values (a copy
    only when ``tensor`` is not contiguous)."""
    tensor = tensor.detach()
    return tensor if tensor.is_contiguous() else tensor.contiguous()


def exported(tensor: torch.Tensor) -> Tuple[torch.Tensor, Optional[str]]:
    """What the core is given for a compact tensor, and the dtype override.

    torch 1.13's DLPack has no bool (2.x has), so a bool tensor travels as a
    uint8 view of the same memory and the core is told to treat it as bool:
    one way that works with every torch.
    """
    if tensor.dtype == torch.bool:
        return tensor.view(torch.uint8), "bool"
    return tensor, None


def group_override(tensors: Sequence[torch.Tensor], what: str) -> Optional[str]:
    """The one dtype override the core takes for a group: "bool" if every
    member is bool. A reduction cannot mix bool with other dtypes in a group."""
    kinds = {t.dtype == torch.bool for t in tensors}
    if kinds == {True}:
        return "bool"
    if kinds == {True, False}:
        raise RequestError(
            f"{what}: a group cannot mix bool tensors with other dtypes; "
            f"submit the bool tensors as a group of their own"
        )
    return None


def imported(output: Any, dtype_override: Optional[str]) -> torch.Tensor:
    """A torch tensor over an output the core allocated (no copy).

    CUDA outputs are torch tensors already (``cuda_allocator`` made them);
    CPU outputs arrive through DLPack.
    """
    tensor = output if isinstance(output, torch.Tensor) else from_dlpack(output)
    if dtype_override == "bool":
        tensor = tensor.view(torch.bool)
    return tensor


# ------------------------------------------------------------ CUDA tensors

_TORCH_DTYPES = {
    "uint8": torch.uint8,
    "int8": torch.int8,
    "int16": torch.int16,
    "int32": torch.int32,
    "int64": torch.int64,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float32": torch.float32,
    "float64": torch.float64,
    "bool": torch.bool,
}


def stream_of(tensor: torch.Tensor) -> Optional[int]:
    """The current CUDA stream of a CUDA tensor's device (an int
    cudaStream_t, which the core waits for before reading the tensor), or
    None for a CPU tensor."""
    if tensor.is_cuda:
        return torch.cuda.current_stream(tensor.device).cuda_stream
    return None


def cuda_allocator(
    tensor: torch.Tensor,
) -> Optional[Callable[[Tuple[int, ...], str, int], Tuple[torch.Tensor, int]]]:
    """For a CUDA input, the function that allocates the outputs the core
    sizes (allgather, alltoall, reducescatter): torch tensors on the input's
    device, made on the current stream of the enqueue, so that the caching
    allocator ties them to it. The core calls it on its own thread (holding
    the GIL for the call). None for a CPU input."""
    if not tensor.is_cuda:
        return None
    stream = torch.cuda.current_stream(tensor.device)

    def allocate(shape: Tuple[int, ...], dtype: str, device: int) -> Tuple[torch.Tensor, int]:
        with torch.cuda.device(device), torch.cuda.stream(stream):
            output = torch.empty(shape, dtype=_TORCH_DTYPES[dtype], device=stream.device)
        return output, output.data_ptr()

    return allocate


def input_list(tensors: Any, what: str) -> List[torch.Tensor]:
    """The tensors of a grouped operation as a non-empty list of dense tensors."""
    if isinstance(tensors, torch.Tensor):
        raise TypeError(f"{what} expects a list of tensors, got a single tensor")
    tensors = list(tensors)
    if not tensors:
        raise RequestError(f"{what} needs at least one tensor")
    return [check_tensor(t, what) for t in tensors]


def copy_back(targets: List[torch.Tensor], buffers: List[torch.Tensor]) -> None:
    """Copies in-place results into the caller's tensors that ``compact`` copied."""
    with torch.no_grad():
        for target, buffer in zip(targets, buffers):
            if not target.is_contiguous():
                target.copy_(buffer)
