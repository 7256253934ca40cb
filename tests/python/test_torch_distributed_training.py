"""torch.distributed training over the accord backend against single-process training.

``dist.init_process_group("accord")`` once for the session (under mpirun, no
MASTER_ADDR), then DistributedDataParallel (plain, find_unused_parameters,
no_sync, static_graph, several buckets, the fp16 and PowerSGD communication
hooks), ZeroRedundancyOptimizer, FSDP2 (``fully_shard``) on the CPU and a 1-D
DeviceMesh with DTensor and functional collectives. Every rank trains on its
own seeded batch; every rank also trains a plain model locally on the batches
of all ranks (whose seeds it knows) with the equivalent loss, and the
parameters must agree, and be equal on every rank.

Needs torch 2.1 or newer (Python backends); on an older torch every test skips.

Run with: mpirun -np N python3 -m pytest -x -q tests/python/test_torch_distributed_training.py
"""

import pytest
import torch
import torch.distributed as dist

import accord.torch  # registers the "accord" backend
from accord.torch.process_group import MIN_TORCH, backend_supported

from torch_helpers import assert_close_f64


def _unsupported():
    """Why this torch cannot run the suite, or None."""
    if not dist.is_available():
        return f"torch {torch.__version__} was built without torch.distributed"
    if not backend_supported():
        return (
            f"the accord torch.distributed backend needs torch {MIN_TORCH[0]}.{MIN_TORCH[1]} or newer "
            f"(Python process groups); this is torch {torch.__version__}"
        )
    return None


# Every test is skipped (not the module: pytest would exit with 5, "no tests
# collected") on a torch without Python process groups; the skip comes
# before any fixture runs.
pytestmark = pytest.mark.skipif(_unsupported() is not None, reason=str(_unsupported()))

IN, HIDDEN, OUT = 4, 8, 3
BATCH = 6  # rows per rank per step (even: gradient accumulation splits it in two)
STEPS = 3


@pytest.fixture(scope="module", autouse=True)
def process_group(accord_initialized):
    """``init_process_group("accord")`` once; destroyed before accord shuts down."""
    dist.init_process_group("accord")
    assert dist.get_backend() == "accord"
    yield dist.group.WORLD
    dist.barrier()
    dist.destroy_process_group()


# ------------------------------------------------------------------ helpers


class Net(torch.nn.Module):
    """Linear+ReLU+Linear, plus a branch that only some steps (or ranks) use."""

    def __init__(self, extra=False):
        super().__init__()
        self.fc1 = torch.nn.Linear(IN, HIDDEN)
        self.fc2 = torch.nn.Linear(HIDDEN, OUT)
        self.extra = torch.nn.Linear(IN, OUT) if extra else None

    def forward(self, x, use_extra=False):
        out = self.fc2(torch.relu(self.fc1(x)))
        if use_extra:
            out = out + self.extra(x)
        return out


def make_model(extra=False, seed=1234):
    """The same float64 model on every rank; ``extra``: with the optional branch."""
    torch.manual_seed(seed)
    return Net(extra).double()


def batch(step, r, dtype=torch.float64):
    """The seeded batch of rank r at a step."""
    g = torch.Generator().manual_seed(1000 * step + r)
    x = torch.randn(BATCH, IN, generator=g, dtype=torch.float64)
    y = torch.randn(BATCH, OUT, generator=g, dtype=torch.float64)
    return x.to(dtype), y.to(dtype)


def local_loss(model, x, y, use_extra=False):
    return torch.nn.functional.mse_loss(model(x, use_extra), y)


def make_optimizer(kind, params):
    if kind == "sgd":
        return torch.optim.SGD(params, lr=0.1, momentum=0.9)
    if kind == "adam":
        return torch.optim.Adam(params, lr=0.01)
    raise AssertionError(kind)


def never(step, r):
    return False


def train_reference(kind="sgd", steps=STEPS, uses_extra=None, dtype=torch.float64):
    """Single-process training on every rank's batch; DDP averages the gradients of the ranks."""
    model = make_model(extra=uses_extra is not None).to(dtype)
    uses_extra = uses_extra or never
    opt = make_optimizer(kind, model.parameters())
    size = dist.get_world_size()
    for step in range(steps):
        opt.zero_grad()
        total = sum(local_loss(model, *batch(step, r, dtype), uses_extra(step, r)) for r in range(size))
        (total / size).backward()
        opt.step()
    return model, opt


