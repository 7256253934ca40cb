"""broadcast_parameters and broadcast_optimizer_state make differently started ranks identical.

Each rank builds its model and optimizer from a rank-dependent seed and
hyper-parameters and trains a rank-dependent number of local steps (none
for an optimizer that has not stepped yet). After the broadcasts every rank
must hold exactly what the root rank held, state entries that are None
included, and the gradients must be the root's (zeros where the root has
none; None for frozen parameters); every rank rebuilds the root's model and
optimizer locally (it knows the root's seed and steps) and compares value by
value.

Run with: mpirun -np N python3 -m pytest -x -q tests/python/test_torch_broadcast_state.py
"""

import pytest
import torch

import accord.torch as hvd

from torch_helpers import assert_close_f64

# accord.init() once per session, accord.shutdown() at its end (conftest.py).
pytestmark = pytest.mark.usefixtures("accord_initialized")


def assert_equal(got, expected, what):
    """Bitwise equality, failing with the rank, the first differing index and both values."""
    assert isinstance(got, torch.Tensor), f"rank {hvd.rank()}: {what}: got {type(got).__name__}"
    assert got.dtype == expected.dtype and got.shape == expected.shape, (
        f"rank {hvd.rank()}: {what}: got {got.dtype} {list(got.shape)}, "
        f"expected {expected.dtype} {list(expected.shape)}"
    )
    a = got.detach().reshape(-1)
    b = expected.detach().reshape(-1)
    if not torch.equal(a, b):
        i = int((a != b).nonzero()[0])
        raise AssertionError(
            f"rank {hvd.rank()}: {what}: index {i}: expected {b[i].item()!r}, got {a[i].item()!r}"
        )


def make_model(seed, frozen=False):
    """A small model; with ``frozen`` its first layer does not require gradients."""
    torch.manual_seed(seed)
    model = torch.nn.Sequential(
        torch.nn.Linear(4, 6), torch.nn.BatchNorm1d(6), torch.nn.ReLU(), torch.nn.Linear(6, 2)
    )
    if frozen:
        model[0].requires_grad_(False)
    return model.double()


def local_steps(model, opt, steps, seed):
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        opt.zero_grad()
        x = torch.randn(8, 4, generator=g, dtype=torch.float64)
        y = torch.randn(8, 2, generator=g, dtype=torch.float64)
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()


def model_after_forwards(r):
    """Rank r's model: seeded weights, running statistics from r + 1 seeded batches."""
    model = make_model(10 + r)
    model.train()
    for _ in range(r + 1):
        model(torch.randn(5, 4, dtype=torch.float64) * (r + 1))
    return model


@pytest.mark.parametrize("form", ["state_dict", "named_parameters", "parameters"])
@pytest.mark.parametrize("root", ["first", "last"])
def test_broadcast_parameters(form, root):
    root_rank = 0 if root == "first" else hvd.size() - 1
    model = model_after_forwards(hvd.rank())
    if form == "state_dict":
        hvd.broadcast_parameters(model.state_dict(), root_rank=root_rank)
    elif form == "named_parameters":
        hvd.broadcast_parameters(model.named_parameters(), root_rank=root_rank)
    else:
        hvd.broadcast_parameters(list(model.parameters()), root_rank=root_rank)

    # The state_dict form covers the buffers too (running statistics and the
    # 0-dimensional batch counter); the other forms only the parameters, so
    # the buffers stay this rank's own.
    mine = model.state_dict()
    root_model = model_after_forwards(root_rank)
    own_model = model_after_forwards(hvd.rank())
    parameter_names = dict(model.named_parameters())
    for name, tensor in mine.items():
        source = root_model if form == "state_dict" or name in parameter_names else own_model
        assert_equal(
            tensor, source.state_dict()[name], f"{form}: {name} after broadcast from rank {root_rank}"
        )


def test_broadcast_parameters_bad_input():
    with pytest.raises(ValueError, match="not a torch.Tensor"):
        hvd.broadcast_parameters({"w": [1.0, 2.0]}, root_rank=0)
    with pytest.raises(ValueError, match="state_dict"):
        hvd.broadcast_parameters(42, root_rank=0)


