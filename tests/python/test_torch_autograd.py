"""Gradients of accord.torch's differentiable collectives (run with 1, 2 and 3 ranks).

Each rank r computes the loss L_r = sum(w_r * y_r) of its output y_r with a
seeded weight w_r, and the gradient of its input is checked against the
analytic gradient of L = sum_r L_r (see accord/torch/autograd.py), which
every rank computes from every rank's seeded inputs and weights.
"""
import pytest
import torch

import accord.torch as hvd
from torch_helpers import Checker, rank_values


@pytest.fixture(scope="module", autouse=True)
def initialized():
    hvd.init()
    yield


def inputs(key, shape, dtype=torch.float64, ranks=None):
    ranks = range(hvd.size()) if ranks is None else ranks
    return [rank_values(key, r, shape, dtype) for r in ranks]


def weights(key, shape, ranks=None):
    return inputs(key + ".w", shape, ranks=ranks)


def leaf(key, shape, dtype=torch.float64):
    return rank_values(key, hvd.rank(), shape, dtype).requires_grad_(True)


def backward(output, key):
    """L = sum(w * output) with this rank's weight for ``key``; returns w."""
    w = rank_values(key + ".w", hvd.rank(), list(output.shape), torch.float64).to(output.dtype)
    (output * w).sum().backward()
    return w


# ---------------------------------------------------------------- allreduce


@pytest.mark.parametrize("op,pre,post", [
    (hvd.Sum, 1.0, 1.0), (hvd.Average, 1.0, 1.0), (hvd.Sum, 2.0, 0.25), (hvd.Average, 0.5, 3.0),
])
def test_allreduce_sum_and_average_gradient(op, pre, post):
    key = f"g.ar.{op}.{pre}.{post}"
    shape = [3, 4]
    x = leaf(key, shape)
    y = hvd.allreduce(x, op=op, prescale_factor=pre, postscale_factor=post, name=key)
    assert y.requires_grad and y.grad_fn is not None
    backward(y, key)
    factor = pre * post / (hvd.size() if op == hvd.Average else 1)
    expected = factor * torch.stack(weights(key, shape)).sum(0)
    check = Checker()
    check.values(key + " grad", x.grad, expected, 1e-12)
    check.check()


@pytest.mark.parametrize("op", [hvd.Min, hvd.Max, hvd.Product])
def test_allreduce_min_max_product_gradient(op):
    key = f"g.ar.elementwise.{op}"
    shape = [40]
    pre, post = 2.0, 0.5
    x = leaf(key, shape)
    y = hvd.allreduce(x, op=op, prescale_factor=pre, postscale_factor=post, name=key)
    backward(y, key)
    xs = torch.stack(inputs(key, shape))  # [size, 40]
    g = torch.stack(weights(key, shape)).sum(0)
    me = hvd.rank()
    if op == hvd.Product:
        others = torch.ones(shape, dtype=torch.float64)
        for r in range(hvd.size()):
            if r != me:
                others = others * pre * xs[r]
        expected = post * pre * g * others
    else:
        scaled = pre * xs
        extreme = scaled.min(0).values if op == hvd.Min else scaled.max(0).values
        ties = (scaled == extreme).to(torch.float64)
        expected = post * pre * g * ties[me] / ties.sum(0)
    check = Checker()
    check.values(key + " grad", x.grad, expected, 1e-12)
    check.check()


def test_grouped_allreduce_gradient():
    keys = ["g.gar.0", "g.gar.1"]
    shapes = [[5], [2, 3]]
    xs = [leaf(k, s) for k, s in zip(keys, shapes)]
    ys = hvd.grouped_allreduce(xs, op=hvd.Average, name="g.gar")
    for y, k in zip(ys, keys):
        backward(y, k)
    check = Checker()
    for x, k, s in zip(xs, keys, shapes):
        expected = torch.stack(weights(k, s)).sum(0) / hvd.size()
        check.values(k + " grad", x.grad, expected, 1e-12)
    check.check()


def test_allreduce_gradient_with_fp16_compression():
    key = "g.ar.fp16"
    x = leaf(key, [16], torch.float32)
    y = hvd.allreduce(x, op=hvd.Sum, compression=hvd.Compression.fp16)
    assert y.dtype == torch.float32
    backward(y, key)
    expected = torch.stack([w.to(torch.float16).to(torch.float64)
                            for w in weights(key, [16])]).sum(0).to(torch.float32)
    check = Checker()
    check.values(key + " grad", x.grad, expected, 2.0 / 1024)
    check.check()


def test_allreduce_gradient_on_a_process_set():
    size, me = hvd.size(), hvd.rank()
    members = [r for r in range(size) if r % 2 == me % 2]
    evens = hvd.add_process_set([r for r in range(size) if r % 2 == 0])
    odds = hvd.add_process_set([r for r in range(size) if r % 2 == 1]) if size > 1 else None
    try:
        mine = evens if me % 2 == 0 else odds
        key = f"g.ps.{me % 2}"
        x = leaf(key, [6])
        y = hvd.allreduce(x, op=hvd.Sum, process_set=mine)
        backward(y, key)
        expected = torch.stack(weights(key, [6], ranks=members)).sum(0)
        check = Checker()
        check.values(key + " grad", x.grad, expected, 1e-12)
    finally:
        hvd.barrier()
        if odds is not None:
            hvd.remove_process_set(odds)
        hvd.remove_process_set(evens)
    check.check()


# ---------------------------------------------------------------- allgather


