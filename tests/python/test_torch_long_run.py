"""A long mixed run in one process per rank, as a Horovod-style test file makes it.

Hundreds of collectives of every kind, named and unnamed, with errors in
between: mismatches that fail on every rank, arguments refused on one rank
alone, a name already in flight, process sets added, used and removed, shut
down and initialised again, ranks that join early, and handles synchronised
out of order. After each test that ends in an error on some ranks, the next
collectives must still line up on every rank: no rank may be left with a
stale pending operation, a stale auto-name, or a process set the others
removed. Each test ends by checking exactly that (``in_step``), with
unnamed collectives, which match only if every rank's counters agree.

Run under mpiexec with 2 and 3 ranks (tests/CMakeLists.txt).
"""

import os
import random

import pytest
import torch

import accord.torch as hvd

from torch_helpers import ALL_DTYPES, ALL_OPS, Checker, dtype_name, rank_values, reference_reduce, tolerance

SIZE = int(os.environ.get("OMPI_COMM_WORLD_SIZE", "1"))
pytestmark = pytest.mark.skipif(SIZE < 2, reason="a run across ranks: needs 2 or more")


@pytest.fixture(scope="module", autouse=True)
def initialized():
    hvd.init()
    yield
    hvd.barrier()


def every_rank(key, shape, dtype, kind="small"):
    return [rank_values(key, r, shape, dtype, kind) for r in range(hvd.size())]


def in_step(what):
    """Unnamed collectives of several kinds, checked: they match across ranks
    only if no rank has a stale name, pending op or process set."""
    check = Checker()
    size, me = hvd.size(), hvd.rank()
    total = hvd.allreduce(torch.tensor([float(me + 1)]), op=hvd.Sum)
    check.true(total.item() == size * (size + 1) / 2, f"after {what}: unnamed allreduce gave {total.item()}")
    gathered = hvd.allgather(torch.full((me + 1, 2), float(me)))
    expected = torch.cat([torch.full((r + 1, 2), float(r)) for r in range(size)])
    check.true(torch.equal(gathered, expected), f"after {what}: unnamed allgather gave {gathered.tolist()}")
    root = hvd.broadcast(torch.tensor([me * 10]), root_rank=size - 1)
    check.true(root.item() == (size - 1) * 10, f"after {what}: unnamed broadcast gave {root.item()}")
    hvd.barrier()
    check.check()


def test_hundreds_of_allreduces_of_every_dtype_and_op():
    check = Checker()
    handles = []
    for round_ in range(3):
        for dtype in ALL_DTYPES:
            for op in ALL_OPS:
                if dtype == torch.bool and op == hvd.Average:
                    continue
                key = f"long.ar.{round_}.{dtype_name(dtype)}.{op}"
                kind = "product" if op == hvd.Product else "small"
                inputs = every_rank(key, (round_ + 1, 5), dtype, kind)
                named = (round_ + op) % 2 == 0
                handle = hvd.allreduce_async(inputs[hvd.rank()], op=op, name=key if named else None)
                handles.append((key, op, inputs, handle))
    for key, op, inputs, handle in reversed(handles):  # out of order on purpose
        check.values(
            key,
            hvd.synchronize(handle),
            reference_reduce(inputs, op),
            tolerance(inputs[0].dtype) if op == hvd.Average else 0.0,
        )
    check.check()
    in_step("hundreds of allreduces")


def test_mismatches_fail_on_every_rank_and_the_job_goes_on():
    me = hvd.rank()
    for i in range(3):
        with pytest.raises(hvd.HorovodInternalError, match="shape"):
            hvd.allreduce(torch.ones(3 if me == 0 else 4), name=f"long.mismatch.shape.{i}")
        with pytest.raises(hvd.HorovodInternalError, match="dtype"):
            hvd.allreduce(
                torch.ones(3, dtype=torch.float32 if me == 0 else torch.float64),
                name=f"long.mismatch.dtype.{i}",
            )
        with pytest.raises(hvd.HorovodInternalError):
            hvd.grouped_allreduce(
                [torch.ones(2), torch.ones(5 if me == 0 else 6)], name=f"long.mismatch.group.{i}"
            )
        with pytest.raises(hvd.HorovodInternalError):
            hvd.broadcast(torch.ones(2), root_rank=0 if me == 0 else 1, name=f"long.mismatch.root.{i}")
        in_step(f"mismatch round {i}")