SGD = "sgd"  # momentum, nesterov on even ranks
SGD_PLAIN = "sgd_plain"  # no momentum: its state holds momentum_buffer None
ADAM = "adam"


def make_optimizer(kind, model, r):
    """Hyper-parameters that differ per rank."""
    if kind == SGD:
        return torch.optim.SGD(
            model.parameters(),
            lr=0.1 * (r + 1),
            momentum=0.5 + 0.1 * r,
            nesterov=(r % 2 == 0),
            weight_decay=0.0,
        )
    if kind == SGD_PLAIN:
        return torch.optim.SGD(model.parameters(), lr=0.1 * (r + 1), weight_decay=0.01 * r)
    return torch.optim.Adam(
        model.parameters(), lr=0.01 * (r + 1), betas=(0.9 - 0.01 * r, 0.999), amsgrad=(r % 2 == 1)
    )


def build_rank(kind, r, steps_of, wrap=False, frozen=False):
    """Rank r's model and optimizer before the broadcast, after its local steps.

    The gradients are those of the last local step's backward pass (None
    without steps), so they differ between ranks.
    """
    model = make_model(10 + r, frozen)
    opt = make_optimizer(kind, model, r)
    local_steps(model, opt, steps_of(r), seed=77 + r)
    if wrap:
        opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    return model, opt


STEP_PATTERNS = {
    # every rank has state, of different ages
    "all_have_state": lambda r: r + 1,
    # only the root has state: the others must create it
    "only_root_has_state": lambda r: 2 if r == 0 else 0,
    # the root has none: the others must drop theirs
    "root_has_none": lambda r: 0 if r == 0 else r,
    # no optimizer has stepped yet: no state, no gradients anywhere
    "none_stepped": lambda r: 0,
}


def check_gradients(params, root_params, what):
    """Frozen parameters keep no gradient; the others hold the root's (zeros if it has none)."""
    for i, (p, q) in enumerate(zip(params, root_params)):
        if not p.requires_grad:
            assert p.grad is None, f"rank {hvd.rank()}: {what}: frozen parameter {i} got a gradient"
            continue
        expected = q.grad if q.grad is not None else torch.zeros_like(q)
        assert_equal(p.grad, expected, f"{what}: gradient of parameter {i}")


@pytest.mark.parametrize("frozen", [False, True], ids=["trainable", "frozen_layer"])
@pytest.mark.parametrize("pattern", sorted(STEP_PATTERNS))
@pytest.mark.parametrize("kind", [SGD, SGD_PLAIN, ADAM])
def test_broadcast_optimizer_state(kind, pattern, frozen):
    steps_of = STEP_PATTERNS[pattern]
    wrap = kind == ADAM  # also covers a DistributedOptimizer (whose step must not be taken)
    model, opt = build_rank(kind, hvd.rank(), steps_of, wrap=wrap, frozen=frozen)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)

    root_model, root_opt = build_rank(kind, 0, steps_of, frozen=frozen)
    what = f"{kind}/{pattern}/{'frozen' if frozen else 'trainable'}"
    for group, root_group in zip(opt.param_groups, root_opt.param_groups):
        for key, value in root_group.items():
            if key == "params":
                continue
            assert group[key] == value and type(group[key]) is type(value), (
                f"rank {hvd.rank()}: {what}: option {key} is {group[key]!r}, expected {value!r}"
            )
    params = [p for g in opt.param_groups for p in g["params"]]
    root_params = [p for g in root_opt.param_groups for p in g["params"]]
    for i, (p, q) in enumerate(zip(params, root_params)):
        assert_equal(p, q, f"{what}: parameter {i}")
        mine, theirs = opt.state.get(p, {}), root_opt.state.get(q, {})
        assert sorted(mine) == sorted(theirs), (
            f"rank {hvd.rank()}: {what}: state keys of parameter {i} are {sorted(mine)}, "
            f"expected {sorted(theirs)}"
        )
        for key, value in theirs.items():
            if isinstance(value, torch.Tensor):
                assert_equal(mine[key], value, f"{what}: state[{i}][{key!r}]")
            else:
                assert mine[key] == value, f"rank {hvd.rank()}: {what}: state[{i}][{key!r}]"
    check_gradients(params, root_params, what)

    # Both continue identically: the state is complete, not just equal where
    # compared. (A DistributedOptimizer averages equal gradients across the
    # ranks, which may round the last bit; Adam scales the rounding noise of
    # the first layer's bias, whose true gradient is zero before BatchNorm,
    # up to lr * g / eps.)
    local_steps(model, opt, 2, seed=999)
    local_steps(root_model, root_opt, 2, seed=999)
    for (name, p), q in zip(model.named_parameters(), root_model.parameters()):
        if wrap:
            if not torch.allclose(p, q, rtol=1e-12, atol=1e-9):
                i = int((p - q).abs().argmax())
                raise AssertionError(
                    f"rank {hvd.rank()}: {what}: {name} after two more steps: index {i}: "
                    f"expected {q.reshape(-1)[i].item()!r}, got {p.reshape(-1)[i].item()!r}"
                )
        else:
            assert_equal(p, q, f"{what}: {name} after two more steps")


