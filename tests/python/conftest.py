"""Shared by every pytest suite of accord (tests/python/).

Each suite runs as ``mpiexec -n N python -m pytest -x ...`` (see
``accord_add_pytest`` in tests/CMakeLists.txt): every rank runs the same tests
in the same order.

What this file gives every suite:

* A rank whose test fails ends the whole job at once (``MPI_Abort`` through
  ``accord._core.abort``) after printing its failure, so no other rank is
  left waiting for it in a collective.
* A watchdog on every test: a test that runs longer than
  ``ACCORD_TEST_TIMEOUT`` seconds (default 60) dumps every thread's stack and
  exits the rank, which ends the job.
* The ``accord_initialized`` fixture (session scope): ``accord.init()`` once
  for the suites that ask for it (``pytestmark =
  pytest.mark.usefixtures("accord_initialized")``) and ``accord.shutdown()``
  at the end.
* numpy helpers, imported with ``from conftest import ...``: seeded per-rank
  inputs (``rank_input``) that every rank can rebuild for every other rank,
  a reference for reductions that follows the core's rules
  (``reference_reduce``), and an element-by-element comparison whose message
  names the rank, the index, the expected and the received value
  (``assert_close``).
"""

import faulthandler
import os
import sys
import zlib
from typing import Optional, Sequence

import numpy as np
import pytest

import accord
from accord import _core

# ----------------------------------------------------------------- harness


def _world_size() -> int:
    if _core.is_initialized():
        return _core.size()
    for var in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"):
        if var in os.environ:
            return int(os.environ[var])
    return 1


def _world_rank() -> str:
    if _core.is_initialized():
        return str(_core.rank())
    return os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMI_RANK", "?"))


def pytest_runtest_logreport(report):
    """A failure on one rank ends every rank (MPI_Abort) once it is printed."""
    if not report.failed or _world_size() <= 1:
        return
    sys.stdout.flush()
    text = report.longreprtext if hasattr(report, "longreprtext") else str(report.longrepr)
    sys.stderr.write(
        f"\n===== rank {_world_rank()}: {report.nodeid} FAILED ({report.when}) =====\n"
        f"{text}\n===== rank {_world_rank()}: aborting every rank =====\n"
    )
    sys.stderr.flush()
    _core.abort(1)


_TEST_TIMEOUT = float(os.environ.get("ACCORD_TEST_TIMEOUT", "60"))


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "watchdog_seconds(n): this test's watchdog allows n seconds (at least ACCORD_TEST_TIMEOUT)"
    )


