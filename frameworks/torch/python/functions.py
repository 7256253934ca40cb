"""Broadcasting and gathering arbitrary picklable Python objects.

Objects are serialised with cloudpickle when it is installed (so lambdas and
locally defined classes work) and with the standard pickle module otherwise,
and travel as uint8 tensors through accord's collectives.
"""

import io
import pickle
from typing import Any, List, Optional

import torch

from accord import global_process_set

from . import mpi_ops as _ops

try:
    import cloudpickle as _pickler
except ImportError:  # cloudpickle is optional
    _pickler = pickle

__all__ = ["broadcast_object", "allgather_object"]


def _to_tensor(obj: Any) -> torch.Tensor:
    buffer = io.BytesIO()
    _pickler.dump(obj, buffer, protocol=pickle.HIGHEST_PROTOCOL)
    return torch.frombuffer(bytearray(buffer.getbuffer()), dtype=torch.uint8)


def _from_tensor(tensor: torch.Tensor) -> Any:
    # Anything cloudpickle writes, pickle reads (cloudpickle must be
    # importable where the object refers to it).
    return pickle.loads(tensor.numpy().tobytes())


def _part(name: Optional[str], suffix: str) -> Optional[str]:
    return None if name is None else f"{name}.{suffix}"


def broadcast_object(
    obj: Any, root_rank: int = 0, name: Optional[str] = None, process_set=global_process_set
) -> Any:
    """Returns ``root_rank``'s ``obj`` on every rank of ``process_set``.

    Args:
        obj: the object to send; ignored on other ranks (``None`` is fine).
        root_rank: the global rank that sends.
        name: names the two broadcasts involved (``<name>.size`` and
            ``<name>.data``); unnamed calls match in the order ranks make them.
        process_set: the ranks taking part (default: all).

    Returns:
        On the root, ``obj`` itself; elsewhere an unpickled copy.
    """
    is_root = _ops.rank() == root_rank
    payload = _to_tensor(obj) if is_root else None
    length = torch.tensor([payload.numel() if is_root else 0], dtype=torch.int64)
    _ops.broadcast_(length, root_rank, name=_part(name, "size"), process_set=process_set)
    if not is_root:
        payload = torch.empty(int(length.item()), dtype=torch.uint8)
    _ops.broadcast_(payload, root_rank, name=_part(name, "data"), process_set=process_set)
    return obj if is_root else _from_tensor(payload)


def allgather_object(obj: Any, name: Optional[str] = None, process_set=global_process_set) -> List[Any]:
    """Returns the list of every rank's ``obj``, in rank order of ``process_set``.

    Args:
        obj: this rank's object (any picklable value).
        name: names the two allgathers involved (``<name>.sizes`` and
            ``<name>.data``); unnamed calls match in the order ranks make them.
        process_set: the ranks taking part (default: all).
    """
    payload = _to_tensor(obj)
    sizes_handle = _ops.allgather_async(
        torch.tensor([payload.numel()], dtype=torch.int64), name=_part(name, "sizes"), process_set=process_set
    )
    data_handle = _ops.allgather_async(payload, name=_part(name, "data"), process_set=process_set)
    sizes = _ops.synchronize(sizes_handle).tolist()
    data = _ops.synchronize(data_handle)
    objects = []
    offset = 0
    for count in sizes:
        objects.append(_from_tensor(data[offset : offset + count]))
        offset += count
    return objects