def test_broadcast_optimizer_state_mismatched_parameters_raise():
    if hvd.size() == 1:
        pytest.skip("needs two ranks whose models differ")
    width = 3 if hvd.rank() == 0 else 2
    model = torch.nn.Linear(4, width)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    others = ", ".join(str(r) for r in range(1, hvd.size()))
    others = f"rank {others}" if hvd.size() == 2 else f"ranks {others}"
    with pytest.raises(ValueError) as raised:
        hvd.broadcast_optimizer_state(opt, root_rank=0)
    assert (
        "the ranks' tensors differ: 'param_groups[0][0]' is float32 [3, 4] on rank 0 and "
        f"float32 [2, 4] on {others}"
    ) in str(raised.value), f"rank {hvd.rank()}: {raised.value}"


def plain_sgd_state_after_a_step():
    """What this torch's SGD without momentum keeps for a parameter it stepped."""
    p = torch.nn.Parameter(torch.ones(2, dtype=torch.float64))
    opt = torch.optim.SGD([p], lr=0.1)
    p.sum().backward()
    opt.step()
    return dict(opt.state[p])


def test_momentum_buffers_that_are_none_travel_as_none():
    """SGD without momentum keeps ``momentum_buffer: None`` for each stepped parameter (torch 1.13; 2.x
    keeps nothing): after the broadcast every rank holds exactly what the root's torch keeps."""
    expected = plain_sgd_state_after_a_step()
    assert expected in ({"momentum_buffer": None}, {}), f"torch {torch.__version__} keeps {expected}"
    steps_of = STEP_PATTERNS["only_root_has_state"]
    model, opt = build_rank(SGD_PLAIN, hvd.rank(), steps_of, frozen=True)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    trainable = [p for p in model.parameters() if p.requires_grad]
    assert trainable and all(dict(opt.state.get(p, {})) == expected for p in trainable), (
        f"rank {hvd.rank()}: states {[dict(opt.state.get(p, {})) for p in trainable]}, expected {expected}"
    )
    assert all(not opt.state.get(p) for p in model[0].parameters()), (
        f"rank {hvd.rank()}: a frozen parameter got optimizer state"
    )


class IndexedModel(torch.nn.Module):
    """A frozen integer parameter (indices) next to a trainable one."""

    def __init__(self, indices, values):
        super().__init__()
        self.indices = torch.nn.Parameter(indices.int(), requires_grad=False)
        self.values = torch.nn.Parameter(values)

    def forward(self, x):
        return torch.index_select(self.values, 0, self.indices.long()) * x


