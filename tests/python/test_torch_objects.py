"""broadcast_object, allgather_object and sparse_allreduce_async (1, 2 and 3 ranks)."""

import collections
import zlib

import pytest
import torch

import accord.torch as hvd

from torch_helpers import OP_NAMES, Checker, dtype_name, rank_values

Point = collections.namedtuple("Point", "x y")


@pytest.fixture(scope="module", autouse=True)
def initialized():
    hvd.init()
    yield


def rank_object(rank):
    """A nested object that differs per rank (and in size)."""
    return {
        "rank": rank,
        "name": "r" * (rank + 1),
        "values": list(range(rank * 3)),
        "point": Point(rank, -rank),
        "tensor": torch.arange(rank + 2, dtype=torch.float32) * (rank + 1),
        "nested": {"flag": rank % 2 == 0, "none": None, "bytes": bytes([rank] * 5)},
    }


def same_object(a, b):
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same_object(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same_object(x, y) for x, y in zip(a, b))
    return a == b


# ---------------------------------------------------------------- objects


def test_broadcast_object_from_every_root():
    check = Checker()
    for root in range(hvd.size()):
        mine = rank_object(hvd.rank())
        got = hvd.broadcast_object(mine if hvd.rank() == root else None, root_rank=root)
        check.true(same_object(got, rank_object(root)), f"broadcast_object from root {root}: got {got!r}")
        if hvd.rank() == root:
            check.true(got is mine, "the root did not get its own object back")
    # Named, with the default root.
    got = hvd.broadcast_object(["payload", hvd.rank()], name="objects.named")
    check.true(got == ["payload", 0], f"named broadcast_object: got {got!r}")
    check.check()


def test_broadcast_object_large_payload():
    big = bytes(range(256)) * 4096 if hvd.rank() == 0 else None  # 1 MiB
    got = hvd.broadcast_object(big, root_rank=0)
    assert got == bytes(range(256)) * 4096, f"rank {hvd.rank()}: 1 MiB payload differs"


def test_allgather_object():
    check = Checker()
    got = hvd.allgather_object(rank_object(hvd.rank()))
    check.true(
        isinstance(got, list) and len(got) == hvd.size(),
        f"allgather_object returned {type(got).__name__} of {len(got)}",
    )
    for r in range(min(len(got), hvd.size())):
        check.true(same_object(got[r], rank_object(r)), f"allgather_object entry {r}: {got[r]!r}")
    named = hvd.allgather_object(hvd.rank() * 10, name="objects.gather")
    check.true(named == [r * 10 for r in range(hvd.size())], f"named allgather_object: {named}")
    check.check()


def test_objects_on_a_process_set():
    size, me = hvd.size(), hvd.rank()
    members = [r for r in range(size) if r % 2 == me % 2]
    evens = hvd.add_process_set([r for r in range(size) if r % 2 == 0])
    odds = hvd.add_process_set([r for r in range(size) if r % 2 == 1]) if size > 1 else None
    check = Checker()
    try:
        mine = evens if me % 2 == 0 else odds
        root = members[-1]  # a global rank
        got = hvd.broadcast_object(("from", me), root_rank=root, process_set=mine)
        check.true(got == ("from", root), f"broadcast_object on a set: {got!r}")
        gathered = hvd.allgather_object(me * me, process_set=mine)
        check.true(gathered == [r * r for r in members], f"allgather_object on a set: {gathered}")
    finally:
        hvd.barrier()
        if odds is not None:
            hvd.remove_process_set(odds)
        hvd.remove_process_set(evens)
    check.check()


# ------------------------------------------------------------------ sparse


def rank_sparse(key, rank, shape, nnz, dtype):
    """A seeded sparse COO tensor; indices may repeat (uncoalesced)."""
    generator = torch.Generator().manual_seed(zlib.crc32(f"{key}/{rank}/indices".encode()))
    indices = torch.stack([torch.randint(0, extent, (nnz,), generator=generator) for extent in shape[:2]])
    values = rank_values(key, rank, [nnz] + list(shape[2:]), dtype)
    return torch.sparse_coo_tensor(indices, values, shape)


@pytest.mark.parametrize("op", [hvd.Sum, hvd.Average])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64])
def test_sparse_allreduce_matches_the_dense_reference(op, dtype):
    key = f"sparse.{OP_NAMES[op]}.{dtype_name(dtype)}"
    shape = [7, 5]
    nnz = [3 + 2 * r for r in range(hvd.size())]
    nnz[0] = 0 if hvd.size() > 1 else nnz[0]  # a rank may have no entries
    mine = rank_sparse(key, hvd.rank(), shape, nnz[hvd.rank()], dtype)
    handle = hvd.sparse_allreduce_async(mine, name=key, op=op)
    assert isinstance(handle, int)
    result = hvd.synchronize(handle)
    dense = sum(rank_sparse(key, r, shape, nnz[r], dtype).to_dense() for r in range(hvd.size()))
    if op == hvd.Average:
        dense = (
            dense / hvd.size()
            if dtype.is_floating_point
            else torch.div(dense, hvd.size(), rounding_mode="trunc")
        )
    check = Checker()
    check.true(result.is_sparse and result.is_coalesced(), "result is not a coalesced sparse tensor")
    check.values(key, result.to_dense(), dense, 1e-6 if dtype == torch.float32 else 1e-14)
    check.check()


def test_sparse_allreduce_with_dense_dims_unnamed_and_callable_handle():
    key = "sparse.hybrid"
    shape = [6, 4, 3]  # two sparse dimensions, one dense
    mine = rank_sparse(key, hvd.rank(), shape, 4, torch.float64)
    handle = hvd.sparse_allreduce_async(mine, None, hvd.Sum)
    result = handle()  # Horovod's sparse handle was a function to call
    dense = sum(rank_sparse(key, r, shape, 4, torch.float64).to_dense() for r in range(hvd.size()))
    check = Checker()
    check.values(key, result.to_dense(), dense, 1e-14)
    check.check()
    with pytest.raises(ValueError):
        hvd.sparse_allreduce_async(torch.ones(3), "sparse.dense", hvd.Sum)
    with pytest.raises(ValueError):
        hvd.sparse_allreduce_async(mine, "sparse.max", hvd.Max)
