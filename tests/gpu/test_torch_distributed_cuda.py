"""torch.distributed's backend "accord" on CUDA tensors, on a machine with a GPU.

Skipped without a CUDA device or on a torch without Python backends (before
2.1). Run under mpirun with 1, 2 and 3 ranks sharing the GPU, like
test_torch_cuda.py:

    mpirun -np 2 python3 -m pytest -x -q tests/gpu/test_torch_distributed_cuda.py

Every rank builds every rank's input from the rank number, computes the
expected result on the CPU and compares; DDP on the GPU is checked against
single-process training on the concatenated batch.
"""

import os
from datetime import timedelta

import pytest
import torch

if not torch.cuda.is_available():
    pytest.skip("no CUDA device is visible to torch: skipping the GPU tests", allow_module_level=True)

import torch.distributed as dist  # noqa: E402

import accord.torch as hvd  # noqa: E402
from accord.torch import process_group  # noqa: E402

if not process_group.backend_supported():
    pytest.skip(f"the accord backend needs torch 2.1; this is {torch.__version__}", allow_module_level=True)

NCCL_FORCED = os.environ.get("ACCORD_GPU_OPERATIONS", "").lower() == "nccl"
if NCCL_FORCED and int(os.environ.get("OMPI_COMM_WORLD_SIZE", "1")) > 1:
    pytest.skip(
        "NCCL forced on ranks that share a GPU (test_torch_cuda.py tests that refusal)",
        allow_module_level=True,
    )


@pytest.fixture(scope="module", autouse=True)
def accord_group(accord_initialized):
    torch.cuda.set_device(hvd.local_rank() % torch.cuda.device_count())
    if not dist.is_initialized():
        dist.init_process_group("accord", timeout=timedelta(seconds=240))
    assert dist.get_backend() == "accord"
    yield
    dist.destroy_process_group()


@pytest.fixture
def gpu():
    return torch.device("cuda", torch.cuda.current_device())


def values(rank: int, n: int, dtype) -> torch.Tensor:
    return (torch.arange(n, dtype=torch.float64) % 7 + rank + 1).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64])
@pytest.mark.parametrize("op", ["sum", "avg", "max"])
def test_all_reduce_on_the_gpu(rank, size, gpu, dtype, op):
    if op == "avg" and not dtype.is_floating_point:
        pytest.skip("AVG of integers is not defined by torch")
    n = 1027
    inputs = [values(r, n, torch.float64) for r in range(size)]
    stacked = torch.stack(inputs)
    expected = {"sum": stacked.sum(0), "avg": stacked.mean(0), "max": stacked.max(0).values}[op]
    reduce_op = {"sum": dist.ReduceOp.SUM, "avg": dist.ReduceOp.AVG, "max": dist.ReduceOp.MAX}[op]
    tensor = values(rank, n, dtype).to(gpu)
    dist.all_reduce(tensor, op=reduce_op)
    assert tensor.device == gpu
    tol = 1e-2 if dtype == torch.float16 else 1e-6
    torch.testing.assert_close(tensor.cpu().double(), expected, rtol=tol, atol=tol)


def test_movement_ops_on_the_gpu(rank, size, gpu):
    n = 6
    t = torch.full((3,), float(rank + 10), device=gpu)
    dist.broadcast(t, src=size - 1)
    assert t.cpu().tolist() == [float(size - 1 + 10)] * 3

    out = torch.empty(size * n, device=gpu)
    dist.all_gather_into_tensor(out, values(rank, n, torch.float32).to(gpu))
    assert torch.equal(out.cpu(), torch.cat([values(r, n, torch.float32) for r in range(size)]))

    full = [values(r, size * n, torch.float32) for r in range(size)]
    piece = torch.empty(n, device=gpu)
    dist.reduce_scatter_tensor(piece, full[rank].to(gpu), op=dist.ReduceOp.SUM)
    assert torch.equal(piece.cpu(), torch.stack(full).sum(0)[rank * n : (rank + 1) * n])

    send = (torch.arange(size, dtype=torch.float32) + 100 * rank).to(gpu)
    received = torch.empty(size, device=gpu)
    dist.all_to_all_single(received, send)
    assert received.cpu().tolist() == [float(r * 100 + rank) for r in range(size)]


def test_futures_on_a_side_stream(rank, size, gpu):
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        tensor = torch.full((1 << 16,), float(rank + 1), device=gpu)
        work = dist.all_reduce(tensor, async_op=True)
        doubled = work.get_future().then(lambda fut: fut.value()[0] * 2)
        result = doubled.wait()
    torch.cuda.synchronize()
    expected = 2.0 * sum(r + 1 for r in range(size))
    assert torch.all(result.cpu() == expected)
    assert work.is_completed()


def test_ddp_on_the_gpu_matches_one_process(rank, size, gpu):
    torch.manual_seed(0)
    reference = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).double()
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).double()
    model.load_state_dict(reference.state_dict())
    ddp = torch.nn.parallel.DistributedDataParallel(
        model.to(gpu), device_ids=[gpu.index], bucket_cap_mb=0.001
    )
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.05)
    for step in range(4):
        gen = torch.Generator().manual_seed(step)
        batches = [torch.randn(5, 16, generator=gen, dtype=torch.float64) for _ in range(size)]
        loss = ddp(batches[rank].to(gpu)).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        ref_loss = reference(torch.cat(batches)).pow(2).mean()
        ref_loss.backward()
        ref_opt.step()
        ref_opt.zero_grad()
    for got, want in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(got.detach().cpu(), want.detach(), rtol=1e-9, atol=1e-9)
