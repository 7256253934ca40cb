"""accord.torch.DistributedOptimizer(op=Adasum) against a reference computed on every rank.

Every rank trains the same float64 model on its own seeded batch. Each rank
also replays every rank's local step (a model and a wrapped optimizer per
rank, whose seeds it knows), takes the deltas ``after - before`` and
combines them per parameter tensor with the pairwise formula

    Adasum(a, b) = (1 - a.b / (2|a|^2)) a + (1 - a.b / (2|b|^2)) b

in tree order (ranks 0+1, 2+3, then the two results); the parameters must
equal ``before + combined`` after every step, and be bitwise equal on every
rank. At 1 rank the delta is unchanged. At a number of ranks that is not a
power of two, step() must fail on every rank, leave the parameters as they
were and the job usable.

Run with: mpirun -np N python3 -m pytest -x -q tests/python/test_torch_optimizer_adasum.py
"""

import copy

import pytest
import torch
from test_torch_optimizer import (
    STEPS,
    assert_same_on_every_rank,
    batch,
    local_loss,
    make_model,
    make_optimizer,
)

import accord.torch as hvd
from accord.ops import core_op

from torch_helpers import assert_close_f64


def _core_has_adasum() -> bool:
    try:
        core_op(hvd.Adasum)
    except NotImplementedError:
        return False
    return True


HAS_ADASUM = _core_has_adasum()
needs_adasum = pytest.mark.skipif(
    not HAS_ADASUM,
    reason="the core has no Adasum allreduce yet "
    "(accord.ops.core_op(accord.Adasum) raises NotImplementedError)",
)

# accord.init() once per session, accord.shutdown() at its end (conftest.py).
pytestmark = pytest.mark.usefixtures("accord_initialized")


def power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


@pytest.fixture
def power_of_two_ranks():
    if not power_of_two(hvd.size()):
        pytest.skip(f"Adasum refuses {hvd.size()} ranks (see test_refused_rank_count_...)")


def adasum_pair(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    dot = float((a * b).sum())
    a_sq = float((a * a).sum())
    b_sq = float((b * b).sum())
    # A zero vector gets coefficient 1: Adasum(0, b) = b.
    a_coeff = 1.0 - dot / (2 * a_sq) if a_sq > 0 else 1.0
    b_coeff = 1.0 - dot / (2 * b_sq) if b_sq > 0 else 1.0
    return a_coeff * a + b_coeff * b


def adasum_tree(vectors):
    """Ranks combine pairwise at distance 1, then 2, ...; the lower ranks on the left."""
    if len(vectors) == 1:
        return vectors[0]
    half = len(vectors) // 2
    return adasum_pair(adasum_tree(vectors[:half]), adasum_tree(vectors[half:]))


class ReplayedRanks:
    """Every rank's local model and optimizer, stepped from common parameters."""

    def __init__(self, kind, clip=None):
        self.model = make_model()
        self.locals = []
        for _ in range(hvd.size()):
            model = make_model()
            self.locals.append((model, make_optimizer(kind, model)))
        self.clip = clip

    def step(self, step, passes=1):
        before = [p.detach().clone() for p in self.model.parameters()]
        deltas = []
        for r, (model, opt) in enumerate(self.locals):
            with torch.no_grad():
                for p, q in zip(model.parameters(), before):
                    p.copy_(q)
            opt.zero_grad()
            x, y = batch(step, r)
            for part_x, part_y in zip(x.chunk(passes), y.chunk(passes)):
                (local_loss(model, part_x, part_y) / passes).backward()
            if self.clip is not None:
                torch.nn.utils.clip_grad_norm_(model.parameters(), self.clip)
            opt.step()
            deltas.append([p.detach() - q for p, q in zip(model.parameters(), before)])
        with torch.no_grad():
            for i, (p, start) in enumerate(zip(self.model.parameters(), before)):
                p.copy_(start + adasum_tree([d[i] for d in deltas]))


def compare(model, reference, what, rtol=1e-10, atol=1e-12):
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        assert_close_f64(p, q, f"{what}: {name}", rtol, atol)
    assert_same_on_every_rank(model, what)


@pytest.mark.skipif(HAS_ADASUM, reason="the core implements Adasum")
def test_adasum_unavailable_raises():
    model = make_model()
    with pytest.raises(NotImplementedError, match="Adasum"):
        hvd.DistributedOptimizer(make_optimizer("sgd", model), op=hvd.Adasum)


@needs_adasum
@pytest.mark.usefixtures("power_of_two_ranks")
@pytest.mark.parametrize("kind", ["sgd", "adam"])
@pytest.mark.parametrize("groups", [None, 2])
def test_matches_reference(kind, groups):
    model = make_model()
    dist = hvd.DistributedOptimizer(
        make_optimizer(kind, model), named_parameters=model.named_parameters(), op=hvd.Adasum, groups=groups
    )
    assert isinstance(dist, type(make_optimizer(kind, model)))
    reference = ReplayedRanks(kind)
    for step in range(STEPS):
        dist.zero_grad()
        local_loss(model, *batch(step, hvd.rank())).backward()
        dist.step()
        reference.step(step)
        compare(model, reference.model, f"Adasum {kind}, groups={groups}, step {step}")


@needs_adasum
@pytest.mark.usefixtures("power_of_two_ranks")
def test_backward_passes_and_clipping():
    """Two backward passes per step, gradients clipped locally before the local step."""
    model = make_model()
    dist = hvd.DistributedOptimizer(make_optimizer("sgd", model), op=hvd.Adasum, backward_passes_per_step=2)
    reference = ReplayedRanks("sgd", clip=0.05)
    for step in range(STEPS):
        dist.zero_grad()
        x, y = batch(step, hvd.rank())
        for part_x, part_y in zip(x.chunk(2), y.chunk(2)):
            (local_loss(model, part_x, part_y) / 2).backward()
        with pytest.raises(RuntimeError, match="zero_grad"):
            dist.zero_grad()
        dist.synchronize()  # nothing to wait for: gradients stay local
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.05)
        with dist.skip_synchronize():
            dist.step()
        reference.step(step, passes=2)
        compare(model, reference.model, f"Adasum, 2 passes, clipped, step {step}")


