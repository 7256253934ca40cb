"""accord.torch on CUDA tensors, on a machine with a GPU (skipped without one).

Run under mpirun with 1 rank (NCCL) and with 2 and 3 ranks sharing the one
GPU (NCCL refuses two ranks of one communicator on one GPU, so
ACCORD_GPU_OPERATIONS=auto goes through MPI and host memory there), e.g.

    mpirun -np 2 python3 -m pytest -x -q tests/gpu/test_torch_cuda.py

Every rank builds every rank's input from a seed (torch_helpers), so each
can compute the expected result on the CPU and compare element by element.
With ACCORD_GPU_OPERATIONS=nccl on more than one rank, only the test of the
duplicate-GPU error runs (test_nccl_refuses_ranks_that_share_a_gpu).
"""

import os

import numpy as np
import pytest
import torch

if not torch.cuda.is_available():
    pytest.skip("no CUDA device is visible to torch: skipping the GPU tests", allow_module_level=True)

import accord  # noqa: E402
import accord.torch as hvd  # noqa: E402

import half_rounding  # noqa: E402
from torch_helpers import (  # noqa: E402
    ALL_DTYPES,
    ALL_OPS,
    FLOAT_DTYPES,
    Checker,
    dtype_name,
    rank_values,
    reference_reduce,
    tolerance,
)

pytestmark = pytest.mark.usefixtures("accord_initialized")

NCCL_FORCED = os.environ.get("ACCORD_GPU_OPERATIONS", "").lower() == "nccl"
only_usable = pytest.mark.skipif(
    NCCL_FORCED and int(os.environ.get("OMPI_COMM_WORLD_SIZE", "1")) > 1,
    reason="NCCL forced on ranks that share a GPU: only the refusal is tested",
)


@pytest.fixture(autouse=True)
def gpu(accord_initialized):
    torch.cuda.set_device(hvd.local_rank() % torch.cuda.device_count())
    return torch.device("cuda", torch.cuda.current_device())


def kind_for(op):
    return "product" if op == hvd.Product else "small"


@only_usable
@pytest.mark.parametrize("kind", half_rounding.KINDS)
def test_half_averages_round_as_horovods_gpu_path(rank, size, gpu, kind):
    """float16/bfloat16 Averages on the GPU, bit for bit (NCCL's ncclAvg on 1 rank, MPI through host
    memory on 2 and 3): the sums rounded pairwise, and for float16 the scale factors rounded to
    float16 before they multiply (device/copy_plan.h DeviceScale32); bfloat16 keeps float factors."""
    every = [half_rounding.rank_bits(31, r, 6000, kind) for r in range(size)]
    dtype = torch.float16 if kind == "float16" else torch.bfloat16
    mine = torch.from_numpy(every[rank].view(np.int16).copy()).view(dtype).to(gpu)
    prescale, postscale = 0.3, 1.0
    got = hvd.allreduce(
        mine, op=hvd.Average, name=f"gpu.half.{kind}", prescale_factor=prescale, postscale_factor=postscale
    )
    got_bits = got.cpu().view(torch.int16).numpy().view(np.uint16)

    def rounded(factor):
        return float(np.float16(np.float32(factor))) if kind == "float16" else factor

    ready = [half_rounding.scaled(x, kind, rounded(prescale)) for x in every]
    candidates = [
        half_rounding.scaled(s, kind, rounded(postscale / size)) for s in half_rounding.sums(ready, kind)
    ]
    bad = half_rounding.mismatches(got_bits, candidates)
    assert bad.size == 0, (
        f"rank {rank}: {kind}: {bad.size} of {got_bits.size} elements differ, the first at "
        f"{int(bad[0])}: got {int(got_bits[bad[0]]):#06x}, expected one of "
        f"{sorted({int(c[bad[0]]) for c in candidates})}"
    )


@only_usable
def test_build_reports_cuda_and_nccl(rank, size):
    assert hvd.cuda_built(), "accord.torch says CUDA was not built, on a GPU machine"
    assert hvd.nccl_built(), "accord.torch says NCCL was not built, on a GPU machine"
    info = accord.build_info()
    assert info["cuda"] and info["nccl"], info


