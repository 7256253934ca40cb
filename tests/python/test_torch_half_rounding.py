"""float16 and bfloat16 averages round as Horovod's do, bit for bit (half_rounding.py).

Every rank rebuilds every rank's seeded input and checks each element of its
result against Horovod's rounding: with 2 ranks exactly, with 3 against the
results of the three pairings MPI may combine ranks in; then the ranks
compare their results, which must be identical bit for bit. Covered: one
tensor, a fused group, scale factors, ``Compression.fp16`` of float32
tensors, and ``DistributedOptimizer`` with it (what ``--fp16-allreduce``
in Horovod's examples does).

Run with: mpirun -np N python3 -m pytest -x -q tests/python/test_torch_half_rounding.py
"""

import numpy as np
import pytest
import torch

import accord.torch as hvd

import half_rounding as ref

pytestmark = pytest.mark.usefixtures("accord_initialized")

TORCH_DTYPE = {"float16": torch.float16, "bfloat16": torch.bfloat16}
COUNT = 6000


def as_tensor(bits: np.ndarray, kind: str) -> torch.Tensor:
    return torch.from_numpy(bits.view(np.int16).copy()).view(TORCH_DTYPE[kind])


def as_bits(tensor: torch.Tensor) -> np.ndarray:
    return tensor.detach().contiguous().view(torch.int16).numpy().view(np.uint16).copy()


def check(what: str, got_bits: np.ndarray, candidates, kind: str) -> None:
    """Every element one of Horovod's results; the same bits on every rank."""
    bad = ref.mismatches(got_bits, candidates)
    if bad.size:
        i = int(bad[0])
        expected = sorted({float(ref.to_float(c.reshape(-1)[i : i + 1], kind)[0]) for c in candidates})
        got = float(ref.to_float(got_bits.reshape(-1)[i : i + 1], kind)[0])
        raise AssertionError(
            f"rank {hvd.rank()}: {what}: {bad.size} of {got_bits.size} elements differ; "
            f"index {i}: expected one of {expected}, got {got}"
        )
    everyone = hvd.allgather(torch.from_numpy(got_bits.view(np.int16).reshape(1, -1)), name=f"same.{what}")
    assert all(torch.equal(everyone[0], row) for row in everyone), f"rank {hvd.rank()}: {what}: ranks differ"


def inputs(seed: int, kind: str, count: int = COUNT):
    return [ref.rank_bits(seed, r, count, kind) for r in range(hvd.size())]


@pytest.mark.parametrize("kind", ref.KINDS)
@pytest.mark.parametrize("prescale,postscale", [(1.0, 1.0), (0.75, 3.0), (1.0, 0.1)])
def test_average_of_one_tensor(kind, prescale, postscale):
    every = inputs(11, kind)
    got = hvd.allreduce(
        as_tensor(every[hvd.rank()], kind),
        op=hvd.Average,
        name=f"one.{kind}",
        prescale_factor=prescale,
        postscale_factor=postscale,
    )
    check(
        f"{kind} x{prescale} /size x{postscale}",
        as_bits(got),
        ref.averages(every, kind, prescale, postscale),
        kind,
    )


@pytest.mark.parametrize("kind", ref.KINDS)
def test_average_of_a_fused_group_and_in_place(kind):
    """Three tensors fused into one collective, reduced in place."""
    sizes = [1000, 37, 4963]
    every = inputs(12, kind)
    tensors = list(as_tensor(every[hvd.rank()], kind).split(sizes))
    hvd.grouped_allreduce_(tensors, op=hvd.Average, name=f"group.{kind}")
    check(f"{kind} fused", as_bits(torch.cat(tensors)), ref.averages(every, kind), kind)


def test_fp16_compression_of_float32():
    """allreduce(..., compression=fp16): float32 sent as float16, averaged, cast back."""
    every = inputs(13, "float16")
    mine = as_tensor(every[hvd.rank()], "float16").float()
    got = hvd.allreduce(mine, op=hvd.Average, name="compressed", compression=hvd.Compression.fp16)
    assert got.dtype == torch.float32
    check("fp16 compression", as_bits(got.half()), ref.averages(every, "float16"), "float16")


def test_distributed_optimizer_with_fp16_compression():
    """The gradients step() uses are Horovod's averages of the float16-compressed gradients."""
    torch.manual_seed(5)
    model = torch.nn.Sequential(torch.nn.Linear(40, 30), torch.nn.Tanh(), torch.nn.Linear(30, 10))
    opt = hvd.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.1),
        named_parameters=model.named_parameters(),
        compression=hvd.Compression.fp16,
    )
    g = torch.Generator().manual_seed(100 + hvd.rank())
    x = torch.randn(16, 40, generator=g) * (hvd.rank() + 1)
    model(x).pow(2).mean().backward()
    # Each rank's compressed gradient, as every rank will see it.
    local = [as_bits(p.grad.half()) for p in model.parameters()]
    gathered = [
        hvd.allgather(torch.from_numpy(bits.view(np.int16)).unsqueeze(0), name=f"grad.{i}")
        for i, bits in enumerate(local)
    ]
    opt.synchronize()
    for i, (p, rows) in enumerate(zip(model.parameters(), gathered)):
        every = [row.numpy().view(np.uint16).reshape(-1) for row in rows]
        check(f"gradient {i}", as_bits(p.grad.half()).reshape(-1), ref.averages(every, "float16"), "float16")
    with opt.skip_synchronize():
        opt.step()
