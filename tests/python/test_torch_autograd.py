"""Gradients of accord.torch's differentiable collectives (run with 1, 2 and 3 ranks).

Each rank r computes the loss L_r = sum(w_r * y_r) of its output y_r with a
seeded weight w_r, so the output gradient on rank r is w_r. The gradient of
each input is checked against the rule of Horovod that accord follows (see
accord/torch/autograd.py), which every rank computes from every rank's
seeded inputs and weights:

* allreduce Sum/Average: the same allreduce of the w_r.
* allgather: the average of the w_r over the set, this rank's rows.
* broadcast: the average of the w_r on the root, 0 elsewhere.
* reducescatter: the w_r of every rank of the set concatenated, times the
  set size for Sum, times the prescale and postscale factors.

Each is checked on the global set and on a process set (the even ranks, the
odd ranks), single and grouped.
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


@pytest.mark.parametrize(
    "op,pre,post",
    [
        (hvd.Sum, 1.0, 1.0),
        (hvd.Average, 1.0, 1.0),
        (hvd.Sum, 2.0, 0.25),
        (hvd.Average, 0.5, 3.0),
    ],
)
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
    expected = (
        torch.stack([w.to(torch.float16).to(torch.float64) for w in weights(key, [16])])
        .sum(0)
        .to(torch.float32)
    )
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


# ------------------------------------------------------ process set scopes


class Scope:
    """Where a collective runs: the global set, or the process set of the
    ranks with this rank's parity (evens or odds)."""

    def __init__(self, process_set, members):
        self.process_set = process_set
        self.members = members  # global ranks, ascending

    @property
    def size(self):
        return len(self.members)

    @property
    def me(self):
        """This rank's rank within the set."""
        return self.members.index(hvd.rank())

    def kwargs(self):
        return {} if self.process_set is None else {"process_set": self.process_set}

    def mean(self, key, shape):
        """The average over the set's ranks of their weights for ``key``."""
        return torch.stack(weights(key, shape, ranks=self.members)).mean(0)


@pytest.fixture(scope="module")
def parity_sets():
    """The process sets of the even and of the odd ranks (added once for the module)."""
    size = hvd.size()
    evens = hvd.add_process_set([r for r in range(size) if r % 2 == 0])
    odds = hvd.add_process_set([r for r in range(size) if r % 2 == 1]) if size > 1 else None
    yield evens, odds
    hvd.barrier()
    if odds is not None:
        hvd.remove_process_set(odds)
    hvd.remove_process_set(evens)


@pytest.fixture(params=["global", "parity_set"])
def scope(request, parity_sets):
    size, me = hvd.size(), hvd.rank()
    if request.param == "global":
        return Scope(None, list(range(size)))
    evens, odds = parity_sets
    return Scope(evens if me % 2 == 0 else odds, [r for r in range(size) if r % 2 == me % 2])


# ---------------------------------------------------------------- allgather


def test_allgather_gradient_averages_the_rows_of_this_rank(scope):
    key = f"g.ag.{scope.members}"
    rows = {r: r + 1 for r in scope.members}
    counts = [rows[r] for r in scope.members]
    x = leaf(key, [rows[hvd.rank()], 3])
    y = hvd.allgather(x, name=key, **scope.kwargs())
    assert list(y.shape) == [sum(counts), 3]
    backward(y, key)
    start = sum(counts[: scope.me])
    expected = scope.mean(key, [sum(counts), 3])[start : start + rows[hvd.rank()]]
    check = Checker()
    check.values(key + " grad", x.grad, expected, 1e-12)
    check.check()


def test_grouped_allgather_gradient(scope):
    keys = [f"g.gag.0.{scope.members}", f"g.gag.1.{scope.members}"]
    rows = [{r: r + 1 for r in scope.members}, {r: 2 for r in scope.members}]
    xs = [leaf(k, [rs[hvd.rank()], 2]) for k, rs in zip(keys, rows)]
    ys = hvd.grouped_allgather(xs, **scope.kwargs())
    for y, k in zip(ys, keys):
        backward(y, k)
    check = Checker()
    for x, k, rs in zip(xs, keys, rows):
        counts = [rs[r] for r in scope.members]
        start = sum(counts[: scope.me])
        expected = scope.mean(k, [sum(counts), 2])[start : start + counts[scope.me]]
        check.values(k + " grad", x.grad, expected, 1e-12)
    check.check()


# ---------------------------------------------------------------- broadcast


def test_broadcast_gradient_is_the_average_on_the_root_and_zero_elsewhere(scope):
    check = Checker()
    for root in scope.members:
        key = f"g.bc.{root}.{scope.members}"
        x = leaf(key, [4, 2])
        y = hvd.broadcast(x, root, name=key, **scope.kwargs())
        check.values(key + " value", y.detach(), rank_values(key, root, [4, 2], torch.float64))
        backward(y, key)
        expected = scope.mean(key, [4, 2]) if hvd.rank() == root else torch.zeros(4, 2, dtype=torch.float64)
        check.values(key + " grad", x.grad, expected, 1e-12)
    check.check()


