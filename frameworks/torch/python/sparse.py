"""Allreduce of sparse COO tensors (``sparse_allreduce_async``)."""

from typing import Optional

import torch

from accord import _core, global_process_set
from accord._core import RequestError
from accord.ops import Average, Sum, op_name

from .handles import CallableHandle, register
from .tensor_args import ProcessSetLike, compact, exported, imported, name_arg, resolve_op, set_id

__all__ = ["sparse_allreduce_async"]


def sparse_allreduce_async(
    tensor: torch.Tensor, name: Optional[str], op: int, process_set: ProcessSetLike = global_process_set
) -> int:
    """Starts reducing a sparse COO tensor across ranks (Sum or Average).

    Every rank's indices and values are allgathered (as ``<name>.indices``
    and ``<name>.values``) and combined into one coalesced sparse tensor;
    Average then divides the values by the set's size (integer values are
    rounded toward zero). The sparse shapes must agree across ranks.

    Returns:
        A handle for ``poll``/``synchronize``, which returns the sparse
        result. The handle can also be called, as Horovod's can.
    """
    if not isinstance(tensor, torch.Tensor) or not tensor.is_sparse:
        raise RequestError(
            "sparse_allreduce_async expects a sparse COO tensor (use allreduce_async for dense tensors)"
        )
    name_arg(name)
    op = resolve_op(op)
    if op not in (Sum, Average):
        raise RequestError(f"sparse_allreduce_async supports op=Sum or op=Average, got op={op_name(op)}")
    sparse = tensor.detach()
    shape = sparse.shape
    # Allgather concatenates along dimension 0, so indices travel as
    # [nnz, sparse_dim] and are transposed back afterwards.
    indices = sparse._indices().t().contiguous()
    values = compact(sparse._values())
    ps_id = set_id(process_set)
    values_exported, override = exported(values)
    index_handle = _core.allgather_async(
        indices, name=None if name is None else f"{name}.indices", process_set=ps_id
    )
    value_handle = _core.allgather_async(
        values_exported,
        name=None if name is None else f"{name}.values",
        process_set=ps_id,
        dtype_override=override,
    )
    set_size = len(_core.process_set_ranks(ps_id))

    def finish() -> torch.Tensor:
        all_indices = imported(index_handle.outputs()[0], None)
        all_values = imported(value_handle.outputs()[0], override)
        result = torch.sparse_coo_tensor(all_indices.t(), all_values, shape).coalesce()
        if op == Average:
            summed = result._values()
            if summed.dtype.is_floating_point or summed.dtype.is_complex:
                averaged = summed / set_size
            else:
                averaged = torch.div(summed, set_size, rounding_mode="trunc")
            result = torch.sparse_coo_tensor(result._indices(), averaged, shape).coalesce()
        return result

    handle = register([index_handle, value_handle], (sparse, indices, values, values_exported), finish)
    return CallableHandle(handle)