def test_arguments_refused_on_one_rank_alone_leave_the_others_in_step():
    if hvd.rank() == 0:
        # Every one of these is refused at enqueue, on this rank only, and
        # none may use up an unnamed number.
        with pytest.raises(ValueError):
            hvd.allreduce(torch.ones(3, dtype=torch.bool), op=hvd.Average)
        with pytest.raises(ValueError):
            hvd.broadcast(torch.ones(3), root_rank=hvd.size() + 5)
        with pytest.raises(ValueError):
            hvd.alltoall(torch.ones(3), splits=[1] * (hvd.size() + 1))
        with pytest.raises(ValueError):
            hvd.reducescatter(torch.ones(4), op=hvd.Max)
        with pytest.raises(ValueError):
            hvd.allgather(torch.tensor(1.0))  # a scalar
        with pytest.raises(ValueError):
            hvd.allreduce(torch.ones(2), op=97)
    in_step("arguments refused on rank 0 alone")


def test_a_name_already_in_flight_is_refused_and_the_first_completes():
    check = Checker()
    key = "long.in_flight"
    inputs = every_rank(key, (8,), torch.float32)
    hvd.barrier()
    # Rank 0 holds its op back behind a barrier the others only enter after
    # their second enqueue, so "long.in_flight" is still in flight there.
    first = None
    if hvd.rank() != 0:
        first = hvd.allreduce_async(inputs[hvd.rank()], op=hvd.Sum, name=key)
        with pytest.raises(ValueError, match="in flight"):
            hvd.allreduce_async(inputs[hvd.rank()], op=hvd.Sum, name=key)
    hvd.barrier()
    if hvd.rank() == 0:
        first = hvd.allreduce_async(inputs[0], op=hvd.Sum, name=key)
    check.values(key, hvd.synchronize(first), reference_reduce(inputs, hvd.Sum))
    check.check()
    in_step("a name refused while in flight")


def test_process_sets_added_used_and_removed_again_and_again():
    check = Checker()
    size, me = hvd.size(), hvd.rank()
    for i in range(4):
        members = [0, size - 1] if i % 2 == 0 else [r for r in range(size) if r != 0]
        process_set = hvd.add_process_set(members)
        key = f"long.set.{i}"
        if me in members:
            inputs = [rank_values(key, r, (4,), torch.float32) for r in members]
            got = hvd.allreduce(inputs[members.index(me)], op=hvd.Sum, name=key, process_set=process_set)
            check.values(key, got, reference_reduce(inputs, hvd.Sum))
            got = hvd.allgather(torch.full((1,), float(me)), process_set=process_set)
            check.true(got.tolist() == [float(r) for r in members], f"{key}: allgather gave {got.tolist()}")
        else:
            with pytest.raises(ValueError, match="not a member"):
                hvd.allreduce(torch.ones(1), name=key, process_set=process_set)
        hvd.remove_process_set(process_set)
        with pytest.raises(ValueError):
            hvd.allreduce(torch.ones(1), name=key + ".removed", process_set=process_set)
        in_step(f"process set round {i}")
    check.check()


def test_shutdown_with_work_in_flight_and_init_again():
    for i in range(3):
        # An operation only this rank submits stays pending until shutdown,
        # which fails it; after init the same name is free again.
        pending = hvd.allreduce_async(torch.ones(2), name=f"long.lonely.{hvd.rank()}.{i}")
        hvd.barrier()
        hvd.shutdown()
        with pytest.raises(hvd.HorovodInternalError):
            hvd.synchronize(pending)
        with pytest.raises((ValueError, hvd.HorovodInternalError)):
            hvd.allreduce(torch.ones(1), name="long.after_shutdown")
        hvd.init()
        assert hvd.is_initialized()
        # Unnamed numbering starts again on every rank.
        in_step(f"shutdown and init, round {i}")
        got = hvd.allreduce(torch.ones(2), op=hvd.Sum, name=f"long.lonely.{i}")
        assert torch.equal(got, torch.full((2,), float(hvd.size()))), f"rank {hvd.rank()}: {got}"


