"""accord.torch.SyncBatchNorm against torch's BatchNorm on the concatenated batch.

Rank r holds a seeded batch of its own size. Every rank builds the full
batch (all ranks' seeded parts) and runs torch.nn.BatchNorm1d/2d on it:
SyncBatchNorm's output and input gradient on each rank must equal the
reference's rows for that rank, the sum over ranks of its weight and bias
gradients must equal the reference's, and the running statistics must
match on every rank.

Run with: mpirun -np N python3 -m pytest -x -q tests/python/test_sync_batch_norm.py
"""

import pytest
import torch

import accord.torch as hvd

from torch_helpers import assert_close_f64

C = 3


# accord.init() once per session, accord.shutdown() at its end (conftest.py).
pytestmark = pytest.mark.usefixtures("accord_initialized")


def assert_close(got, expected, what, rtol=1e-9, atol=1e-11):
    assert_close_f64(got, expected, what, rtol, atol)


def sum_over_ranks(tensor, name):
    total = tensor.detach().clone()
    hvd.allreduce_(total, name=name, op=hvd.Sum)
    return total


SHAPES = {"1d_NC": (), "1d_NCL": (5,), "2d_NCHW": (4, 3)}
REFERENCE = {"1d_NC": torch.nn.BatchNorm1d, "1d_NCL": torch.nn.BatchNorm1d, "2d_NCHW": torch.nn.BatchNorm2d}


def rank_input(r, step, rows, spatial, dtype=torch.float64, offset=0.0):
    g = torch.Generator().manual_seed(100 * step + r)
    x = torch.randn((rows, C) + spatial, generator=g, dtype=torch.float64) * (r + 1) + r + offset
    grad = torch.randn((rows, C) + spatial, generator=g, dtype=torch.float64)
    return x.to(dtype), grad.to(dtype)


def set_affine(module, dtype):
    if module.weight is not None:
        with torch.no_grad():
            module.weight.copy_(torch.tensor([0.5, 1.5, -2.0], dtype=dtype))
            module.bias.copy_(torch.tensor([0.1, -0.3, 0.7], dtype=dtype))


def check_against_reference(
    layout, sizes, steps=2, momentum=0.1, affine=True, dtype=torch.float64, offset=0.0, tol=None
):
    spatial = SHAPES[layout]
    rtol, atol = tol if tol is not None else (1e-9, 1e-11)
    r, n = hvd.rank(), hvd.size()
    sync = hvd.SyncBatchNorm(C, momentum=momentum, affine=affine).to(dtype)
    reference = REFERENCE[layout](C, momentum=momentum, affine=affine).double()
    set_affine(sync, dtype)
    set_affine(reference, torch.float64)
    what = f"{layout} sizes={[sizes(i) for i in range(n)]} momentum={momentum} affine={affine}"
    for step in range(steps):
        parts = [rank_input(i, step, sizes(i), spatial, dtype, offset) for i in range(n)]
        x, dy = parts[r]
        x = x.clone().requires_grad_(True)
        y = sync(x)
        y.backward(dy)

        full_x = torch.cat([p[0] for p in parts]).double().requires_grad_(True)
        full_y = reference(full_x)
        full_y.backward(torch.cat([p[1] for p in parts]).double())
        start = sum(sizes(i) for i in range(r))
        rows = slice(start, start + sizes(r))
        assert_close(y, full_y[rows], f"{what} step {step}: output", rtol, atol)
        assert_close(x.grad, full_x.grad[rows], f"{what} step {step}: input gradient", rtol, atol)
        if affine:
            # Weight and bias gradients are each rank's share of the full batch's.
            assert_close(
                sum_over_ranks(sync.weight.grad, f"bn.w.{layout}.{step}"),
                reference.weight.grad,
                f"{what} step {step}: weight gradient",
                rtol,
                atol,
            )
            assert_close(
                sum_over_ranks(sync.bias.grad, f"bn.b.{layout}.{step}"),
                reference.bias.grad,
                f"{what} step {step}: bias gradient",
                rtol,
                atol,
            )
            sync.weight.grad = None
            sync.bias.grad = None
            reference.weight.grad = None
            reference.bias.grad = None
        assert_close(sync.running_mean, reference.running_mean, f"{what}: running_mean", rtol, atol)
        assert_close(sync.running_var, reference.running_var, f"{what}: running_var", rtol, atol)
        assert int(sync.num_batches_tracked) == step + 1

    # Evaluation uses the running statistics and each rank's own batch.
    sync.eval()
    reference.eval()
    x, _ = rank_input(r, 99, 2, spatial, dtype, offset)
    assert_close(sync(x), reference(x.double()), f"{what}: eval output", rtol, atol)


@pytest.mark.parametrize("layout", sorted(SHAPES))
def test_uneven_batches_match_batch_norm(layout):
    check_against_reference(layout, sizes=lambda i: i + 2)


def test_cumulative_average_without_affine():
    check_against_reference("1d_NCL", sizes=lambda i: 3, momentum=None, affine=False)


def test_rank_with_empty_batch():
    # The last rank contributes no rows (with one rank, that rank has 4).
    n = hvd.size()
    check_against_reference("2d_NCHW", sizes=lambda i: 0 if (i == n - 1 and n > 1) else 4)


def test_float32_with_large_mean():
    # Statistics are combined in float64, so a mean far from zero costs no accuracy.
    check_against_reference(
        "1d_NCL", sizes=lambda i: i + 2, dtype=torch.float32, offset=1000.0, tol=(1e-3, 1e-3)
    )


def test_too_few_values_raise_on_every_rank():
    sync = hvd.SyncBatchNorm(C)
    # One row in total across all ranks.
    x = torch.randn((1 if hvd.rank() == 0 else 0), C)
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        sync(x)


def test_is_a_batch_norm_and_converts():
    model = torch.nn.Sequential(
        torch.nn.Conv2d(2, C, 1), torch.nn.BatchNorm2d(C), torch.nn.Sequential(torch.nn.BatchNorm1d(C))
    )
    original = model[1]
    converted = hvd.SyncBatchNorm.convert_sync_batchnorm(model)
    assert isinstance(converted[1], hvd.SyncBatchNorm)
    assert isinstance(converted[2][0], hvd.SyncBatchNorm)
    assert isinstance(converted[1], torch.nn.modules.batchnorm._BatchNorm)
    assert converted[1].weight is original.weight
    assert converted[1].running_var is original.running_var
    with pytest.raises(ValueError, match="channels"):
        hvd.SyncBatchNorm(4)(torch.randn(2, C))