def train_ddp(ddp, opt, steps=STEPS, uses_extra=never, passes=1):
    """Each rank on its own batch; ``passes`` > 1 accumulates micro-batches under no_sync."""
    rank = dist.get_rank()
    for step in range(steps):
        opt.zero_grad()
        x, y = batch(step, rank)
        parts = list(zip(x.chunk(passes), y.chunk(passes)))
        for i, (part_x, part_y) in enumerate(parts):
            loss = local_loss(ddp, part_x, part_y, uses_extra(step, rank)) / passes
            if i < len(parts) - 1:
                with ddp.no_sync():
                    loss.backward()
            else:
                loss.backward()
        opt.step()


def assert_same_on_every_rank(tensors, what):
    """Every tensor equals rank 0's bit for bit (checked with the accord group's broadcast)."""
    for name, t in tensors:
        root = t.detach().clone()
        dist.broadcast(root, src=0)
        if not torch.equal(root, t.detach()):
            diff = (root - t.detach()).abs().reshape(-1)
            i = int(diff.argmax())
            raise AssertionError(
                f"rank {dist.get_rank()}: {what}: {name} differs from rank 0's at index {i}: "
                f"rank 0 has {root.reshape(-1)[i].item()!r}, this rank {t.reshape(-1)[i].item()!r}"
            )


def compare_with_reference(params, reference, what, rtol=1e-10, atol=1e-12):
    """``params``: (name, tensor) pairs in the reference model's parameter order."""
    params = list(params)
    ref = list(reference.named_parameters())
    assert [n for n, _ in params] == [n for n, _ in ref], f"{what}: parameter names differ"
    for (name, p), (_, q) in zip(params, ref):
        assert_close_f64(p.detach(), q.detach(), f"{what}: {name}", rtol, atol)
    assert_same_on_every_rank(params, what)


def ddp_params(wrapped):
    """A DDP model's (name, parameter) pairs, named as in the wrapped model."""
    return [(n.removeprefix("module."), p) for n, p in wrapped.named_parameters()]


def ddp(model, **kwargs):
    return torch.nn.parallel.DistributedDataParallel(model, **kwargs)


# --------------------------------------------------------------------- DDP


def test_the_default_group_is_accord():
    group = dist.group.WORLD
    assert dist.get_backend(group) == "accord"
    assert dist.get_world_size() == accord.torch.size() and dist.get_rank() == accord.torch.rank()
    from accord.torch.process_group import AccordProcessGroup

    # torch uses a Python ProcessGroup subclass as the group itself (no per-device backend).
    assert isinstance(group, AccordProcessGroup), type(group)
    # The group keeps its name (DeviceMesh and functional collectives look groups up by it).
    name = group.group_name
    assert name, f"group name {name!r}"
    from torch.distributed.distributed_c10d import _resolve_process_group

    assert _resolve_process_group(name) is group


@pytest.mark.parametrize("kind", ["sgd", "adam"])
def test_ddp_matches_single_process_training(kind):
    model = ddp(make_model())
    opt = make_optimizer(kind, model.parameters())
    train_ddp(model, opt)
    reference, _ = train_reference(kind)
    compare_with_reference(ddp_params(model), reference, f"DDP/{kind}")


def test_ddp_find_unused_parameters():
    # The branch is used by some ranks on steps 0, 1 and 3 and by none on step 2.
    def uses_extra(step, r):
        return step != 2 and (step + r) % 2 == 0

    model = ddp(make_model(extra=True), find_unused_parameters=True)
    opt = make_optimizer("sgd", model.parameters())
    train_ddp(model, opt, steps=4, uses_extra=uses_extra)
    reference, _ = train_reference("sgd", steps=4, uses_extra=uses_extra)
    compare_with_reference(ddp_params(model), reference, "DDP find_unused_parameters")


def test_ddp_no_sync_gradient_accumulation():
    model = ddp(make_model())
    opt = make_optimizer("sgd", model.parameters())
    train_ddp(model, opt, passes=2)
    reference, _ = train_reference("sgd")
    compare_with_reference(ddp_params(model), reference, "DDP no_sync")


