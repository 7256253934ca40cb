"""Adasum through the numpy API, under mpiexec with 1, 2, 3 and 4 ranks.

Every rank rebuilds every rank's input and checks its result against the
pairwise formula applied in tree order (``reference_adasum``): random,
orthogonal, parallel and zero vectors, grouped calls (each array its own
coefficients), scale factors, and huge and tiny magnitudes. At 3 ranks every
rank checks that the call raises ``NotImplementedError`` naming the count;
the other errors are checked at every count.
"""

import numpy as np
import pytest

import accord

from conftest import FLOAT_DTYPES, assert_adasum_close, assert_close, dtype_name, rank_input, reference_adasum

pytestmark = pytest.mark.usefixtures("accord_initialized")

MANTISSA_BITS = {np.dtype(np.float16): 10, np.dtype(np.float32): 23, np.dtype(np.float64): 52}
PATTERNS = ["random", "orthogonal", "parallel", "zeros"]


def power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def pattern_input(pattern: str, key: str, r: int, size: int, n: int, dtype) -> np.ndarray:
    """Set rank ``r``'s input: random values; only its own elements (i % size == r);
    (r + 1) times a vector shared by all; or random on even ranks and zeros on odd ones."""
    x = rank_input(key, 0 if pattern == "parallel" else r, (n,), dtype)
    if pattern == "orthogonal":
        x[np.arange(n) % size != r] = 0
    elif pattern == "parallel":
        x = (x * (r + 1)).astype(dtype)
    elif pattern == "zeros" and r % 2 == 1:
        x[:] = 0
    return x


def rounder(dtype):
    return lambda v: v.astype(dtype).astype(np.float64)


def check(got: np.ndarray, inputs, what: str) -> None:
    dtype = got.dtype
    expected = reference_adasum(inputs, rounder(dtype))
    assert_adasum_close(got.astype(np.float64), expected, MANTISSA_BITS[dtype], what)


def refused(size: int):
    return pytest.raises(NotImplementedError, match=f"power-of-two.* {size}$")


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_name)
@pytest.mark.parametrize("pattern", PATTERNS)
def test_allreduce(rank, size, pattern, dtype):
    key = f"adasum.{pattern}.{dtype_name(dtype)}"
    n = 1001
    x = pattern_input(pattern, key, rank, size, n, dtype)
    if not power_of_two(size):
        with refused(size):
            accord.allreduce(x, op=accord.Adasum, name=key)
        return
    got = accord.allreduce(x, op=accord.Adasum, name=key)
    inputs = [pattern_input(pattern, key, r, size, n, dtype) for r in range(size)]
    check(got, inputs, key)
    if pattern == "orthogonal":  # exactly the sum
        assert_close(got, np.sum(inputs, axis=0, dtype=np.float64).astype(dtype), key, tol=0.0)
    if pattern == "parallel":  # (r + 1) v on rank r: the mean, (size + 1) / 2 v
        assert_adasum_close(
            got.astype(np.float64),
            inputs[0].astype(np.float64) * (size + 1) / 2,
            MANTISSA_BITS[got.dtype],
            key + " (the mean)",
        )
    # In place too, and asynchronously.
    x = pattern_input(pattern, key, rank, size, n, dtype)
    assert accord.allreduce_async_(x, op=accord.Adasum, name=key + ".inplace").wait() is x
    check(x, inputs, key + " in place")


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_name)
def test_grouped_allreduce_gives_each_array_its_own_coefficients(rank, size, dtype):
    key = f"adasum.grouped.{dtype_name(dtype)}"
    parts = [
        ("parallel", 3),
        ("random", 0),
        ("orthogonal", 500),
        ("random", 1),
        ("parallel", 129),
        ("zeros", 40),
    ]
    arrays = [pattern_input(p, f"{key}.{i}", rank, size, n, dtype) for i, (p, n) in enumerate(parts)]
    if not power_of_two(size):
        with refused(size):
            accord.grouped_allreduce(arrays, op=accord.Adasum, name=key)
        return
    results = accord.grouped_allreduce(arrays, op=accord.Adasum, name=key)
    for i, (p, n) in enumerate(parts):
        check(
            results[i], [pattern_input(p, f"{key}.{i}", r, size, n, dtype) for r in range(size)], f"{key}.{i}"
        )


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_name)
def test_scale_factors_apply_before_and_after(rank, size, dtype):
    key = f"adasum.scaled.{dtype_name(dtype)}"
    x = pattern_input("random", key, rank, size, 300, dtype)
    if not power_of_two(size):
        with refused(size):
            accord.allreduce(x, op=accord.Adasum, name=key, prescale_factor=3.0, postscale_factor=0.25)
        return
    got = accord.allreduce(x, op=accord.Adasum, name=key, prescale_factor=3.0, postscale_factor=0.25)
    inputs = [(pattern_input("random", key, r, size, 300, dtype) * 3).astype(dtype) for r in range(size)]
    expected = (reference_adasum(inputs, rounder(dtype)) * 0.25).astype(dtype).astype(np.float64)
    assert_adasum_close(got.astype(np.float64), expected, MANTISSA_BITS[np.dtype(dtype)], key)


@pytest.mark.parametrize(
    "dtype,exponent",
    [
        (np.float16, 10),
        (np.float16, -8),
        (np.float32, 100),
        (np.float32, -90),
        (np.float64, 1000),
        (np.float64, -900),
    ],
)
def test_huge_and_tiny_magnitudes(rank, size, dtype, exponent):
    """Adasum(2^k a, 2^k b) = 2^k Adasum(a, b), although the squares of these
    values overflow or underflow the dtype (float64: double itself)."""
    key = f"adasum.magnitude.{dtype_name(dtype)}.{exponent}"
    x = np.ldexp(pattern_input("random", key, rank, size, 200, dtype), exponent).astype(dtype)
    if not power_of_two(size):
        with refused(size):
            accord.allreduce(x, op=accord.Adasum, name=key)
        return
    got = accord.allreduce(x, op=accord.Adasum, name=key)
    inputs = [pattern_input("random", key, r, size, 200, dtype) for r in range(size)]
    expected = np.ldexp(reference_adasum(inputs, rounder(dtype)), exponent)
    # float16 results near zero may be subnormal once scaled down: one bit less.
    bits = MANTISSA_BITS[np.dtype(dtype)] - (1 if dtype == np.float16 else 0)
    assert np.all(np.isfinite(got)), f"{key}: non-finite results"
    assert_adasum_close(got.astype(np.float64), expected, bits, key)


def test_other_dtypes_and_reducescatter_are_refused(rank, size):
    for dtype in (np.int32, np.uint8, np.int64, np.bool_):
        with pytest.raises(ValueError, match="Adasum"):
            accord.allreduce(np.ones(4, dtype), op=accord.Adasum)
    with pytest.raises(ValueError, match="Adasum"):
        accord.reducescatter(np.ones(4, np.float32), op=accord.Adasum)
    # No rank has anything left in flight: the next collective lines up.
    assert_close(
        accord.allreduce(np.ones(3), op=accord.Sum, name="adasum.after_errors"),
        np.full(3, float(size)),
        "allreduce after the refusals",
    )
