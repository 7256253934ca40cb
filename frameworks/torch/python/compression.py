"""Gradient compression applied around a collective.

A compressor turns a tensor into the form that travels between ranks and
back. ``compress`` returns the tensor to send and a context that
``decompress`` needs to restore the original form, so that::

    sent, ctx = Compression.fp16.compress(grad)
    reduced = hvd.allreduce(sent)
    grad = Compression.fp16.decompress(reduced, ctx)

is what ``hvd.allreduce(grad, compression=Compression.fp16)`` does.
"""

from typing import Any, Tuple

import torch

__all__ = ["Compressor", "NoneCompressor", "FP16Compressor", "Compression"]


class Compressor:
    """Interface of a compressor: two static methods, no state."""

    @staticmethod
    def compress(tensor: torch.Tensor) -> Tuple[torch.Tensor, Any]:
        """Returns the tensor to send and the context ``decompress`` needs."""
        raise NotImplementedError

    @staticmethod
    def decompress(tensor: torch.Tensor, ctx: Any) -> torch.Tensor:
        """Restores a received tensor to the form ``compress`` was given."""
        raise NotImplementedError


class NoneCompressor(Compressor):
    """Sends tensors as they are."""

    @staticmethod
    def compress(tensor: torch.Tensor) -> Tuple[torch.Tensor, Any]:
        return tensor, None

    @staticmethod
    def decompress(tensor: torch.Tensor, ctx: Any) -> torch.Tensor:
        return tensor


class FP16Compressor(Compressor):
    """Sends floating-point tensors as float16 and casts the result back.

    Halves the bytes on the wire for float32 (a quarter for float64) at the
    cost of float16's precision and range (largest finite value 65504).
    Tensors that are not floating point (integers, bool) travel unchanged,
    and so do float16 tensors.
    """

    @staticmethod
    def compress(tensor: torch.Tensor) -> Tuple[torch.Tensor, Any]:
        dtype = tensor.dtype
        if dtype.is_floating_point and dtype != torch.float16:
            return tensor.to(torch.float16), dtype
        return tensor, dtype

    @staticmethod
    def decompress(tensor: torch.Tensor, ctx: Any) -> torch.Tensor:
        dtype = ctx
        if dtype is not None and tensor.dtype != dtype:
            return tensor.to(dtype)
        return tensor


class Compression:
    """The available compressors: ``Compression.none`` and ``Compression.fp16``."""

    none = NoneCompressor
    fp16 = FP16Compressor
