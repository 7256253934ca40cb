"""accord.torch.DistributedOptimizer trained on every rank against single-process training.

Every rank trains the same float64 model on its own seeded batch. Each rank
also trains a plain optimizer locally on the batches of all ranks (whose
seeds it knows), with the loss the distributed run is equivalent to, and
the parameters must agree after every run; they must also be bitwise equal
on every rank.

Run with: mpirun -np N python3 -m pytest -x -q tests/python/test_torch_optimizer.py
"""

import contextlib
import warnings

import pytest
import torch

import accord.torch as hvd

from torch_helpers import assert_close_f64

IN, HIDDEN, OUT = 4, 8, 3
BATCH = 6  # rows per rank per step (even: backward_passes_per_step=2 splits it)
STEPS = 4


# accord.init() once per session, accord.shutdown() at its end (conftest.py).
pytestmark = pytest.mark.usefixtures("accord_initialized")


def assert_close(got, expected, what, rtol=1e-10, atol=1e-12):
    assert_close_f64(got, expected, what, rtol, atol)


def assert_same_on_every_rank(model, what):
    """Every parameter equals rank 0's bit for bit."""
    for name, p in model.named_parameters():
        root = p.detach().clone()
        hvd.broadcast_(root, root_rank=0, name=f"check.{what}.{name}")
        if not torch.equal(root, p.detach()):
            diff = (root - p.detach()).abs().reshape(-1)
            i = int(diff.argmax())
            raise AssertionError(
                f"rank {hvd.rank()}: {what}: parameter {name} differs from rank 0's at index {i}: "
                f"rank 0 has {root.reshape(-1)[i].item()!r}, this rank {p.reshape(-1)[i].item()!r}"
            )


class Net(torch.nn.Module):
    """Linear+ReLU+Linear, plus an optional branch that only some ranks use."""

    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(IN, HIDDEN)
        self.fc2 = torch.nn.Linear(HIDDEN, OUT)
        self.extra = torch.nn.Linear(IN, OUT)

    def forward(self, x, use_extra=False):
        out = self.fc2(torch.relu(self.fc1(x)))
        if use_extra:
            out = out + self.extra(x)
        return out


def make_model(seed=1234):
    torch.manual_seed(seed)
    return Net().double()


def batch(step, r):
    """The seeded batch of rank r at a step."""
    g = torch.Generator().manual_seed(1000 * step + r)
    x = torch.randn(BATCH, IN, generator=g, dtype=torch.float64)
    y = torch.randn(BATCH, OUT, generator=g, dtype=torch.float64)
    return x, y


def local_loss(model, x, y, use_extra=False):
    return torch.nn.functional.mse_loss(model(x, use_extra), y)


def make_optimizer(kind, model):
    if kind == "sgd":
        return torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    if kind == "adam":
        return torch.optim.Adam(model.parameters(), lr=0.01)
    raise AssertionError(kind)


def train_reference(
    model, opt, steps=STEPS, combine="average", uses_extra=lambda r: False, clip=None, after_step=None
):
    """Single-process training on every rank's batch, with the equivalent loss."""
    size = hvd.size()
    for step in range(steps):
        opt.zero_grad()
        total = sum(local_loss(model, *batch(step, r), uses_extra(r)) for r in range(size))
        if combine == "average":
            total = total / size
        total.backward()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        if after_step is not None:
            after_step()


def train_distributed(model, opt, steps=STEPS, passes=1, use_extra=False):
    for step in range(steps):
        opt.zero_grad()
        x, y = batch(step, hvd.rank())
        for part_x, part_y in zip(x.chunk(passes), y.chunk(passes)):
            (local_loss(model, part_x, part_y, use_extra) / passes).backward()
        opt.step()


def compare_with_reference(model, reference, what, rtol=1e-10, atol=1e-12):
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        assert_close(p, q, f"{what}: {name}", rtol=rtol, atol=atol)
    assert_same_on_every_rank(model, what)


