"""Horovod's float16 and bfloat16 averaging, as a reference for accord's (numpy only).

Horovod's CPU path reduces float16 with an MPI op that adds two elements in
float and rounds the sum to float16 (nearest-even), pair by pair as MPI
combines ranks; an Average is that Sum scaled by ``postscale / size``, the
factor computed in double and rounded to float, each product rounded to
float16. A prescale is applied the same way before the sum. accord does the
same for float16 and bfloat16 (docs/decisions.md, "float16 and bfloat16").

With two ranks the sum is one rounded addition, so the result is exactly
determined. With three, MPI may combine the ranks in any pairing, so the
reference is the set of results of the three pairings, and each element must
be one of them (and the same on every rank).

Values travel as their bits (uint16 arrays), so that bfloat16, which numpy
lacks, works alike; the conversions round to nearest-even, as accord's and
Horovod's do.
"""

from itertools import combinations
from typing import List, Sequence

import numpy as np

KINDS = ("float16", "bfloat16")


def to_float(bits: np.ndarray, kind: str) -> np.ndarray:
    """float32 values of float16/bfloat16 bits (exact)."""
    bits = np.asarray(bits, dtype=np.uint16)
    if kind == "float16":
        return bits.view(np.float16).astype(np.float32)
    return (bits.astype(np.uint32) << 16).view(np.float32)


def to_bits(values: np.ndarray, kind: str) -> np.ndarray:
    """float16/bfloat16 bits of float32 values, rounded to nearest-even (no NaN expected)."""
    values = np.asarray(values, dtype=np.float32)
    if kind == "float16":
        with np.errstate(over="ignore"):
            return values.astype(np.float16).view(np.uint16)
    bits = values.view(np.uint32).astype(np.uint64)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def scaled(bits: np.ndarray, kind: str, factor: float) -> np.ndarray:
    """Each element times ``factor`` (rounded to float first), rounded back; 1.0 leaves the bits."""
    if factor == 1.0:
        return bits
    return to_bits(to_float(bits, kind) * np.float32(factor), kind)


def added(a: np.ndarray, b: np.ndarray, kind: str) -> np.ndarray:
    """One rounded addition of two arrays of bits."""
    return to_bits(to_float(a, kind) + to_float(b, kind), kind)


def sums(inputs: Sequence[np.ndarray], kind: str) -> List[np.ndarray]:
    """The rounded sums of every way of adding the inputs pairwise (one for 1 or 2 ranks, 3 for 3)."""
    n = len(inputs)
    if n == 1:
        return [inputs[0]]
    if n == 2:
        return [added(inputs[0], inputs[1], kind)]
    if n == 3:
        return [
            added(added(inputs[i], inputs[j], kind), inputs[3 - i - j], kind)
            for i, j in combinations(range(3), 2)
        ]
    raise ValueError("the reference covers 1 to 3 ranks")


def averages(
    inputs: Sequence[np.ndarray], kind: str, prescale: float = 1.0, postscale: float = 1.0
) -> List[np.ndarray]:
    """Horovod's Average of the ranks' inputs, one array of bits per summation order."""
    n = len(inputs)
    ready = [scaled(x, kind, prescale) for x in inputs]
    return [scaled(s, kind, postscale / n) for s in sums(ready, kind)]


def mismatches(got: np.ndarray, candidates: Sequence[np.ndarray]) -> np.ndarray:
    """Indices where ``got`` (bits) equals none of the candidates."""
    got = np.asarray(got, dtype=np.uint16)
    ok = np.zeros(got.shape, dtype=bool)
    for candidate in candidates:
        ok |= got == candidate
    return np.nonzero(~ok.reshape(-1))[0]


def rank_bits(seed: int, rank: int, count: int, kind: str) -> np.ndarray:
    """A rank's seeded input: a third random bit patterns over every finite value (subnormals,
    values whose sum overflows), a third gradient-sized values, and a third values one half
    apart whose sums land on rounding ties (the sum's spacing is 1)."""
    g = np.random.default_rng([seed, rank])
    third = count // 3
    limit = 0x7C00 if kind == "float16" else 0x7F80  # the first non-finite magnitude
    wide = g.integers(0, limit, third, dtype=np.uint16) | (g.integers(0, 2, third, dtype=np.uint16) << 15)
    small = to_bits((g.standard_normal(third) * 1e-3).astype(np.float32), kind)
    low = 1024 if kind == "float16" else 128  # [low/2, low) has spacing 0.5, [low, 2 low) spacing 1
    halves = g.integers(low, 2 * low, count - 2 * third).astype(np.float32) * np.float32(0.5)
    signs = np.where(g.integers(0, 2, halves.size) == 1, np.float32(-1), np.float32(1))
    return np.concatenate([wide, small, to_bits(halves * signs, kind)]).astype(np.uint16)