@only_usable
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=dtype_name)
def test_allreduce_every_op(rank, size, gpu, dtype):
    check = Checker()
    for op in ALL_OPS:
        if dtype == torch.bool and op == hvd.Average:
            continue
        key = f"gpu.allreduce.{dtype_name(dtype)}.{op}"
        inputs = [rank_values(key, r, (3, 67), dtype, kind_for(op)) for r in range(size)]
        got = hvd.allreduce(inputs[rank].to(gpu), op=op, name=key)
        check.true(got.is_cuda, f"{key}: the result is on {got.device}")
        check.values(
            key, got.cpu(), reference_reduce(inputs, op), tolerance(dtype) if op == hvd.Average else 0.0
        )
        # In place, with scale factors (not for bool or products).
        if dtype != torch.bool and op != hvd.Product:
            tensor = inputs[rank].to(gpu)
            hvd.allreduce_(tensor, op=op, name=key + "_", prescale_factor=0.5, postscale_factor=4.0)
            check.values(
                key + " in place, scaled",
                tensor.cpu(),
                reference_reduce(inputs, op, prescale=0.5, postscale=4.0),
                tolerance(dtype),
            )
    check.check()


@only_usable
def test_many_tensors_fuse_and_come_back_right(rank, size, gpu):
    check = Checker()
    handles = []
    for i in range(200):
        dtype = FLOAT_DTYPES[i % len(FLOAT_DTYPES)]
        key = f"gpu.fused.{i}"
        inputs = [rank_values(key, r, (i % 13 + 1, 31), dtype) for r in range(size)]
        handles.append((key, inputs, hvd.allreduce_async(inputs[rank].to(gpu), op=hvd.Average, name=key)))
    for key, inputs, handle in handles:
        check.values(
            key,
            hvd.synchronize(handle).cpu(),
            reference_reduce(inputs, hvd.Average),
            tolerance(inputs[0].dtype),
        )
    check.check()


@only_usable
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=dtype_name)
def test_allgather_broadcast_alltoall_reducescatter(rank, size, gpu, dtype):
    check = Checker()
    key = f"gpu.allgather.{dtype_name(dtype)}"
    inputs = [rank_values(key, r, (r + 1, 5), dtype) for r in range(size)]
    got = hvd.allgather(inputs[rank].to(gpu), name=key)
    check.true(got.is_cuda, f"{key}: the result is on {got.device}")
    check.values(key, got.cpu(), torch.cat(inputs))

    key = f"gpu.broadcast.{dtype_name(dtype)}"
    inputs = [rank_values(key, r, (17,), dtype) for r in range(size)]
    check.values(
        key, hvd.broadcast(inputs[rank].to(gpu), root_rank=size - 1, name=key).cpu(), inputs[size - 1]
    )
    tensor = inputs[rank].to(gpu)
    hvd.broadcast_(tensor, root_rank=0, name=key + "_")
    check.values(key + " in place", tensor.cpu(), inputs[0])

    key = f"gpu.alltoall.{dtype_name(dtype)}"
    splits = [[(q + j) % 3 + 1 for j in range(size)] for q in range(size)]
    inputs = [rank_values(key, q, (sum(splits[q]), 4), dtype) for q in range(size)]
    output, received = hvd.alltoall(inputs[rank].to(gpu), splits=torch.tensor(splits[rank]), name=key)
    expected = torch.cat([inputs[q][sum(splits[q][:rank]) : sum(splits[q][: rank + 1])] for q in range(size)])
    check.values(key, output.cpu(), expected)
    check.true(
        received.tolist() == [splits[q][rank] for q in range(size)], f"{key}: received {received.tolist()}"
    )

    if dtype != torch.bool:
        key = f"gpu.reducescatter.{dtype_name(dtype)}"
        rows = 2 * size + 1
        inputs = [rank_values(key, r, (rows, 3), dtype) for r in range(size)]
        got = hvd.reducescatter(inputs[rank].to(gpu), op=hvd.Sum, name=key)
        first = rank * (rows // size) + min(rank, rows % size)
        mine = rows // size + (1 if rank < rows % size else 0)
        check.values(key, got.cpu(), reference_reduce(inputs, hvd.Sum)[first : first + mine])
    check.check()


@only_usable
def test_grouped_forms(rank, size, gpu):
    check = Checker()
    key = "gpu.grouped"
    shapes = [(3,), (2, 7), (1000,)]
    inputs = [
        [rank_values(f"{key}.{i}", r, s, torch.float32) for r in range(size)] for i, s in enumerate(shapes)
    ]
    got = hvd.grouped_allreduce([x[rank].to(gpu) for x in inputs], op=hvd.Sum, name=key)
    for i, g in enumerate(got):
        check.values(f"{key} allreduce {i}", g.cpu(), reference_reduce(inputs[i], hvd.Sum))
    gathered = hvd.grouped_allgather([x[rank].to(gpu) for x in inputs], name=key + ".gather")
    for i, g in enumerate(gathered):
        check.values(f"{key} allgather {i}", g.cpu(), torch.cat(inputs[i]))
    check.check()


@only_usable
def test_a_tensor_written_on_a_side_stream_after_a_long_kernel(rank, size, gpu):
    """The core reads the tensor only after the work queued on the producer's stream."""
    side = torch.cuda.Stream()
    tensor = torch.zeros(1 << 20, device=gpu)
    with torch.cuda.stream(side):
        torch.cuda._sleep(200_000_000)  # ~0.1 s of GPU time before the write
        tensor.fill_(rank + 1.0)
        handle = hvd.allreduce_async_(tensor, op=hvd.Sum, name="gpu.side_stream")
    result = hvd.synchronize(handle)
    expected = size * (size + 1) / 2
    assert torch.all(result == expected).item(), (
        f"rank {rank}: got {result[:4].tolist()}..., expected {expected}: the collective read the tensor "
        f"before its producer wrote it"
    )


@only_usable
def test_synchronize_without_blocking_the_host(rank, size, gpu):
    tensor = torch.full((4096,), float(rank + 1), device=gpu)
    handle = hvd.allreduce_async_(tensor, op=hvd.Sum, name="gpu.nonblocking")
    hvd.synchronize(handle, blocking=False)
    doubled = tensor * 2  # queued on the current stream, after the allreduce
    expected = 2 * size * (size + 1) / 2
    assert torch.all(doubled == expected).item(), f"rank {rank}: {doubled[:4].tolist()}, expected {expected}"


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(16, 32)
        self.bn = torch.nn.BatchNorm1d(32)
        self.fc2 = torch.nn.Linear(32, 4)

    def forward(self, x):
        return self.fc2(torch.relu(self.bn(self.fc1(x))))


def train(device, steps, rank):
    torch.manual_seed(7)
    model = Net().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters(), op=hvd.Average)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    generator = torch.Generator().manual_seed(100 + rank)
    for _ in range(steps):
        x = torch.randn(8, 16, generator=generator).to(device)
        y = torch.randn(8, 4, generator=generator).to(device)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    return {k: v.detach().cpu() for k, v in model.state_dict().items()}