@pytest.mark.parametrize("kind", ["sgd", "adam"])
@pytest.mark.parametrize("naming", ["named", "unnamed"])
def test_matches_single_process_training(kind, naming):
    model = make_model()
    opt = make_optimizer(kind, model)
    named = list(model.named_parameters()) if naming == "named" else None
    dist = hvd.DistributedOptimizer(opt, named_parameters=named)
    assert isinstance(dist, type(opt)), "the wrapper is an instance of the wrapped class"
    scheduler = torch.optim.lr_scheduler.StepLR(dist, step_size=2, gamma=0.5)
    for step in range(STEPS):
        dist.zero_grad()
        local_loss(model, *batch(step, hvd.rank())).backward()
        dist.step()
        scheduler.step()

    reference = make_model()
    ref_opt = make_optimizer(kind, reference)
    ref_scheduler = torch.optim.lr_scheduler.StepLR(ref_opt, step_size=2, gamma=0.5)
    train_reference(reference, ref_opt, after_step=ref_scheduler.step)
    assert dist.param_groups[0]["lr"] == ref_opt.param_groups[0]["lr"]
    compare_with_reference(model, reference, f"{kind}/{naming}")


def torch_version():
    return tuple(int(part) for part in torch.__version__.split("+")[0].split(".")[:2])


def test_gradient_hooks_follow_the_torch_version():
    """torch >= 2.1: hooks on the parameters themselves; older: on their AccumulateGrad nodes."""
    model = make_model()
    dist = hvd.DistributedOptimizer(make_optimizer("sgd", model), named_parameters=model.named_parameters())
    hooked = [p for p in model.parameters() if p.requires_grad]
    if torch_version() >= (2, 1):
        assert hasattr(torch.Tensor, "register_post_accumulate_grad_hook"), torch.__version__
        assert dist._grad_accs == [], "AccumulateGrad nodes held where parameters take post-accumulate hooks"
    else:
        assert len(dist._grad_accs) == len(hooked), (
            f"{len(dist._grad_accs)} nodes hooked, {len(hooked)} expected"
        )
    assert len(dist._hook_handles) == len(hooked)
    # Either way, one step reduces every gradient.
    train_distributed(model, dist, steps=1)
    reference = make_model()
    train_reference(reference, make_optimizer("sgd", reference), steps=1)
    compare_with_reference(model, reference, "hooks")


@pytest.mark.skipif(
    not hasattr(torch, "compile"), reason=f"torch.compile needs torch 2.0; this is {torch.__version__}"
)
@pytest.mark.watchdog_seconds(600)
def test_compiled_model_matches_single_process_training():
    """A model compiled with torch.compile (inductor on the CPU) trains through DistributedOptimizer."""
    model = make_model()
    compiled = torch.compile(model)
    dist = hvd.DistributedOptimizer(make_optimizer("sgd", model), named_parameters=model.named_parameters())
    for step in range(STEPS):
        dist.zero_grad()
        x, y = batch(step, hvd.rank())
        torch.nn.functional.mse_loss(compiled(x), y).backward()
        dist.step()
    reference = make_model()
    train_reference(reference, make_optimizer("sgd", reference))
    # Inductor's fused kernels may round differently from eager: float64, so 1e-9 is ample.
    compare_with_reference(model, reference, "torch.compile", rtol=1e-9, atol=1e-12)


def test_backward_starts_allreduce_before_step():
    model = make_model()
    dist = hvd.DistributedOptimizer(make_optimizer("sgd", model), named_parameters=model.named_parameters())
    local_loss(model, *batch(0, hvd.rank())).backward()
    # Every gradient that backward produced is already being reduced.
    pending = {p for entry in dist._pending.values() for p in entry.params}
    expected = {p for n, p in model.named_parameters() if not n.startswith("extra")}
    assert pending == expected, (
        f"rank {hvd.rank()}: {len(pending)} reductions in flight after backward, expected {len(expected)}"
    )
    dist.step()
    reference = make_model()
    train_reference(reference, make_optimizer("sgd", reference), steps=1)
    compare_with_reference(model, reference, "overlap")