@pytest.fixture(autouse=True)
def _watchdog(request):
    """Ends the rank (and with it the job) if one test runs too long."""
    marker = request.node.get_closest_marker("watchdog_seconds")
    seconds = max(_TEST_TIMEOUT, float(marker.args[0])) if marker else _TEST_TIMEOUT
    faulthandler.dump_traceback_later(seconds, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


@pytest.fixture(scope="session")
def accord_initialized():
    """accord, initialised once for the session; shut down at its end.

    Shutting down on one rank stops every rank, so the ranks meet in a
    barrier first: none may still be running its last collectives.
    """
    accord.init()
    yield accord
    faulthandler.dump_traceback_later(_TEST_TIMEOUT, exit=True)  # the barrier is watched too
    if accord.is_initialized():
        accord.barrier()
    accord.shutdown()
    faulthandler.cancel_dump_traceback_later()


@pytest.fixture
def rank(accord_initialized) -> int:
    return accord.rank()


@pytest.fixture
def size(accord_initialized) -> int:
    return accord.size()


def needs_ranks(n: int):
    """Marks a test that needs at least ``n`` ranks (skipped on fewer)."""
    return pytest.mark.skipif(_world_size() < n, reason=f"needs at least {n} ranks")


# ------------------------------------------------------------------ inputs

INT_DTYPES = [np.uint8, np.int8, np.int16, np.int32, np.int64]
FLOAT_DTYPES = [np.float16, np.float32, np.float64]
NUMPY_DTYPES = INT_DTYPES + FLOAT_DTYPES + [np.bool_]


def dtype_name(dtype) -> str:
    return np.dtype(dtype).name


def rank_input(key: str, rank: int, shape: Sequence[int], dtype, kind: str = "small") -> np.ndarray:
    """Rank ``rank``'s input for the test value ``key``; any rank can rebuild it.

    kind "small": integers in [-8, 8] ([0, 8] unsigned), plus quarter steps
    for floats: exact in every dtype and in sums of a few ranks.
    kind "product": factors from {-1, 1, 2} ({1, 2} unsigned), so products of
    a few ranks stay exact and inside int8.
    Bool values are random (mostly True for "product", so AND is not always False).
    """
    rng = np.random.default_rng(zlib.crc32(f"{key}/{rank}".encode()))
    shape = tuple(shape)
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.random(shape) >= (0.2 if kind == "product" else 0.5)
    signed = dtype.kind in "if"
    if kind == "product":
        choices = np.array([-1, 1, 2] if signed else [1, 2], dtype=np.float64)
        return choices[rng.integers(0, len(choices), shape)].astype(dtype)
    values = rng.integers(-8 if signed else 0, 9, shape).astype(np.float64)
    if dtype.kind == "f":
        values += rng.integers(0, 4, shape) / 4.0
    return values.astype(dtype)


def all_inputs(key: str, size: int, shape_of, dtype, kind: str = "small"):
    """Every rank's input: ``shape_of`` is a shape or a function rank -> shape."""
    shapes = [shape_of(r) if callable(shape_of) else shape_of for r in range(size)]
    return [rank_input(key, r, shapes[r], dtype, kind) for r in range(size)]


# --------------------------------------------------------------- reference


def _trunc_saturate(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    info = np.iinfo(dtype)
    return np.clip(np.trunc(values), info.min, info.max).astype(dtype)


def reference_reduce(
    inputs: Sequence[np.ndarray],
    op: int,
    prescale: float = 1.0,
    postscale: float = 1.0,
    average_divisor: Optional[int] = None,
) -> np.ndarray:
    """The result the core computes for ``op`` over ``inputs`` (one per rank).

    Floats are reduced in float64 (compare with a tolerance). Integers follow
    the core exactly: the prescaled input and the post-scaled (averaged)
    result are rounded toward zero and saturate. Bool: Sum and Max are OR,
    Min and Product AND. ``average_divisor`` defaults to the number of inputs.
    """
    dtype = inputs[0].dtype
    divisor = (average_divisor or len(inputs)) if op == accord.Average else 1
    if dtype == np.bool_:
        stacked = np.stack(inputs)
        if op in (accord.Sum, accord.Max):
            return stacked.any(axis=0)
        if op in (accord.Min, accord.Product):
            return stacked.all(axis=0)
        raise ValueError(f"no bool reference for op {op}")
    if dtype.kind == "f":
        stacked = np.stack([x.astype(np.float64) * prescale for x in inputs])
    else:
        scaled = [
            x if prescale == 1.0 else _trunc_saturate(x.astype(np.float64) * prescale, dtype) for x in inputs
        ]
        stacked = np.stack([x.astype(np.float64) for x in scaled])
    if op in (accord.Sum, accord.Average):
        result = stacked.sum(axis=0)
    elif op == accord.Min:
        result = stacked.min(axis=0)
    elif op == accord.Max:
        result = stacked.max(axis=0)
    elif op == accord.Product:
        result = stacked.prod(axis=0)
    else:
        raise ValueError(f"no reference for op {op}")
    if dtype.kind == "f":
        return (result * (postscale / divisor)).astype(dtype)
    if postscale == 1.0 and divisor == 1:
        return _trunc_saturate(result, dtype)
    return _trunc_saturate(result * postscale / divisor, dtype)


def tolerance(dtype) -> float:
    """Relative and absolute tolerance for results of ``dtype`` computed by the core."""
    return {np.dtype(np.float16): 1e-2, np.dtype(np.float32): 1e-5, np.dtype(np.float64): 1e-12}.get(
        np.dtype(dtype), 0.0
    )


def assert_close(got: np.ndarray, expected: np.ndarray, what: str, tol: Optional[float] = None) -> None:
    """Element-by-element comparison; the message names rank, index, expected and got.

    Exact for integer and bool dtypes; ``tol`` (default ``tolerance(dtype)``)
    relative-and-absolute for floats. Dtype and shape must match too.
    """
    rank_text = _world_rank()
    got = np.asarray(got)
    expected = np.asarray(expected)
    assert got.dtype == expected.dtype, (
        f"rank {rank_text}: {what}: dtype {got.dtype}, expected {expected.dtype}"
    )
    assert got.shape == expected.shape, (
        f"rank {rank_text}: {what}: shape {got.shape}, expected {expected.shape}"
    )
    if tol is None:
        tol = tolerance(got.dtype)
    if got.dtype.kind == "f":
        g = got.astype(np.float64)
        e = expected.astype(np.float64)
        bad = ~(np.abs(g - e) <= tol * (1.0 + np.abs(e)))
    else:
        bad = got != expected
    if bad.any():
        index = tuple(int(i) for i in np.argwhere(bad)[0]) if got.ndim else ()
        raise AssertionError(
            f"rank {rank_text}: {what}: {int(bad.sum())} of {got.size} elements differ; "
            f"first at index {index}: expected {expected[index]!r}, got {got[index]!r}"
        )


# ------------------------------------------------------------------ Adasum


def reference_adasum(inputs: Sequence[np.ndarray], round_to) -> np.ndarray:
    """The Adasum allreduce of ``inputs`` (one vector per rank of the set, in set rank order).

    The pairwise formula ``Adasum(a, b) = (1 - a.b / (2|a|^2)) a + (1 - a.b / (2|b|^2)) b``
    in float64, ranks at distance 1 first, then 2, 4, ... (the lower ranks on
    the left); a zero vector's coefficient is 1. Each level's result goes
    through ``round_to`` (float64 array -> float64 array), which stores it in
    the tensor's dtype as the core does. Returns float64.
    """
    vectors = [np.asarray(x, dtype=np.float64).ravel() for x in inputs]
    distance = 1
    while distance < len(vectors):
        for r in range(0, len(vectors), 2 * distance):
            a, b = vectors[r], vectors[r + distance]
            dot, aa, bb = float(a @ b), float(a @ a), float(b @ b)
            ca = 1.0 if aa == 0 else 1.0 - dot / (2 * aa)
            cb = 1.0 if bb == 0 else 1.0 - dot / (2 * bb)
            vectors[r] = round_to(ca * a + cb * b)
        distance *= 2
    return vectors[0]


def assert_adasum_close(got: np.ndarray, expected: np.ndarray, mantissa_bits: int, what: str) -> None:
    """``got`` (float64) within 4 units in the last place (of a dtype with
    ``mantissa_bits``; 1e-12 for float64) of the largest |expected|."""
    scale = float(np.abs(expected).max()) if expected.size else 0.0
    tol = (1e-12 if mantissa_bits >= 52 else 4.0 * 2.0**-mantissa_bits) * scale
    bad = ~(np.abs(got - expected) <= tol)
    if bad.any():
        i = int(np.argwhere(bad)[0][0])
        raise AssertionError(
            f"rank {_world_rank()}: {what}: {int(bad.sum())} of {got.size} elements differ by more "
            f"than {tol}; first at index {i}: expected {expected[i]!r}, got {got[i]!r}"
        )
