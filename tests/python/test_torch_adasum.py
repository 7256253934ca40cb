"""``op=hvd.Adasum`` in accord.torch's allreduce forms, under mpiexec with 1, 2, 3 and 4 ranks.

Every form (allreduce, allreduce_, the async ones, grouped_allreduce and
grouped_allreduce_) for float16, bfloat16, float32 and float64 CPU tensors,
against the pairwise formula in tree order computed on every rank from every
rank's input; at 3 ranks each raises ``NotImplementedError`` naming the
count, as Horovod does. Integer and bool tensors raise ``ValueError``.
"""

import pytest
import torch

import accord.torch as hvd

from conftest import assert_adasum_close, reference_adasum
from torch_helpers import FLOAT_DTYPES, dtype_name, rank_values, round_to

MANTISSA_BITS = {torch.float16: 10, torch.bfloat16: 7, torch.float32: 23, torch.float64: 52}


@pytest.fixture(scope="module", autouse=True)
def initialized():
    hvd.init()
    yield


def power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def check(got: torch.Tensor, key: str, shape, what: str) -> None:
    """``got`` against the Adasum of every rank's ``rank_values(key, ...)``."""
    dtype = got.dtype
    inputs = [rank_values(key, r, shape, dtype).to(torch.float64).numpy() for r in range(hvd.size())]
    expected = reference_adasum(
        inputs, lambda v: round_to(torch.from_numpy(v), dtype).to(torch.float64).numpy()
    )
    assert_adasum_close(got.to(torch.float64).reshape(-1).numpy(), expected, MANTISSA_BITS[dtype], what)


def refused():
    return pytest.raises(NotImplementedError, match=f"power-of-two.* {hvd.size()}$")


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_name)
def test_allreduce_forms(dtype):
    key = f"torch.adasum.{dtype_name(dtype)}"
    shape = (7, 33)
    x = rank_values(key, hvd.rank(), shape, dtype)
    if not power_of_two(hvd.size()):
        with refused():
            hvd.allreduce(x, op=hvd.Adasum, name=key)
        with refused():
            hvd.allreduce_async_(x.clone(), op=hvd.Adasum, name=key)
        return
    got = hvd.allreduce(x, op=hvd.Adasum, name=key)
    assert got.shape == x.shape and got.dtype == dtype
    check(got, key, shape, "allreduce")
    assert torch.equal(x, rank_values(key, hvd.rank(), shape, dtype)), "allreduce changed its input"
    y = x.clone()
    assert hvd.allreduce_(y, op=hvd.Adasum, name=key + ".inplace") is y
    check(y, key, shape, "allreduce_")
    handle = hvd.allreduce_async(x, op=hvd.Adasum, name=key + ".async")
    check(hvd.synchronize(handle), key, shape, "allreduce_async")
    # A non-contiguous input: reduced as its contiguous copy, written back.
    t = x.t().clone().t()
    hvd.synchronize(hvd.allreduce_async_(t, op=hvd.Adasum, name=key + ".strided"))
    check(t, key, shape, "allreduce_async_ of a transposed view")


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_name)
def test_grouped_allreduce(dtype):
    key = f"torch.adasum.grouped.{dtype_name(dtype)}"
    shapes = [(3,), (0,), (40, 25), (1,), (129,)]
    tensors = [rank_values(f"{key}.{i}", hvd.rank(), s, dtype) for i, s in enumerate(shapes)]
    if not power_of_two(hvd.size()):
        with refused():
            hvd.grouped_allreduce(tensors, op=hvd.Adasum, name=key)
        return
    results = hvd.grouped_allreduce(tensors, op=hvd.Adasum, name=key)
    for i, s in enumerate(shapes):
        check(results[i], f"{key}.{i}", s, f"grouped_allreduce tensor {i}")
    hvd.grouped_allreduce_(tensors, op=hvd.Adasum, name=key + ".inplace")
    for i, s in enumerate(shapes):
        check(tensors[i], f"{key}.{i}", s, f"grouped_allreduce_ tensor {i}")


def test_integer_and_bool_tensors_are_refused():
    for dtype in (torch.int32, torch.uint8, torch.int64, torch.bool):
        with pytest.raises(ValueError, match="Adasum"):
            hvd.allreduce(torch.ones(4, dtype=dtype), op=hvd.Adasum)
    # Nothing is left in flight: the next collective lines up on every rank.
    total = hvd.allreduce(torch.ones(3), op=hvd.Sum, name="torch.adasum.after_errors")
    assert torch.equal(total, torch.full((3,), float(hvd.size())))