@needs_adasum
@pytest.mark.usefixtures("power_of_two_ranks")
def test_orthogonal_and_equal_deltas():
    """Orthogonal deltas add up; equal deltas give one of them (not their sum)."""
    weights = torch.nn.Parameter(torch.zeros(hvd.size(), dtype=torch.float64))
    shared = torch.nn.Parameter(torch.zeros(3, dtype=torch.float64))
    dist = hvd.DistributedOptimizer(
        torch.optim.SGD([weights, shared], lr=0.5),
        named_parameters=[("weights", weights), ("shared", shared)],
        op=hvd.Adasum,
    )
    # Rank r pulls only weights[r] towards r + 1 (gradient -(r + 1) there), and
    # every rank pulls `shared` towards the same point.
    target = torch.arange(1, hvd.size() + 1, dtype=torch.float64)
    loss = 0.5 * (weights[hvd.rank()] - target[hvd.rank()]) ** 2
    loss = loss + 0.5 * ((shared - torch.tensor([1.0, -2.0, 4.0], dtype=torch.float64)) ** 2).sum()
    loss.backward()
    dist.step()
    assert torch.equal(weights.detach(), 0.5 * target), (
        f"rank {hvd.rank()}: weights {weights.tolist()}, expected {(0.5 * target).tolist()}"
    )
    assert torch.equal(shared.detach(), torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64)), (
        f"rank {hvd.rank()}: shared {shared.tolist()}"
    )
    assert dist._parameter_names == {weights: "weights", shared: "shared"}


@needs_adasum
@pytest.mark.usefixtures("power_of_two_ranks")
def test_fp16_compression():
    model = make_model()
    dist = hvd.DistributedOptimizer(
        make_optimizer("sgd", model), op=hvd.Adasum, compression=hvd.Compression.fp16
    )
    reference = ReplayedRanks("sgd")
    for step in range(STEPS):
        dist.zero_grad()
        local_loss(model, *batch(step, hvd.rank())).backward()
        dist.step()
        reference.step(step)
    # The deltas (about 1e-2) travel as float16, about 3 decimal digits each.
    compare(model, reference.model, "Adasum, fp16", rtol=1e-2, atol=1e-4)


@needs_adasum
def test_refused_rank_count_restores_parameters():
    if power_of_two(hvd.size()):
        pytest.skip(f"Adasum works at {hvd.size()} ranks")
    model = make_model()
    dist = hvd.DistributedOptimizer(
        make_optimizer("sgd", model), named_parameters=model.named_parameters(), op=hvd.Adasum
    )
    before = copy.deepcopy(model)
    local_loss(model, *batch(0, hvd.rank())).backward()
    with pytest.raises(NotImplementedError, match=f"power-of-two.* {hvd.size()}$"):
        dist.step()
    for (name, p), q in zip(model.named_parameters(), before.parameters()):
        assert torch.equal(p, q), f"rank {hvd.rank()}: {name} changed by the failed step"
    # The job goes on: the next collectives line up on every rank.
    total = hvd.allreduce(torch.tensor([hvd.rank() + 1.0]), op=hvd.Sum, name="after.adasum")
    assert total.item() == hvd.size() * (hvd.size() + 1) / 2
    dist.zero_grad()
    averaged = hvd.DistributedOptimizer(
        make_optimizer("sgd", before), named_parameters=before.named_parameters()
    )
    local_loss(before, *batch(0, hvd.rank())).backward()
    averaged.step()
    assert_same_on_every_rank(before, "Average after the Adasum error")
