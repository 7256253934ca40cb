"""Shared helpers of the accord.torch test suites.

Every rank builds every rank's input from a seed made of a key and the rank,
so each rank can compute the expected result of a collective on its own.
Comparisons go element by element and name the rank, the index, the
expected and the received value.
"""

import zlib
from typing import List, Optional, Sequence

import torch

import accord.torch as hvd

ALL_DTYPES = [
    torch.uint8,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
    torch.bool,
]
FLOAT_DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
ALL_OPS = [hvd.Sum, hvd.Average, hvd.Min, hvd.Max, hvd.Product]
OP_NAMES = {hvd.Sum: "Sum", hvd.Average: "Average", hvd.Min: "Min", hvd.Max: "Max", hvd.Product: "Product"}


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def is_signed(dtype: torch.dtype) -> bool:
    return dtype not in (torch.uint8, torch.bool)


def rank_values(
    key: str, rank: int, shape: Sequence[int], dtype: torch.dtype, kind: str = "small"
) -> torch.Tensor:
    """Rank ``rank``'s input for the test value ``key``.

    kind "small": integers in [-8, 8] ([0, 8] unsigned), exact in every dtype
    and in sums of a few ranks; floats get quarter steps.
    kind "product": factors from {-1, 1, 2} ({1, 2} unsigned), so products of
    a few ranks stay exact and inside int8.
    Bool values are random 0/1 (mostly 1 for "product", so AND is not always 0).
    """
    generator = torch.Generator().manual_seed(zlib.crc32(f"{key}/{rank}".encode()))
    shape = tuple(shape)
    if dtype == torch.bool:
        threshold = 0.2 if kind == "product" else 0.5
        return torch.rand(shape, generator=generator) >= threshold
    if kind == "product":
        choices = torch.tensor([-1.0, 1.0, 2.0] if is_signed(dtype) else [1.0, 2.0])
        index = torch.randint(0, len(choices), shape, generator=generator)
        return choices[index].to(dtype)
    low = -8 if is_signed(dtype) else 0
    values = torch.randint(low, 9, shape, generator=generator).to(torch.float64)
    if dtype.is_floating_point:
        values = values + torch.randint(0, 4, shape, generator=generator).to(torch.float64) / 4
    return values.to(dtype)


def round_to(values: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """float64 ``values`` stored in ``dtype`` the way accord stores a result:
    integers round toward zero, bool is nonzero, half types go through float32."""
    if dtype == torch.bool:
        return values != 0
    if dtype.is_floating_point:
        if dtype in (torch.float16, torch.bfloat16):
            return values.to(torch.float32).to(dtype)
        return values.to(dtype)
    return values.trunc().to(dtype)


def reference_reduce(
    inputs: Sequence[torch.Tensor], op: int, prescale: float = 1.0, postscale: float = 1.0
) -> torch.Tensor:
    """What an allreduce of ``inputs`` (one per rank of the set, in rank order) returns."""
    dtype = inputs[0].dtype
    contributions = [round_to(x.to(torch.float64) * prescale, dtype).to(torch.float64) for x in inputs]
    acc = contributions[0].clone()
    for x in contributions[1:]:
        if op in (hvd.Sum, hvd.Average):
            acc = acc + x
        elif op == hvd.Min:
            acc = torch.minimum(acc, x)
        elif op == hvd.Max:
            acc = torch.maximum(acc, x)
        else:
            acc = acc * x
    if op == hvd.Average:
        acc = acc / len(inputs)
    if dtype == torch.bool:
        # Sum and Max are OR, Min and Product AND: what the float64 result
        # already says once read as nonzero.
        return acc != 0
    return round_to(acc * postscale, dtype)


def tolerance(dtype: torch.dtype) -> float:
    """Relative tolerance for results that need rounding (Average, scaling)."""
    return {
        torch.float16: 2.0 / 1024,
        torch.bfloat16: 2.0 / 128,
        torch.float32: 4e-7,
        torch.float64: 1e-14,
    }.get(dtype, 0.0)


def mismatches(what: str, got: torch.Tensor, expected: torch.Tensor, rel_tolerance: float = 0.0) -> List[str]:
    """Messages for every way ``got`` differs from ``expected`` (first 5 elements)."""
    me = hvd.rank()
    if not isinstance(got, torch.Tensor):
        return [f"rank {me}: {what}: expected a tensor, got {type(got).__name__}"]
    if got.dtype != expected.dtype or tuple(got.shape) != tuple(expected.shape):
        return [
            f"rank {me}: {what}: expected {dtype_name(expected.dtype)} "
            f"{list(expected.shape)}, got {dtype_name(got.dtype)} {list(got.shape)}"
        ]
    g = got.detach().reshape(-1).to(torch.float64)
    e = expected.detach().reshape(-1).to(torch.float64)
    if rel_tolerance > 0:
        close = (g - e).abs() <= rel_tolerance * torch.clamp(e.abs(), min=1.0)
    else:
        close = g == e
    bad = (~close).nonzero().reshape(-1).tolist()
    messages = [
        f"rank {me}: {what} ({dtype_name(expected.dtype)} {list(expected.shape)}) "
        f"index {i}: expected {e[i].item()!r}, got {g[i].item()!r}"
        for i in bad[:5]
    ]
    if len(bad) > 5:
        messages.append(f"rank {me}: {what}: {len(bad)} of {e.numel()} elements differ (first 5 shown)")
    return messages


class Checker:
    """Collects mismatches so a test asserts once, after all its collectives."""

    def __init__(self) -> None:
        self.failures: List[str] = []

    def values(
        self, what: str, got: torch.Tensor, expected: torch.Tensor, rel_tolerance: float = 0.0
    ) -> None:
        self.failures.extend(mismatches(what, got, expected, rel_tolerance))

    def true(self, condition: bool, message: str) -> None:
        if not condition:
            self.failures.append(f"rank {hvd.rank()}: {message}")

    def check(self) -> None:
        assert not self.failures, "\n".join(self.failures[:40]) + (
            f"\n... and {len(self.failures) - 40} more" if len(self.failures) > 40 else ""
        )


def set_members(process_set: Optional[object] = None) -> List[int]:
    """Global ranks of a process set (all ranks for None)."""
    if process_set is None:
        return list(range(hvd.size()))
    return list(process_set.ranks)


def assert_close_f64(got: torch.Tensor, expected: torch.Tensor, what: str, rtol: float, atol: float) -> None:
    """Compares in float64; fails with the rank, the first differing index,
    the expected and the got value."""
    got = got.detach().to(torch.float64).reshape(-1)
    expected = expected.detach().to(torch.float64).reshape(-1)
    assert got.shape == expected.shape, (
        f"rank {hvd.rank()}: {what}: {got.numel()} elements, expected {expected.numel()}"
    )
    bad = ~torch.isclose(got, expected, rtol=rtol, atol=atol)
    if bool(bad.any()):
        i = int(bad.nonzero()[0])
        raise AssertionError(
            f"rank {hvd.rank()}: {what}: {int(bad.sum())} of {got.numel()} elements differ; "
            f"first at index {i}: expected {expected[i].item()!r}, got {got[i].item()!r}"
        )