def test_fresh_optimizer_with_a_frozen_parameter_leaves_equal_gradients():
    """An unstepped nesterov SGD in a DistributedOptimizer, as Horovod users write it."""
    torch.manual_seed(1000 + hvd.rank())
    model = IndexedModel(torch.tensor([1, 3]), torch.rand(4, dtype=torch.float64))
    opt = torch.optim.SGD(model.parameters(), lr=0.001, weight_decay=1e-6, momentum=0.9, nesterov=True)
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)

    frozen, trainable = opt.param_groups[0]["params"]
    assert frozen.grad is None, f"rank {hvd.rank()}: the frozen parameter got a gradient"
    assert trainable.grad is not None, f"rank {hvd.rank()}: the trainable parameter has no gradient"
    assert_equal(
        trainable.grad,
        hvd.broadcast(trainable.grad, root_rank=0, name="fresh.grad"),
        "the trainable parameter's gradient against the root's",
    )
    assert_equal(trainable.grad, torch.zeros(4, dtype=torch.float64), "a fresh gradient")
    assert not opt.state, f"rank {hvd.rank()}: an unstepped optimizer got state {opt.state}"

    # Training goes on identically on every rank.
    x = torch.full([2], float(hvd.rank() + 1), dtype=torch.float64)
    opt.zero_grad()
    model(x).sum().backward()
    opt.step()
    assert_close_f64(
        model.values,
        hvd.broadcast(model.values.detach(), root_rank=0, name="fresh.p"),
        "the trainable parameter after a step",
        rtol=1e-12,
        atol=1e-15,
    )


def test_sparse_gradient_of_the_root_arrives_sparse():
    """An embedding's sparse gradient travels by value and stays sparse."""
    torch.manual_seed(2000 + hvd.rank())
    emb = torch.nn.Embedding(10, 3, sparse=True).double()
    opt = torch.optim.SGD(emb.parameters(), lr=0.1)
    if hvd.rank() == 0:
        emb(torch.tensor([1, 4, 4])).sum().backward()
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    grad = emb.weight.grad
    assert grad is not None and grad.is_sparse, f"rank {hvd.rank()}: gradient {grad!r}"
    expected = torch.zeros(10, 3, dtype=torch.float64)
    expected[1] = 1.0
    expected[4] = 2.0
    assert_equal(grad.to_dense(), expected, "the root's sparse gradient")


def test_gradients_of_another_shape_dtype_or_freezing_than_the_roots():
    """Each rank's gradients differ from the root's in a different way: the root's arrive where
    this rank's parameter trains, and a parameter frozen on this rank keeps its own gradient
    (the LibTorch adapter's torch_broadcast_state_test checks the same cases; torch refuses a
    gradient of another dtype or shape than its parameter's, which LibTorch allows)."""
    me = hvd.rank()
    params = [torch.nn.Parameter(torch.zeros(3, dtype=torch.float64)) for _ in range(4)]
    # 0: the root's gradient; on the other ranks one of their own, or none on rank 1.
    params[0].grad = None if me == 1 else torch.full((3,), 1.0 + me, dtype=torch.float64)
    # 1: frozen on every rank but the root, each holding a gradient of its own.
    params[1].grad = torch.full((3,), 10.0 + me, dtype=torch.float64)
    if me != 0:
        params[1].requires_grad_(False)
    # 2: frozen on the root only (with a gradient there); trainable elsewhere, with one.
    params[2].grad = torch.full((3,), 20.0 + me, dtype=torch.float64)
    if me == 0:
        params[2].requires_grad_(False)
    # 3: frozen everywhere, holding a gradient.
    params[3].requires_grad_(False)
    params[3].grad = torch.full((3,), 30.0 + me, dtype=torch.float64)
    opt = torch.optim.SGD(params, lr=0.1)
    hvd.broadcast_optimizer_state(opt, root_rank=0)

    assert_equal(params[0].grad, torch.full((3,), 1.0, dtype=torch.float64), "the root's gradient")
    assert_equal(
        params[1].grad,
        torch.full((3,), 10.0 + me, dtype=torch.float64),
        "a parameter frozen here keeps its gradient",
    )
    assert_equal(
        params[2].grad,
        torch.full((3,), 20.0 + me, dtype=torch.float64),
        "a parameter frozen on the root is left alone everywhere",
    )
    assert_equal(
        params[3].grad,
        torch.full((3,), 30.0 + me, dtype=torch.float64),
        "a parameter frozen everywhere keeps its gradient",
    )