def test_backward_passes_per_step():
    model = make_model()
    dist = hvd.DistributedOptimizer(
        make_optimizer("sgd", model), named_parameters=model.named_parameters(), backward_passes_per_step=2
    )
    # After one of the two passes nothing may be reduced yet.
    x, y = batch(0, hvd.rank())
    (local_loss(model, x[: BATCH // 2], y[: BATCH // 2]) / 2).backward()
    assert not dist._pending, f"rank {hvd.rank()}: a reduction started after 1 of 2 passes"
    (local_loss(model, x[BATCH // 2 :], y[BATCH // 2 :]) / 2).backward()
    dist.step()
    train_distributed(model, dist, steps=STEPS, passes=2)

    reference = make_model()
    ref_opt = make_optimizer("sgd", reference)
    train_reference(reference, ref_opt, steps=1)
    train_reference(reference, ref_opt, steps=STEPS)
    compare_with_reference(model, reference, "backward_passes_per_step=2")


def test_too_many_backward_passes_raise():
    model = make_model()
    dist = hvd.DistributedOptimizer(make_optimizer("sgd", model), named_parameters=model.named_parameters())
    x, y = batch(0, hvd.rank())
    local_loss(model, x, y).backward()
    with pytest.raises(RuntimeError, match="backward_passes_per_step"):
        local_loss(model, x, y).backward()
    dist.synchronize()  # completes the first pass's reductions on every rank


@pytest.mark.parametrize("groups", ["int", "list"])
def test_groups(groups):
    model = make_model()
    if groups == "int":
        spec = 2
    else:
        spec = [[model.fc1.weight, model.fc1.bias], [model.fc2.weight]]  # fc2.bias alone
    dist = hvd.DistributedOptimizer(
        make_optimizer("sgd", model), named_parameters=model.named_parameters(), groups=spec
    )
    assert len(dist._groups) == 2
    train_distributed(model, dist)
    reference = make_model()
    train_reference(reference, make_optimizer("sgd", reference))
    compare_with_reference(model, reference, f"groups={groups}")


def test_fp16_compression():
    model = make_model()
    dist = hvd.DistributedOptimizer(
        make_optimizer("sgd", model),
        named_parameters=model.named_parameters(),
        compression=hvd.Compression.fp16,
    )
    train_distributed(model, dist)
    reference = make_model()
    train_reference(reference, make_optimizer("sgd", reference))
    # float16 keeps about 3 decimal digits of each reduced gradient.
    compare_with_reference(model, reference, "fp16", rtol=1e-2, atol=2e-3)


def test_op_sum():
    model = make_model()
    dist = hvd.DistributedOptimizer(
        make_optimizer("sgd", model), named_parameters=model.named_parameters(), op=hvd.Sum
    )
    train_distributed(model, dist)
    reference = make_model()
    train_reference(reference, make_optimizer("sgd", reference), combine="sum")
    compare_with_reference(model, reference, "op=Sum")


def test_gradient_predivide_factor():
    model = make_model()
    dist = hvd.DistributedOptimizer(
        make_optimizer("sgd", model), named_parameters=model.named_parameters(), gradient_predivide_factor=4.0
    )
    train_distributed(model, dist)
    reference = make_model()
    train_reference(reference, make_optimizer("sgd", reference))
    compare_with_reference(model, reference, "gradient_predivide_factor=4")
    with pytest.raises(ValueError, match="gradient_predivide_factor"):
        hvd.DistributedOptimizer(make_optimizer("sgd", model), op=hvd.Sum, gradient_predivide_factor=2.0)


@pytest.mark.parametrize("groups", [None, 1])
def test_parameter_without_gradient_on_some_ranks(groups):
    """Only rank 0 uses the extra branch; the others must still take part in its reduction."""
    model = make_model()
    dist = hvd.DistributedOptimizer(
        make_optimizer("sgd", model), named_parameters=model.named_parameters(), groups=groups
    )
    use_extra = hvd.rank() == 0
    for step in range(STEPS):
        dist.zero_grad(set_to_none=(step % 2 == 0))
        local_loss(model, *batch(step, hvd.rank()), use_extra).backward()
        dist.step()
    reference = make_model()
    train_reference(reference, make_optimizer("sgd", reference), uses_extra=lambda r: r == 0)
    compare_with_reference(model, reference, f"unused parameter, groups={groups}")


def test_duplicate_names_raise():
    model = make_model()
    named = [("layer", model.fc1.weight), ("layer", model.fc1.bias), ("other", model.fc2.weight)]
    with pytest.raises(ValueError, match="duplicates: layer"):
        hvd.DistributedOptimizer(make_optimizer("sgd", model), named_parameters=named)


def test_parameters_left_unnamed_raise_on_every_rank():
    """named_parameters must name every parameter of the optimizer, frozen ones too."""
    model = make_model()
    model.extra.bias.requires_grad_(False)
    opt = make_optimizer("sgd", model)
    named = [(n, p) for n, p in model.named_parameters() if n.startswith("fc")]
    with pytest.raises(ValueError) as error:
        hvd.DistributedOptimizer(opt, named_parameters=named)
    expected = (
        "DistributedOptimizer: named_parameters was specified, but 2 parameter(s) of the "
        "optimizer are not named in it: param_groups[0]['params'][4] (shape [3, 4]), "
        "param_groups[0]['params'][5] (shape [3])."
    )
    assert str(error.value).startswith(expected), f"rank {hvd.rank()}: {error.value}"
    # The job goes on: the same optimizer, named in full, trains as usual.
    model.extra.bias.requires_grad_(True)
    dist = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    train_distributed(model, dist)
    reference = make_model()
    train_reference(reference, make_optimizer("sgd", reference))
    compare_with_reference(model, reference, "after the unnamed-parameter error")


def two_group_sgd(model):
    return torch.optim.SGD(
        [
            {"params": [model.fc1.weight, model.fc1.bias]},
            {"params": [model.fc2.weight, model.fc2.bias, model.extra.weight, model.extra.bias], "lr": 0.05},
        ],
        lr=0.1,
        momentum=0.9,
    )


def test_unnamed_parameters_named_by_group_and_index():
    model = make_model()
    dist = hvd.DistributedOptimizer(two_group_sgd(model))
    params = [
        model.fc1.weight,
        model.fc1.bias,
        model.fc2.weight,
        model.fc2.bias,
        model.extra.weight,
        model.extra.bias,
    ]
    expected = [
        "allreduce.noname.0.0",
        "allreduce.noname.0.1",
        "allreduce.noname.1.0",
        "allreduce.noname.1.1",
        "allreduce.noname.1.2",
        "allreduce.noname.1.3",
    ]
    got = [dist._parameter_names[p] for p in params]
    assert got == expected, f"rank {hvd.rank()}: _parameter_names gives {got}"
    assert len(dist._parameter_names) == len(params)
    everywhere = hvd.allgather_object(got)
    assert all(names == expected for names in everywhere), f"names per rank: {everywhere}"
    train_distributed(model, dist)
    reference = make_model()
    train_reference(reference, two_group_sgd(reference))
    compare_with_reference(model, reference, "two parameter groups, unnamed")


def test_named_parameters_may_name_more_than_the_optimizer_holds():
    """An optimizer over part of the model, with every parameter of the model named."""
    model = make_model()
    part = [model.fc1.weight, model.fc1.bias]
    dist = hvd.DistributedOptimizer(torch.optim.SGD(part, lr=0.1), named_parameters=model.named_parameters())
    for name, p in model.named_parameters():
        assert dist._parameter_names[p] == name, f"rank {hvd.rank()}: {name}"
    train_distributed(model, dist)
    reference = make_model()
    train_reference(reference, torch.optim.SGD([reference.fc1.weight, reference.fc1.bias], lr=0.1))
    compare_with_reference(model, reference, "optimizer over fc1 only")


STEP_AFTER_SYNCHRONIZE = (
    "optimizer.step() called without optimizer.skip_synchronize() context after optimizer.synchronize()."
)


@pytest.mark.parametrize("skip", [True, False])
def test_synchronize_clip_and_step(skip):
    """Clipping between synchronize() and step(); without skip_synchronize() step() warns once."""
    model = make_model()
    dist = hvd.DistributedOptimizer(make_optimizer("sgd", model), named_parameters=model.named_parameters())
    for step in range(STEPS):
        dist.zero_grad()
        local_loss(model, *batch(step, hvd.rank())).backward()
        dist.synchronize()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.05)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with dist.skip_synchronize() if skip else contextlib.nullcontext():
                dist.step()
        messages = [f"{w.category.__name__}: {w.message}" for w in caught]
        assert len(caught) == (0 if skip else 1), f"rank {hvd.rank()}, step {step}: {messages}"
        if not skip:
            assert caught[0].category is UserWarning, messages
            assert str(caught[0].message).startswith(STEP_AFTER_SYNCHRONIZE), messages
            assert caught[0].filename == __file__, f"warned at {caught[0].filename}"
    # A step without an explicit synchronize() does not warn.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        train_distributed(model, dist, steps=1)
    assert not caught, f"rank {hvd.rank()}: {[str(w.message) for w in caught]}"

    reference = make_model()
    ref_opt = make_optimizer("sgd", reference)
    train_reference(reference, ref_opt, clip=0.05)
    train_reference(reference, ref_opt, steps=1)
    compare_with_reference(model, reference, f"clipped after synchronize(), skip={skip}")


def test_bad_arguments_raise():
    model = make_model()
    opt = make_optimizer("sgd", model)
    with pytest.raises(ValueError, match="more than one group"):
        hvd.DistributedOptimizer(opt, groups=[[model.fc1.weight], [model.fc1.weight]])
    with pytest.raises(ValueError, match="groups"):
        hvd.DistributedOptimizer(opt, groups="two")
    with pytest.raises(ValueError, match="backward_passes_per_step"):
        hvd.DistributedOptimizer(opt, backward_passes_per_step=0)
    with pytest.raises(ValueError, match="op must be Average, Sum or Adasum"):
        hvd.DistributedOptimizer(opt, op=hvd.Max)
    dist = hvd.DistributedOptimizer(opt)
    with pytest.raises(ValueError, match="already"):
        hvd.DistributedOptimizer(dist)


def test_zero_grad_while_pending_raises():
    model = make_model()
    dist = hvd.DistributedOptimizer(make_optimizer("sgd", model), named_parameters=model.named_parameters())
    local_loss(model, *batch(0, hvd.rank())).backward()
    with pytest.raises(RuntimeError, match="zero_grad"):
        dist.zero_grad()
    dist.step()
    dist.zero_grad()  # allowed again once the reductions were awaited
    reference = make_model()
    train_reference(reference, make_optimizer("sgd", reference), steps=1)
    compare_with_reference(model, reference, "zero_grad after step")


class EmbeddingNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding = torch.nn.Embedding(20, 5, sparse=True)
        self.fc = torch.nn.Linear(5, 2)

    def forward(self, tokens, use_embedding=True):
        if not use_embedding:
            return self.fc(torch.ones(tokens.shape[0], 5, dtype=self.fc.weight.dtype))
        return self.fc(self.embedding(tokens).sum(dim=1))


def embedding_batch(step, r):
    g = torch.Generator().manual_seed(5000 + 100 * step + r)
    # Each rank draws from its own range of rows, overlapping its neighbour's.
    tokens = torch.randint(3 * r, 3 * r + 8, (4, 3), generator=g) % 20
    target = torch.randn(4, 2, generator=g, dtype=torch.float64)
    return tokens, target


def uses_embedding(step, r):
    """In the "unused" variant, only rank 0 reaches the embedding after step 0."""
    return step == 0 or r == 0


@pytest.mark.parametrize("sparse_as_dense", [False, True])
@pytest.mark.parametrize("unused", [False, True])
def test_sparse_gradients(sparse_as_dense, unused):
    use = uses_embedding if unused else (lambda step, r: True)
    torch.manual_seed(7)
    model = EmbeddingNet().double()
    dist = hvd.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.2),
        named_parameters=model.named_parameters(),
        sparse_as_dense=sparse_as_dense,
    )
    for step in range(STEPS):
        dist.zero_grad(set_to_none=True)
        tokens, target = embedding_batch(step, hvd.rank())
        out = model(tokens, use(step, hvd.rank()))
        torch.nn.functional.mse_loss(out, target).backward()
        dist.step()
        # The optimizer gets the layout backward produced, also when it was
        # reduced as a dense tensor (a rank without a gradient joins with an
        # empty sparse one, or with zeros).
        assert model.embedding.weight.grad.is_sparse, f"rank {hvd.rank()}, step {step}"

    torch.manual_seed(7)
    reference = EmbeddingNet().double()
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.2)
    for step in range(STEPS):
        ref_opt.zero_grad()
        total = sum(
            torch.nn.functional.mse_loss(reference(t, use(step, r)), y)
            for r, (t, y) in enumerate(embedding_batch(step, r) for r in range(hvd.size()))
        )
        (total / hvd.size()).backward()
        ref_opt.step()
    compare_with_reference(model, reference, f"sparse_as_dense={sparse_as_dense}, unused={unused}")


class SparseOnlyNet(torch.nn.Module):
    """A sparse embedding and a fixed projection: every parameter gets a sparse gradient."""

    def __init__(self):
        super().__init__()
        self.embedding = torch.nn.Embedding(20, 5, sparse=True)
        self.register_buffer("projection", torch.randn(5, 2))

    def forward(self, tokens):
        return self.embedding(tokens).sum(dim=1) @ self.projection


@pytest.mark.parametrize("sparse_as_dense", [False, True])
def test_sparse_adam(sparse_as_dense):
    """SparseAdam accepts only sparse gradients: the reduced one must stay sparse."""
    torch.manual_seed(11)
    model = SparseOnlyNet().double()
    dist = hvd.DistributedOptimizer(
        torch.optim.SparseAdam(list(model.parameters()), lr=0.05),
        named_parameters=model.named_parameters(),
        sparse_as_dense=sparse_as_dense,
    )
    torch.manual_seed(11)
    reference = SparseOnlyNet().double()
    ref_opt = torch.optim.SparseAdam(list(reference.parameters()), lr=0.05)
    mse = torch.nn.functional.mse_loss
    what = f"SparseAdam, sparse_as_dense={sparse_as_dense}"
    for step in range(STEPS):
        dist.zero_grad(set_to_none=True)
        mse(model(embedding_batch(step, hvd.rank())[0]), embedding_batch(step, hvd.rank())[1]).backward()
        dist.synchronize()
        ref_opt.zero_grad(set_to_none=True)
        total = sum(mse(reference(t), y) for t, y in (embedding_batch(step, r) for r in range(hvd.size())))
        (total / hvd.size()).backward()

        grad = model.embedding.weight.grad
        expected = reference.embedding.weight.grad.coalesce()
        assert grad.is_sparse and grad.is_coalesced(), (
            f"rank {hvd.rank()}, step {step}: "
            f"layout {grad.layout}, coalesced {grad.is_sparse and grad.is_coalesced()}"
        )
        # The rows are those of every rank's tokens; the values their average.
        assert torch.equal(grad.indices(), expected.indices()), (
            f"rank {hvd.rank()}, step {step}: rows {grad.indices().tolist()}, "
            f"expected {expected.indices().tolist()}"
        )
        assert_close(grad.to_dense(), expected.to_dense(), f"{what}: gradient at step {step}")
        with dist.skip_synchronize():
            dist.step()
        ref_opt.step()
    compare_with_reference(model, reference, what)