@only_usable
def test_cuda_training_equals_cpu_training(rank, size, gpu):
    on_gpu = train(gpu, 5, rank)
    on_cpu = train(torch.device("cpu"), 5, rank)
    for name, value in on_cpu.items():
        assert torch.allclose(on_gpu[name].double(), value.double(), rtol=1e-4, atol=1e-5), (
            f"rank {rank}: parameter {name} after CUDA training differs from CPU training by "
            f"{(on_gpu[name].double() - value.double()).abs().max().item()}"
        )


@only_usable
def test_sync_batch_norm_on_cuda(rank, size, gpu):
    inputs = [rank_values("gpu.syncbn", r, (4, 6), torch.float32) for r in range(size)]
    layer = hvd.SyncBatchNorm(6).to(gpu)
    out = layer(inputs[rank].to(gpu).requires_grad_())
    reference = torch.nn.BatchNorm1d(6)
    expected = reference(torch.cat(inputs))[rank * 4 : (rank + 1) * 4]
    assert torch.allclose(out.detach().cpu(), expected.detach(), rtol=1e-4, atol=1e-5), (
        f"rank {rank}: SyncBatchNorm on CUDA differs from BatchNorm on the concatenated batch"
    )


def test_nccl_refuses_ranks_that_share_a_gpu(rank, size, gpu):
    """With ACCORD_GPU_OPERATIONS=nccl and ranks on one GPU: a clear error on every rank, no hang."""
    if not NCCL_FORCED or size < 2:
        pytest.skip("runs with ACCORD_GPU_OPERATIONS=nccl on 2 or more ranks")
    with pytest.raises(hvd.HorovodInternalError, match="both use the GPU") as error:
        hvd.allreduce(torch.ones(4, device=gpu), name="gpu.duplicate")
    assert "NCCL cannot run two ranks of one communicator on one GPU" in str(error.value)
    # The job goes on: CPU collectives still work.
    assert hvd.allreduce(torch.ones(2), op=hvd.Sum, name="gpu.after_refusal").tolist() == [size, size]


@only_usable
def test_cupy_through_the_neutral_api(rank, size, gpu):
    cupy = pytest.importorskip("cupy")
    with cupy.cuda.Device(gpu.index):
        array = cupy.full((5, 3), rank + 1, dtype=cupy.float32)
        accord.allreduce_(array, op=accord.Sum, name="gpu.cupy_")
        assert bool((array == size * (size + 1) / 2).all()), (
            f"rank {rank}: in-place allreduce of a CuPy array"
        )
        gathered = cupy.from_dlpack(
            accord.allgather(cupy.full((rank + 1, 2), rank, dtype=cupy.int32), name="gpu.cupy.gather")
        )
        expected = cupy.concatenate([cupy.full((q + 1, 2), q, dtype=cupy.int32) for q in range(size)])
        assert bool((gathered == expected).all()), f"rank {rank}: allgather of a CuPy array"