def test_ranks_that_join_early_take_part_with_zeros():
    check = Checker()
    size, me = hvd.size(), hvd.rank()
    for i in range(2):
        # Rank r has r + 1 batches: the ranks run out of work one by one.
        for step in range(size):
            if step <= me:
                got = hvd.allreduce(torch.tensor([1.0]), op=hvd.Sum, name=f"long.join.{i}.{step}")
                check.true(got.item() == size - step, f"join round {i} step {step}: {got.item()}")
        last = hvd.join()
        check.true(last == size - 1, f"join round {i}: the last rank to join was {last}")
        in_step(f"join round {i}")
    check.check()


def test_a_long_mixed_stream_synchronised_out_of_order():
    check = Checker()
    size, me = hvd.size(), hvd.rank()
    generator = random.Random(2026)
    handles = []
    for i in range(300):
        kind = generator.choice(["allreduce", "allgather", "broadcast", "alltoall", "reducescatter"])
        key = f"long.mixed.{i}.{kind}"
        dtype = generator.choice([torch.float32, torch.int32, torch.float64])
        if kind == "allreduce":
            inputs = every_rank(key, (generator.randint(1, 40),), dtype)
            handles.append(
                (
                    key,
                    hvd.allreduce_async(inputs[me], op=hvd.Sum, name=key),
                    reference_reduce(inputs, hvd.Sum),
                )
            )
        elif kind == "allgather":
            inputs = [rank_values(key, r, (r + 1, 3), dtype) for r in range(size)]
            handles.append((key, hvd.allgather_async(inputs[me], name=key), torch.cat(inputs)))
        elif kind == "broadcast":
            inputs = every_rank(key, (5,), dtype)
            root = i % size
            handles.append((key, hvd.broadcast_async(inputs[me], root_rank=root, name=key), inputs[root]))
        elif kind == "alltoall":
            inputs = every_rank(key, (2 * size, 2), dtype)
            expected = torch.cat([inputs[q][2 * me : 2 * me + 2] for q in range(size)])
            handles.append((key, hvd.alltoall_async(inputs[me], name=key), expected))
        else:
            rows = 2 * size + 1
            inputs = every_rank(key, (rows, 2), dtype)
            first = me * (rows // size) + min(me, rows % size)
            count = rows // size + (1 if me < rows % size else 0)
            handles.append(
                (
                    key,
                    hvd.reducescatter_async(inputs[me], op=hvd.Sum, name=key),
                    reference_reduce(inputs, hvd.Sum)[first : first + count],
                )
            )
    generator.shuffle(handles)  # the same order on every rank: the seed is shared, but it need not be
    for key, handle, expected in handles:
        got = hvd.synchronize(handle)
        if isinstance(got, tuple):
            got = got[0]
        check.values(key, got, expected)
    check.check()
    in_step("a long mixed stream")


def test_objects_and_sparse_between_the_rest():
    check = Checker()
    me = hvd.rank()
    obj = hvd.broadcast_object({"step": 7, "rank": me}, root_rank=0)
    check.true(obj == {"step": 7, "rank": 0}, f"broadcast_object gave {obj}")
    everyone = hvd.allgather_object(("r", me))
    check.true(everyone == [("r", r) for r in range(hvd.size())], f"allgather_object gave {everyone}")
    sparse = torch.sparse_coo_tensor([[me]], [1.0], (hvd.size(),))
    summed = hvd.synchronize(hvd.sparse_allreduce_async(sparse, name="long.sparse", op=hvd.Sum))
    check.true(torch.equal(summed.to_dense(), torch.ones(hvd.size())), f"sparse allreduce gave {summed}")
    check.check()
    in_step("objects and a sparse allreduce")