def test_ddp_static_graph():
    model = ddp(make_model(), static_graph=True)
    opt = make_optimizer("sgd", model.parameters())
    train_ddp(model, opt, steps=4)
    reference, _ = train_reference("sgd", steps=4)
    compare_with_reference(ddp_params(model), reference, "DDP static_graph")


def test_ddp_several_buckets():
    # 100 bytes per bucket. DDP starts with one bucket and rebuilds them after
    # the first step; a bucket is closed once it exceeds the cap, so each
    # layer's weight and bias share one: two buckets from the second step on.
    model = ddp(make_model(), bucket_cap_mb=100 / (1024 * 1024))
    opt = make_optimizer("sgd", model.parameters())
    train_ddp(model, opt)
    reference, _ = train_reference("sgd")
    compare_with_reference(ddp_params(model), reference, "DDP small buckets")
    logged = model._get_ddp_logging_data()
    rebuilt = str(logged.get("rebuilt_bucket_sizes", ""))
    assert len(rebuilt.split(",")) >= 2 and logged.get("num_buckets_reduced", 0) >= 2, (
        f"expected several buckets: rebuilt bucket sizes {rebuilt!r}, "
        f"{logged.get('num_buckets_reduced')} buckets reduced in the last step"
    )


def test_ddp_fp16_compress_hook():
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    model = ddp(make_model())
    model.register_comm_hook(dist.group.WORLD, default_hooks.fp16_compress_hook)
    opt = make_optimizer("sgd", model.parameters())
    train_ddp(model, opt)
    reference, _ = train_reference("sgd")
    # Gradients travel as float16 (11 significant bits).
    compare_with_reference(ddp_params(model), reference, "DDP fp16_compress_hook", rtol=2e-3, atol=2e-3)


def test_ddp_powersgd_during_warm_up_is_plain_allreduce():
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

    state = powerSGD_hook.PowerSGDState(
        process_group=None, matrix_approximation_rank=1, start_powerSGD_iter=100
    )
    model = ddp(make_model())
    model.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
    opt = make_optimizer("sgd", model.parameters())
    train_ddp(model, opt)
    # During warm-up PowerSGD runs default_hooks' allreduce (divide by the
    # world size, then allreduce SUM): bit for bit what DDP with that hook
    # computes. (DDP without a hook multiplies by 1/world size instead, which
    # rounds differently when the world size is not a power of two.)
    plain = ddp(make_model())
    plain.register_comm_hook(dist.group.WORLD, default_hooks.allreduce_hook)
    plain_opt = make_optimizer("sgd", plain.parameters())
    train_ddp(plain, plain_opt)
    for (name, p), (_, q) in zip(model.named_parameters(), plain.named_parameters()):
        assert torch.equal(p, q), (
            f"rank {dist.get_rank()}: PowerSGD in warm-up differs from allreduce at {name}"
        )
    reference, _ = train_reference("sgd")
    compare_with_reference(ddp_params(model), reference, "DDP PowerSGD warm-up")


def test_ddp_powersgd_low_rank_keeps_ranks_identical():
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook

    state = powerSGD_hook.PowerSGDState(
        process_group=None, matrix_approximation_rank=1, start_powerSGD_iter=2, min_compression_rate=1
    )
    model = ddp(make_model())
    model.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
    opt = make_optimizer("sgd", model.parameters())
    train_ddp(model, opt, steps=5)
    _, before, after = state.compression_stats()
    assert 0 < after < before, f"PowerSGD did not compress: {before} elements before, {after} after"
    assert_same_on_every_rank(ddp_params(model), "DDP PowerSGD rank 1")


# -------------------------------------------------------------------- ZeRO