def test_broadcast_gradient_off_the_root_is_multiplied_by_zero():
    """A non-finite output gradient makes every rank's gradient non-finite, as in Horovod."""
    if hvd.size() < 2:
        pytest.skip("needs a rank that is not the root")
    x = leaf("g.bc.nan", [3])
    y = hvd.broadcast(x, 0, name="g.bc.nan")
    w = torch.ones(3, dtype=torch.float64)
    w[1] = float("nan") if hvd.rank() == 1 else 1.0
    (y * w).sum().backward()
    check = Checker()
    check.true(bool(torch.isnan(x.grad[1])), f"gradient {x.grad.tolist()}: index 1 should be nan")
    check.true(
        bool((x.grad[[0, 2]] == (1.0 if hvd.rank() == 0 else 0.0)).all()),
        f"gradient {x.grad.tolist()}: indices 0 and 2 wrong",
    )
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
        pieces.append(w_j[start : start + splits[j]])
    check = Checker()
    check.values(key + " grad", x.grad, torch.cat(pieces), 1e-12)
    check.check()


# ------------------------------------------------------------ reducescatter


def reducescatter_factor(op, pre, post, size):
    """Horovod's factor: the set size for Sum (none for Average), times the scale factors."""
    return (size if op == hvd.Sum else 1) * pre * post


def rows_of(rows, size):
    """How reducescatter splits ``rows`` over ``size`` ranks (the first ones get one more)."""
    return [rows // size + (1 if r < rows % size else 0) for r in range(size)]


@pytest.mark.parametrize(
    "op,pre,post",
    [(hvd.Sum, 1.0, 1.0), (hvd.Average, 1.0, 1.0), (hvd.Sum, 0.5, 3.0), (hvd.Average, 2.0, 0.25)],
)
def test_reducescatter_gradient_is_a_scaled_allgather(scope, op, pre, post):
    key = f"g.rs.{op}.{pre}.{scope.members}"
    rows = 2 * scope.size + 1
    counts = rows_of(rows, scope.size)
    x = leaf(key, [rows, 2])
    y = hvd.reducescatter(x, op=op, prescale_factor=pre, postscale_factor=post, **scope.kwargs())
    assert list(y.shape) == [counts[scope.me], 2]
    backward(y, key)
    expected = reducescatter_factor(op, pre, post, scope.size) * torch.cat(
        [rank_values(key + ".w", r, [counts[i], 2], torch.float64) for i, r in enumerate(scope.members)]
    )
    check = Checker()
    check.values(key + " grad", x.grad, expected, 1e-12)
    check.check()


@pytest.mark.parametrize("op,pre,post", [(hvd.Sum, 1.0, 1.0), (hvd.Average, 1.0, 1.0), (hvd.Sum, 2.0, 0.5)])
def test_grouped_reducescatter_gradient(scope, op, pre, post):
    keys = [f"g.grs.0.{op}.{pre}.{scope.members}", f"g.grs.1.{op}.{pre}.{scope.members}"]
    rows = [scope.size, 3 * scope.size + 1]
    xs = [leaf(k, [r]) for k, r in zip(keys, rows)]
    ys = hvd.grouped_reducescatter(xs, op=op, prescale_factor=pre, postscale_factor=post, **scope.kwargs())
    for y, k in zip(ys, keys):
        backward(y, k)
    check = Checker()
    factor = reducescatter_factor(op, pre, post, scope.size)
    for x, k, r in zip(xs, keys, rows):
        counts = rows_of(r, scope.size)
        expected = factor * torch.cat(
            [rank_values(k + ".w", s, [counts[i]], torch.float64) for i, s in enumerate(scope.members)]
        )
        check.values(k + " grad", x.grad, expected, 1e-12)
    check.check()


# ----------------------------------------------------------- composition


def test_a_chain_of_collectives_backpropagates():
    """allgather -> local op -> allreduce: the rules compose by the chain rule."""
    key = "g.chain"
    size, me = hvd.size(), hvd.rank()
    x = leaf(key, [2])
    gathered = hvd.allgather(x)  # [2 * size]
    z = hvd.allreduce(gathered * gathered, op=hvd.Sum)  # sum_r gathered_r^2 (same on all)
    backward(z, key)
    # dz: the Sum-allreduce of the w_r, W = sum_r w_r, on every rank; d(gathered)
    # = 2 * gathered * W; the allgather averages that over the ranks (all
    # equal) and keeps this rank's rows: dx = 2 * W[me rows] * x.
    w_total = torch.stack(weights(key, [2 * size])).sum(0)
    expected = 2 * w_total[2 * me : 2 * me + 2] * x.detach()
    check = Checker()
    check.values(key + " grad", x.grad, expected, 1e-12)
    check.check()