def test_allgather_gradient_sums_the_rows_of_this_rank():
    key = "g.ag"
    size, me = hvd.size(), hvd.rank()
    rows = [r + 1 for r in range(size)]
    x = leaf(key, [rows[me], 3])
    y = hvd.allgather(x, name=key)
    assert list(y.shape) == [sum(rows), 3]
    backward(y, key)
    start = sum(rows[:me])
    expected = torch.stack(weights(key, [sum(rows), 3])).sum(0)[start:start + rows[me]]
    check = Checker()
    check.values(key + " grad", x.grad, expected, 1e-12)
    check.check()


def test_grouped_allgather_gradient():
    size, me = hvd.size(), hvd.rank()
    keys = ["g.gag.0", "g.gag.1"]
    rows = [[r + 1 for r in range(size)], [2 for _ in range(size)]]
    xs = [leaf(k, [rs[me], 2]) for k, rs in zip(keys, rows)]
    ys = hvd.grouped_allgather(xs)
    for y, k in zip(ys, keys):
        backward(y, k)
    check = Checker()
    for x, k, rs in zip(xs, keys, rows):
        start = sum(rs[:me])
        expected = torch.stack(weights(k, [sum(rs), 2])).sum(0)[start:start + rs[me]]
        check.values(k + " grad", x.grad, expected, 1e-12)
    check.check()


# ---------------------------------------------------------------- broadcast


def test_broadcast_gradient_goes_to_the_root():
    size, me = hvd.size(), hvd.rank()
    check = Checker()
    for root in range(size):
        key = f"g.bc.{root}"
        x = leaf(key, [4, 2])
        y = hvd.broadcast(x, root, name=key)
        check.values(key + " value", y.detach(), rank_values(key, root, [4, 2], torch.float64))
        backward(y, key)
        expected = torch.stack(weights(key, [4, 2])).sum(0) if me == root \
            else torch.zeros(4, 2, dtype=torch.float64)
        check.values(key + " grad", x.grad, expected, 1e-12)
    check.check()


# ----------------------------------------------------------------- alltoall


def sent_splits(sender, size):
    return [(sender + j) % 2 + 1 for j in range(size)]


def test_alltoall_gradient_travels_back():
    key = "g.a2a"
    size, me = hvd.size(), hvd.rank()
    splits = sent_splits(me, size)
    x = leaf(key, [sum(splits), 3])
    y, received = hvd.alltoall(x, splits=splits)
    assert not received.requires_grad
    backward(y, key)
    # Rows sent to rank j land in j's output after the rows of ranks < me.
    pieces = []
    for j in range(size):
        received_by_j = [sent_splits(s, size)[j] for s in range(size)]
        w_j = rank_values(key + ".w", j, [sum(received_by_j), 3], torch.float64)
        start = sum(received_by_j[:me])
        pieces.append(w_j[start:start + splits[j]])
    check = Checker()
    check.values(key + " grad", x.grad, torch.cat(pieces), 1e-12)
    check.check()


# ------------------------------------------------------------ reducescatter


@pytest.mark.parametrize("op,pre,post", [(hvd.Sum, 1.0, 1.0), (hvd.Average, 2.0, 0.5),
                                         (hvd.Average, 1.0, 1.0)])
def test_reducescatter_gradient_is_an_allgather(op, pre, post):
    key = f"g.rs.{op}.{pre}"
    size = hvd.size()
    rows = 2 * size + 1
    counts = [rows // size + (1 if r < rows % size else 0) for r in range(size)]
    x = leaf(key, [rows, 2])
    y = hvd.reducescatter(x, op=op, prescale_factor=pre, postscale_factor=post)
    assert list(y.shape) == [counts[hvd.rank()], 2]
    backward(y, key)
    factor = pre * post / (size if op == hvd.Average else 1)
    expected = factor * torch.cat([rank_values(key + ".w", r, [counts[r], 2], torch.float64)
                                   for r in range(size)])
    check = Checker()
    check.values(key + " grad", x.grad, expected, 1e-12)
    check.check()


def test_grouped_reducescatter_gradient():
    size = hvd.size()
    keys = ["g.grs.0", "g.grs.1"]
    rows = [size, 3 * size]
    xs = [leaf(k, [r]) for k, r in zip(keys, rows)]
    ys = hvd.grouped_reducescatter(xs, op=hvd.Sum)
    for y, k in zip(ys, keys):
        backward(y, k)
    check = Checker()
    for x, k, r in zip(xs, keys, rows):
        per = r // size
        expected = torch.cat([rank_values(k + ".w", s, [per], torch.float64)
                              for s in range(size)])
        check.values(k + " grad", x.grad, expected, 1e-12)
    check.check()


# ----------------------------------------------------------- composition


def test_a_chain_of_collectives_backpropagates():
    """allgather -> local op -> allreduce: the chain rule across ranks."""
    key = "g.chain"
    size, me = hvd.size(), hvd.rank()
    x = leaf(key, [2])
    gathered = hvd.allgather(x)            # [2 * size]
    z = hvd.allreduce(gathered * gathered, op=hvd.Sum)  # sum_r gathered_r^2 (same on all)
    backward(z, key)
    # L = sum_r w_r . z = (sum_r w_r) . size * concat(x_s^2): dL/dx_me = 2 * size * W[me] * x_me
    w_total = torch.stack(weights(key, [2 * size])).sum(0)
    expected = 2 * size * w_total[2 * me:2 * me + 2] * x.detach()
    check = Checker()
    check.values(key + " grad", x.grad, expected, 1e-12)
    check.check()