@pytest.mark.parametrize("kind", ["sgd", "adam"])
def test_zero_redundancy_optimizer(kind):
    from torch.distributed.optim import ZeroRedundancyOptimizer

    model = ddp(make_model())
    optimizer_class = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam}[kind]
    defaults = {"sgd": {"lr": 0.1, "momentum": 0.9}, "adam": {"lr": 0.01}}[kind]
    opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=optimizer_class, **defaults)
    train_ddp(model, opt)
    reference, ref_opt = train_reference(kind)
    compare_with_reference(ddp_params(model), reference, f"ZeRO/{kind}")

    opt.consolidate_state_dict(to=0)
    if dist.get_rank() != 0:
        return
    state = opt.state_dict()
    expected = ref_opt.state_dict()
    assert sorted(state["state"]) == sorted(expected["state"]), (
        f"ZeRO/{kind}: state of parameters {sorted(state['state'])}, expected {sorted(expected['state'])}"
    )
    for index, entries in expected["state"].items():
        assert sorted(state["state"][index]) == sorted(entries), (
            f"ZeRO/{kind}: parameter {index}'s state keys"
        )
        for key, value in entries.items():
            got = state["state"][index][key]
            if isinstance(value, torch.Tensor):
                assert_close_f64(
                    got.double(),
                    value.double(),
                    f"ZeRO/{kind}: consolidated state {index}.{key}",
                    1e-10,
                    1e-12,
                )
            else:
                assert got == value, (
                    f"ZeRO/{kind}: consolidated state {index}.{key}: {got!r}, expected {value!r}"
                )


# -------------------------------------------------------------------- FSDP


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_fsdp2_fully_shard_matches_single_process_training(dtype):
    """float64 gradients are reduce-scattered with SUM and divided (FSDP2 fears
    overflow); float32 ones with AVG."""
    try:
        from torch.distributed.fsdp import fully_shard
    except ImportError:
        pytest.skip(f"torch {torch.__version__} has no torch.distributed.fsdp.fully_shard (FSDP2)")
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    model = make_model().to(dtype)
    fully_shard(model.fc1, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = make_optimizer("sgd", model.parameters())
    rank = dist.get_rank()
    for step in range(STEPS):
        opt.zero_grad()
        local_loss(model, *batch(step, rank, dtype)).backward()
        opt.step()
    reference, _ = train_reference("sgd", dtype=dtype)
    full = [(n, p.full_tensor()) for n, p in model.named_parameters()]
    tol = {torch.float64: (1e-10, 1e-12), torch.float32: (1e-5, 1e-6)}[dtype]
    compare_with_reference(full, reference, f"FSDP2/{dtype}", *tol)


# ------------------------------------------------------- DeviceMesh, DTensor


def test_device_mesh_functional_collectives_and_dtensor():
    import torch.distributed._functional_collectives as funcol
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    size, rank = dist.get_world_size(), dist.get_rank()
    mesh = init_device_mesh("cpu", (size,))
    assert dist.get_backend(mesh.get_group()) == "accord"

    def values(r):
        return torch.arange(6, dtype=torch.float64) * (r + 1)

    total = sum(values(r) for r in range(size))
    got = funcol.all_reduce(values(rank), "sum", mesh).wait()
    assert torch.equal(got, total), f"rank {rank}: functional all_reduce {got}, expected {total}"
    all_gather = getattr(funcol, "all_gather_single", None) or funcol.all_gather_tensor
    reduce_scatter = getattr(funcol, "reduce_scatter_single", None) or funcol.reduce_scatter_tensor
    gathered = all_gather(values(rank), 0, mesh).wait()
    assert torch.equal(gathered, torch.cat([values(r) for r in range(size)])), (
        f"rank {rank}: all_gather {gathered}"
    )
    scattered = reduce_scatter(torch.cat([values(rank)] * size), "sum", 0, mesh).wait()
    assert torch.equal(scattered, total), f"rank {rank}: reduce_scatter {scattered}"

    full = torch.arange(4 * size * 3, dtype=torch.float64).reshape(4 * size, 3)
    weight = torch.linspace(-1, 1, 6, dtype=torch.float64).reshape(3, 2)
    sharded = distribute_tensor(full, mesh, [Shard(0)])
    replicated_weight = distribute_tensor(weight, mesh, [Replicate()])
    assert sharded.to_local().shape == (4, 3)
    assert torch.equal(sharded.full_tensor(), full), f"rank {rank}: DTensor full_tensor"
    # A reduction over the sharded dimension is Partial, then all-reduced.
    column_sums = sharded.sum(dim=0).full_tensor()
    assert torch.equal(column_sums, full.sum(dim=0)), f"rank {rank}: DTensor sum {column_sums}"
    product = (sharded @ replicated_weight).redistribute(mesh, [Replicate()]).to_local()
    assert_close_f64(product, full @ weight, "DTensor matmul", 1e-12, 1e-12)
