"""accord's framework-neutral API on numpy arrays, under mpiexec with 1-3 ranks.

Every rank builds every rank's seeded input, computes the expected result
itself, and compares element by element. Tests run in file order on every
rank; the last one shuts accord down and initialises it again.
"""

import gc
import os
import weakref

import numpy as np
import pytest

import accord
from accord import _core

from conftest import (
    FLOAT_DTYPES,
    INT_DTYPES,
    NUMPY_DTYPES,
    all_inputs,
    assert_close,
    dtype_name,
    needs_ranks,
    reference_reduce,
)

pytestmark = pytest.mark.usefixtures("accord_initialized")

OPS = [accord.Sum, accord.Average, accord.Min, accord.Max, accord.Product]
OP_IDS = {
    accord.Sum: "sum",
    accord.Average: "average",
    accord.Min: "min",
    accord.Max: "max",
    accord.Product: "product",
}


def op_id(op):
    return OP_IDS[op]


def kind_for(op):
    return "product" if op == accord.Product else "small"


def go(name):
    """A collective every rank enters: orders what ranks do before and after it."""
    accord.allreduce(np.zeros(1, np.int32), op=accord.Sum, name=name)


# ------------------------------------------------------------------ queries


def test_rank_queries(rank, size):
    assert accord.is_initialized()
    if "OMPI_COMM_WORLD_RANK" in os.environ:
        assert rank == int(os.environ["OMPI_COMM_WORLD_RANK"])
        assert size == int(os.environ["OMPI_COMM_WORLD_SIZE"])
    assert 0 <= rank < size
    assert 0 <= accord.local_rank() < accord.local_size() <= size
    assert 0 <= accord.cross_rank() < accord.cross_size() <= size
    assert isinstance(accord.mpi_threads_supported(), bool)
    assert accord.mpi_threads_supported() == (accord.mpi_thread_level() == 3)
    info = accord.build_info()
    assert set(info) >= {"version", "mpi", "cuda", "nccl"} and info["mpi"] is True
    assert info["version"] == accord.__version__
    assert accord.global_process_set.ranks == list(range(size))
    assert accord.global_process_set.rank() == rank
    assert accord.global_process_set.size() == size
    assert accord.global_process_set.included()
    # Every rank sees the same size and distinct ranks.
    ranks = accord.allgather(np.array([rank], np.int64), name="queries.ranks")
    assert_close(ranks, np.arange(size, dtype=np.int64), "allgathered ranks")
    # The hosts' local sizes, each counted once (by its local rank 0), add up
    # to the size, also on hosts with different numbers of ranks (2 + 1).
    layout = accord.allgather(
        np.array([[accord.local_rank(), accord.local_size()]], np.int64), name="queries.layout"
    )
    assert layout[layout[:, 0] == 0, 1].sum() == size


def test_metrics(rank, size):
    keys = {
        "collectives",
        "tensors",
        "bytes",
        "fusion_ratio",
        "negotiation_rounds",
        "cache_hits",
        "cache_misses",
        "cache_hit_rate",
        "negotiation_seconds",
        "collective_seconds",
        "driven_iterations",
        "carried_allreduces",
    }
    before = accord.metrics()
    assert set(before) == keys
    for key in (
        "collectives",
        "tensors",
        "bytes",
        "negotiation_rounds",
        "cache_hits",
        "cache_misses",
        "driven_iterations",
        "carried_allreduces",
    ):
        assert isinstance(before[key], int) and before[key] >= 0, (key, before[key])
    for key in ("fusion_ratio", "cache_hit_rate", "negotiation_seconds", "collective_seconds"):
        assert isinstance(before[key], float) and before[key] >= 0.0, (key, before[key])
    # Three first-time names, one at a time, then the same names again.
    shapes = [(5,), (3, 4), (17,)]
    expected_bytes = sum(int(np.prod(s)) * 8 for s in shapes)
    for repeat in range(2):
        for i, shape in enumerate(shapes):
            inputs = all_inputs(f"metrics.{repeat}.{i}", size, shape, np.float64)
            out = accord.allreduce(inputs[rank], op=accord.Sum, name=f"metrics.{i}")
            assert_close(out, np.sum(np.stack(inputs), axis=0), f"metrics.{i} (pass {repeat})")
    after = accord.metrics()
    assert after["collectives"] - before["collectives"] == 2 * len(shapes)
    assert after["tensors"] - before["tensors"] == 2 * len(shapes)
    assert after["bytes"] - before["bytes"] == 2 * expected_bytes
    assert after["negotiation_rounds"] - before["negotiation_rounds"] >= 2 * len(shapes)
    assert after["cache_misses"] - before["cache_misses"] == len(shapes)
    assert after["cache_hits"] - before["cache_hits"] == len(shapes)
    assert after["fusion_ratio"] == pytest.approx(after["tensors"] / after["collectives"])
    lookups = after["cache_hits"] + after["cache_misses"]
    assert after["cache_hit_rate"] == pytest.approx(after["cache_hits"] / lookups)
    assert after["negotiation_seconds"] > before["negotiation_seconds"]
    assert after["collective_seconds"] > before["collective_seconds"]


# ---------------------------------------------------------------- allreduce


def _allreduce_cases():
    for op in OPS:
        for dtype in NUMPY_DTYPES:
            if dtype == np.bool_ and op == accord.Average:
                continue
            yield pytest.param(op, dtype, id=f"{op_id(op)}-{dtype_name(dtype)}")


@pytest.mark.parametrize("in_place", [False, True], ids=["out", "inplace"])
@pytest.mark.parametrize("op,dtype", _allreduce_cases())
def test_allreduce(rank, size, op, dtype, in_place):
    key = f"allreduce.{op_id(op)}.{dtype_name(dtype)}.{in_place}"
    inputs = all_inputs(key, size, (3, 17), dtype, kind_for(op))
    expected = reference_reduce(inputs, op)
    mine = inputs[rank].copy()
    if in_place:
        result = accord.allreduce_(mine, op=op, name=key)
        assert result is mine
    else:
        result = accord.allreduce(mine, op=op, name=key)
        assert result is not mine
        assert_close(mine, inputs[rank], "the input of an out-of-place allreduce (must be unchanged)")
    assert_close(result, expected, f"allreduce {op_id(op)} {dtype_name(dtype)}")


@pytest.mark.parametrize("dtype", INT_DTYPES + FLOAT_DTYPES, ids=dtype_name)
@pytest.mark.parametrize("op", [accord.Sum, accord.Average], ids=op_id)
def test_allreduce_scale_factors(rank, size, op, dtype):
    key = f"scaled.{op_id(op)}.{dtype_name(dtype)}"
    inputs = all_inputs(key, size, (40,), dtype)
    expected = reference_reduce(inputs, op, prescale=2.0, postscale=0.75)
    result = accord.allreduce(inputs[rank], op=op, name=key, prescale_factor=2.0, postscale_factor=0.75)
    assert_close(result, expected, f"scaled allreduce {op_id(op)} {dtype_name(dtype)}")


@pytest.mark.parametrize("shape", [(), (0,), (1,), (5, 0, 2), (1000,), (3, 1, 4, 2)], ids=str)
def test_allreduce_shapes(rank, size, shape):
    key = f"shapes.{shape}"
    inputs = all_inputs(key, size, shape, np.float32)
    result = accord.allreduce(inputs[rank], op=accord.Sum, name=key)
    assert_close(result, reference_reduce(inputs, accord.Sum), f"allreduce of shape {shape}")


def test_allreduce_unnamed_in_order(rank, size):
    inputs = [all_inputs(f"unnamed.{i}", size, (7,), np.float64) for i in range(5)]
    for i in range(5):
        assert_close(
            accord.allreduce(inputs[i][rank], op=accord.Max),
            reference_reduce(inputs[i], accord.Max),
            f"unnamed allreduce {i}",
        )


def test_allreduce_array_like(size):
    result = accord.allreduce([1.0, 2.0], op=accord.Sum, name="arraylike")
    assert_close(result, np.array([1.0, 2.0]) * size, "allreduce of a list")


# ---------------------------------------------------------------------- async


def test_async_poll_and_wait(rank, size):
    n = 12
    inputs = [all_inputs(f"async.{i}", size, (i + 1, 5), np.float32) for i in range(n)]
    outs = [inputs[i][rank].copy() for i in range(n)]
    handles = [accord.allreduce_async_(outs[i], op=accord.Sum, name=f"async.{i}") for i in range(n)]
    # Spin on poll() until every handle reports completion (the per-test
    # watchdog catches a hang).
    pending = set(range(n))
    while pending:
        pending = {i for i in pending if not accord.poll(handles[i])}
    for i, h in enumerate(handles):
        assert h.poll()
        assert h.wait() is outs[i]
        assert accord.synchronize(h) is outs[i]  # waiting again returns the same result
        assert_close(outs[i], reference_reduce(inputs[i], accord.Sum), f"async allreduce {i}")


def test_async_mixed_collectives(rank, size):
    x = all_inputs("mixed.x", size, (4, 3), np.int32)
    y = all_inputs("mixed.y", size, lambda r: (r + 1, 2), np.float64)
    handles = [
        accord.allreduce_async(x[rank], op=accord.Sum, name="mixed.allreduce"),
        accord.allgather_async(y[rank], name="mixed.allgather"),
        accord.broadcast_async(x[rank], root_rank=size - 1, name="mixed.broadcast"),
        accord.reducescatter_async(x[rank], op=accord.Sum, name="mixed.reducescatter"),
    ]
    results = [h.wait() for h in reversed(handles)][::-1]
    assert_close(results[0], reference_reduce(x, accord.Sum), "async allreduce")
    assert_close(results[1], np.concatenate(y), "async allgather")
    assert_close(results[2], x[size - 1], "async broadcast")
    assert_close(
        results[3], np.array_split(reference_reduce(x, accord.Sum), size)[rank], "async reducescatter"
    )


@needs_ranks(2)
def test_wait_timeout(rank, size):
    x = np.full(3, rank + 1.0)
    if rank == 0:
        handle = accord.allreduce_async(x, op=accord.Sum, name="timeout.late")
        with pytest.raises(TimeoutError):
            handle.wait(timeout=0.05)  # the last rank submits only after "timeout.go"
        assert not handle.poll()
        go("timeout.go")
    else:
        go("timeout.go")
        handle = accord.allreduce_async(x, op=accord.Sum, name="timeout.late")
    assert_close(
        handle.wait(timeout=30), np.full(3, size * (size + 1) / 2), "allreduce after a timed-out wait"
    )


# ---------------------------------------------------------------- allgather


@pytest.mark.parametrize("dtype", NUMPY_DTYPES, ids=dtype_name)
def test_allgather_uneven(rank, size, dtype):
    key = f"allgather.{dtype_name(dtype)}"
    # Rank r contributes r + 1 rows, rank 1 none at all.
    rows = lambda r: (0 if r == 1 else r + 1, 3, 2)  # noqa: E731
    inputs = all_inputs(key, size, rows, dtype)
    result = accord.allgather(inputs[rank], name=key)
    assert_close(result, np.concatenate(inputs), f"allgather {dtype_name(dtype)}")
    result[...] = 0  # the output is an ordinary, writeable array


def test_allgather_1d_and_scalar_rows(rank, size):
    inputs = all_inputs("allgather.1d", size, lambda r: (2 * r + 1,), np.int64)
    assert_close(accord.allgather(inputs[rank], name="allgather.1d"), np.concatenate(inputs), "1-d allgather")
    with pytest.raises(ValueError, match="at least one dimension"):
        accord.allgather(np.float32(1.0), name="allgather.scalar")


# ---------------------------------------------------------------- broadcast


@pytest.mark.parametrize("in_place", [False, True], ids=["out", "inplace"])
@pytest.mark.parametrize("dtype", NUMPY_DTYPES, ids=dtype_name)
def test_broadcast(rank, size, dtype, in_place):
    for root in range(size):
        key = f"broadcast.{dtype_name(dtype)}.{in_place}.{root}"
        inputs = all_inputs(key, size, (4, 6), dtype)
        mine = inputs[rank].copy()
        if in_place:
            result = accord.broadcast_(mine, root_rank=root, name=key)
            assert result is mine
        else:
            result = accord.broadcast(mine, root_rank=root, name=key)
            assert_close(mine, inputs[rank], "the input of an out-of-place broadcast (must be unchanged)")
        assert_close(result, inputs[root], f"broadcast from root {root}")


def test_broadcast_bad_root(size):
    with pytest.raises(ValueError, match="root rank"):
        accord.broadcast(np.zeros(2), root_rank=size, name="broadcast.badroot")


# ----------------------------------------------------------------- alltoall


def _splits(sender, size):
    """How many rows rank `sender` sends to each rank (uneven, some zero)."""
    return [(sender + 2 * j) % 3 for j in range(size)]


@pytest.mark.parametrize("dtype", NUMPY_DTYPES, ids=dtype_name)
def test_alltoall_uneven(rank, size, dtype):
    key = f"alltoall.{dtype_name(dtype)}"
    inputs = all_inputs(key, size, lambda r: (sum(_splits(r, size)), 2), dtype)
    output, received = accord.alltoall(inputs[rank], splits=_splits(rank, size), name=key)
    expected_parts, expected_splits = [], []
    for sender in range(size):
        offsets = np.cumsum([0] + _splits(sender, size))
        expected_parts.append(inputs[sender][offsets[rank] : offsets[rank + 1]])
        expected_splits.append(_splits(sender, size)[rank])
    assert_close(received, np.array(expected_splits, np.int64), "alltoall received splits")
    assert_close(output, np.concatenate(expected_parts), f"alltoall {dtype_name(dtype)}")


def test_alltoall_even(rank, size):
    inputs = all_inputs("alltoall.even", size, (2 * size, 3), np.float32)
    output = accord.alltoall(inputs[rank], name="alltoall.even")
    assert isinstance(output, np.ndarray)  # no splits given: the output alone
    expected = np.concatenate([inputs[s][2 * rank : 2 * rank + 2] for s in range(size)])
    assert_close(output, expected, "even alltoall")


def test_alltoall_bad_splits(size):
    with pytest.raises(ValueError, match="splits"):
        accord.alltoall(np.zeros((3, 2)), splits=[4] * size, name="alltoall.badsplits")


# ------------------------------------------------------------ reducescatter


@pytest.mark.parametrize("dtype", INT_DTYPES + FLOAT_DTYPES, ids=dtype_name)
@pytest.mark.parametrize("op", [accord.Sum, accord.Average], ids=op_id)
def test_reducescatter_uneven(rank, size, op, dtype):
    key = f"reducescatter.{op_id(op)}.{dtype_name(dtype)}"
    rows = 2 * size + 1  # the first rank gets one row more
    inputs = all_inputs(key, size, (rows, 3), dtype)
    result = accord.reducescatter(inputs[rank], op=op, name=key)
    expected = np.array_split(reference_reduce(inputs, op), size)[rank]
    assert_close(result, expected, f"reducescatter {op_id(op)} {dtype_name(dtype)}")


def test_reducescatter_scaled_and_refused_ops(rank, size):
    inputs = all_inputs("reducescatter.scaled", size, (size, 4), np.float64)
    result = accord.reducescatter(
        inputs[rank], op=accord.Sum, name="reducescatter.scaled", prescale_factor=0.5, postscale_factor=3.0
    )
    expected = np.array_split(reference_reduce(inputs, accord.Sum, 0.5, 3.0), size)[rank]
    assert_close(result, expected, "scaled reducescatter")
    with pytest.raises(ValueError, match="Sum and Average"):
        accord.reducescatter(inputs[rank], op=accord.Max, name="reducescatter.max")


# ------------------------------------------------------------------ grouped


def test_grouped_allreduce(rank, size):
    dtypes = [np.float32, np.int64, np.float16, np.uint8]
    inputs = [all_inputs(f"grouped.{i}", size, (i + 2, 3), dtypes[i]) for i in range(4)]
    results = accord.grouped_allreduce([x[rank] for x in inputs], op=accord.Sum, name="grouped")
    assert len(results) == 4
    for i, result in enumerate(results):
        assert_close(result, reference_reduce(inputs[i], accord.Sum), f"grouped allreduce member {i}")


def test_grouped_allreduce_in_place_and_async(rank, size):
    inputs = [all_inputs(f"grouped_.{i}", size, (5,), np.float64) for i in range(3)]
    arrays = [x[rank].copy() for x in inputs]
    handle = accord.grouped_allreduce_async_(arrays, op=accord.Average, name="grouped_")
    results = handle.wait()
    for i in range(3):
        assert results[i] is arrays[i]
        assert_close(arrays[i], reference_reduce(inputs[i], accord.Average), f"in-place grouped member {i}")
    bools = [all_inputs(f"grouped_bool.{i}", size, (6,), np.bool_) for i in range(2)]
    got = accord.grouped_allreduce([b[rank] for b in bools], op=accord.Max, name="grouped_bool")
    for i in range(2):
        assert_close(got[i], reference_reduce(bools[i], accord.Max), f"bool grouped member {i}")
    with pytest.raises(ValueError, match="mix bool"):
        accord.grouped_allreduce([bools[0][rank], inputs[0][rank]], op=accord.Sum, name="grouped_mixed")


def test_grouped_allgather_and_reducescatter(rank, size):
    a = all_inputs("grouped_ag.a", size, lambda r: (r + 1, 2), np.int16)
    b = all_inputs("grouped_ag.b", size, lambda r: (2,), np.float32)
    ga, gb = accord.grouped_allgather([a[rank], b[rank]], name="grouped_ag")
    assert_close(ga, np.concatenate(a), "grouped allgather member 0")
    assert_close(gb, np.concatenate(b), "grouped allgather member 1")
    flags = [all_inputs(f"grouped_ag.bool{i}", size, lambda r: (r, 3), np.bool_) for i in range(2)]
    got = accord.grouped_allgather([f[rank] for f in flags], name="grouped_ag.bool")
    for i in range(2):
        assert_close(got[i], np.concatenate(flags[i]), f"bool grouped allgather member {i}")
    c = all_inputs("grouped_rs.c", size, (size + 2, 2), np.float32)
    d = all_inputs("grouped_rs.d", size, (2 * size,), np.int32)
    rc, rd = accord.grouped_reducescatter([c[rank], d[rank]], op=accord.Sum, name="grouped_rs")
    assert_close(rc, np.array_split(reference_reduce(c, accord.Sum), size)[rank], "grouped reducescatter 0")
    assert_close(rd, np.array_split(reference_reduce(d, accord.Sum), size)[rank], "grouped reducescatter 1")


def test_grouped_allgather_mixes_bool_with_other_dtypes(rank, size):
    """A grouped allgather may mix bool arrays with others (as accord.torch's);
    each member keeps its dtype."""
    flags = all_inputs("grouped_ag.mixed.flags", size, lambda r: (r + 1,), np.bool_)
    small = all_inputs("grouped_ag.mixed.small", size, lambda r: (2, 3), np.uint8)
    got = accord.grouped_allgather([flags[rank], small[rank]], name="grouped_ag.mixed")
    assert_close(got[0], np.concatenate(flags), "bool member of a mixed grouped allgather")
    assert_close(got[1], np.concatenate(small), "uint8 member of a mixed grouped allgather")
    with pytest.raises(ValueError, match="dtype_override has 2 entries for 1 tensors"):
        _core.grouped_allgather_async([np.ones(2, np.uint8)], dtype_override=["bool", None])


# Both found by tests/python/test_property_collectives.py.
@needs_ranks(2)
def test_grouped_allgather_tells_bool_from_uint8(rank, size):
    """A bool member on one rank and a uint8 one on another, in a group that
    mixes dtypes, is a dtype disagreement (it used to travel as uint8 bytes,
    unnoticed, and rank 0 read 5 as a bool)."""
    first = np.array([True, False]) if rank == 0 else np.array([5, 0], np.uint8)
    with pytest.raises(accord.AccordError, match="dtype: rank 0 has bool; rank") as info:
        accord.grouped_allgather([first, np.ones(2, np.float32)], name="grouped_ag.bool_uint8")
    assert info.value.code == "MISMATCH"
    go("grouped_ag.bool_uint8.after")


@needs_ranks(2)
@pytest.mark.parametrize("larger", [0, 1], ids=["rank0_more", "rank1_more"])
def test_grouped_member_count_mismatch_fails_on_every_rank(rank, size, larger):
    """A group with more members on one rank than on the others fails on every
    rank, the members the others never submit included; it used to leave the
    larger group's rank (or every rank) waiting for them."""
    members = 3 if rank == larger else 2
    name = f"grouped.members.{larger}"
    with pytest.raises(accord.AccordError, match="disagree on the group") as info:
        accord.grouped_allreduce([np.ones(4) for _ in range(members)], op=accord.Sum, name=name)
    assert info.value.code == "MISMATCH" and name in str(info.value)
    # The name is free again, and unnamed collectives still line up.
    got = accord.grouped_allreduce([np.ones(4) for _ in range(3)], op=accord.Sum, name=name)
    for i in range(3):
        assert_close(got[i], np.full(4, float(size)), f"member {i} after the mismatch")
    assert_close(
        accord.allreduce(np.array([rank + 1.0]), op=accord.Sum),
        np.array([size * (size + 1) / 2]),
        "unnamed allreduce after the mismatch",
    )


# ------------------------------------------------------------- process sets


def test_process_sets_even_odd_concurrently(rank, size):
    even = accord.add_process_set([r for r in range(size) if r % 2 == 0])
    odd = (
        accord.add_process_set(accord.ProcessSet([r for r in range(size) if r % 2 == 1]))
        if size > 1
        else None
    )
    try:
        mine = even if rank % 2 == 0 else odd
        assert mine.included() and mine.rank() == rank // 2 and mine.size() == len(mine.ranks)
        other = odd if mine is even else even
        if other is not None:
            assert other.included() is False and other.rank() == -1
        # Both sets run their collectives at the same time, under the same names.
        inputs = all_inputs(f"sets.{mine.ranks}", size, (9,), np.float32)
        members = [inputs[r] for r in mine.ranks]
        handles = [
            accord.allreduce_async(inputs[rank], op=accord.Sum, name="sets.allreduce", process_set=mine),
            accord.allgather_async(inputs[rank], name="sets.allgather", process_set=mine),
            accord.broadcast_async(
                inputs[rank], root_rank=mine.ranks[-1], name="sets.broadcast", process_set=mine
            ),
        ]
        assert_close(handles[0].wait(), reference_reduce(members, accord.Sum), "allreduce in my set")
        assert_close(handles[1].wait(), np.concatenate(members), "allgather in my set")
        assert_close(handles[2].wait(), inputs[mine.ranks[-1]], "broadcast in my set (global root rank)")
        average = accord.allreduce(inputs[rank], op=accord.Average, name="sets.average", process_set=mine)
        assert_close(average, reference_reduce(members, accord.Average), "Average divides by the set size")
        if other is not None:
            with pytest.raises(ValueError):
                accord.allreduce(inputs[rank], name="sets.not_member", process_set=other)
    finally:
        assert accord.remove_process_set(even)
        if odd is not None:
            assert accord.remove_process_set(odd)
    assert even.process_set_id is None
    with pytest.raises(ValueError, match="not registered"):
        accord.allreduce(np.ones(2), process_set=even)


def test_process_sets_add_remove_at_run_time(rank, size):
    ids = []
    for round_ in range(3):
        ranks = list(range(size))[round_ % size :]
        s = accord.add_process_set(ranks)
        ids.append(s.process_set_id)
        assert s.process_set_id in _core.process_set_ids()
        assert _core.process_set_ranks(s.process_set_id) == ranks
        if s.included():
            got = accord.allreduce(
                np.array([rank + 1], np.int64), op=accord.Sum, name="sets.runtime", process_set=s
            )
            assert_close(got, np.array([sum(r + 1 for r in ranks)], np.int64), f"allreduce in set {ranks}")
        assert accord.remove_process_set(s)
        assert ids[-1] not in _core.process_set_ids()
    assert len(set(ids)) == 3, f"rank {rank}: process set ids were reused: {ids}"
    assert not accord.remove_process_set(accord.global_process_set)
    with pytest.raises(ValueError, match="already registered"):
        s = accord.add_process_set([0])
        try:
            accord.add_process_set(s)
        finally:
            accord.remove_process_set(s)


# -------------------------------------------------------------- join, barrier


def test_barrier_and_join(rank, size):
    accord.barrier()
    last = size - 1
    x = np.full(4, float(rank + 1))
    if rank != last:
        assert accord.join() == last
    else:
        # Every other rank has joined (or will): they contribute zeros.
        assert_close(accord.allreduce(x, op=accord.Sum, name="join.sum"), x, "allreduce with joined ranks")
        assert_close(
            accord.allreduce(x, op=accord.Average, name="join.average"),
            x / size,
            "Average with joined ranks divides by the set size",
        )
        assert accord.join() == last
    accord.barrier()


# ------------------------------------------------------------------- errors


@needs_ranks(2)
def test_mismatched_shapes_fail_on_every_rank(rank, size):
    with pytest.raises(accord.AccordError) as info:
        accord.allreduce(np.ones(rank + 1, np.float32), name="mismatch.shape")
    message = str(info.value)
    assert "mismatch.shape" in message and "shape" in message, message
    for r in range(size):  # every rank's shape is named
        assert f"[{r + 1}]" in message and f"{r}" in message, message
    assert info.value.code == "MISMATCH"
    assert isinstance(info.value, RuntimeError) and isinstance(info.value, accord.HorovodInternalError)
    # accord keeps working afterwards.
    assert_close(
        accord.allreduce(np.ones(2), op=accord.Sum, name="mismatch.after"),
        np.full(2, float(size)),
        "allreduce after a mismatch",
    )


@needs_ranks(2)
def test_mismatched_dtypes_fail_on_every_rank(rank, size):
    array = np.ones(3, np.float32 if rank == 0 else np.float64)
    with pytest.raises(accord.AccordError) as info:
        accord.allreduce(array, name="mismatch.dtype")
    message = str(info.value)
    assert "float32" in message and "float64" in message and "rank" in message, message
    with pytest.raises(accord.AccordError):
        accord.allgather(np.ones((1, rank + 2)), name="mismatch.allgather")
    with pytest.raises(accord.AccordError):
        accord.broadcast(np.ones(2), root_rank=rank, name="mismatch.root")


@needs_ranks(2)
def test_duplicate_name_in_flight(rank, size):
    # The last rank submits "dup" only after every other rank has tried the
    # name twice, so it is in flight on those ranks.
    x = np.ones(3)
    if rank != size - 1:
        first = accord.allreduce_async(x, op=accord.Sum, name="dup")
        with pytest.raises(ValueError, match="dup"):
            accord.allreduce_async(x, op=accord.Sum, name="dup")
        go("dup.go")
    else:
        go("dup.go")
        first = accord.allreduce_async(x, op=accord.Sum, name="dup")
    assert_close(first.wait(), np.full(3, float(size)), "the first allreduce of a duplicated name")


def test_invalid_arguments(rank, size):
    x = np.arange(12.0).reshape(3, 4)
    with pytest.raises(ValueError, match="contiguous"):
        accord.allreduce(x[:, ::2])
    with pytest.raises(ValueError, match="contiguous"):
        accord.allreduce_(x.T)
    with pytest.raises(ValueError, match="contiguous"):
        _core.allreduce_async(x.T, x.T)
    with pytest.raises(ValueError, match="contiguous"):
        _core.allgather_async(x[:, 1:])
    frozen = np.ones(3)
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        accord.allreduce_(frozen)
    assert_close(
        accord.allreduce(frozen, op=accord.Sum, name="readonly.input"),
        np.full(3, float(size)),
        "allreduce of a read-only input",
    )
    with pytest.raises(ValueError, match="Adasum"):
        accord.allreduce(x.astype(np.int32), op=accord.Adasum)
    with pytest.raises(ValueError, match="unknown reduction op"):
        accord.allreduce(x, op=17)
    with pytest.raises(ValueError, match="bool"):
        accord.allreduce(np.ones(3, np.bool_), op=accord.Average)
    with pytest.raises(ValueError):
        accord.allreduce(np.ones(3, np.complex64))
    with pytest.raises(TypeError, match="DLPack"):
        _core.allreduce_async("not a tensor", "not a tensor")
    with pytest.raises(ValueError, match="dtype_override"):
        _core.allreduce_async(np.ones(3, np.float32), np.ones(3, np.float32), dtype_override="bool")
    with pytest.raises(ValueError, match="unknown dtype"):
        _core.allreduce_async(np.ones(3, np.uint8), np.ones(3, np.uint8), dtype_override="int4")
    with pytest.raises(ValueError, match="must match"):
        _core.allreduce_async(np.ones(3), np.ones(4))
    with pytest.raises(ValueError, match="rocm"):
        _core.allreduce_async(_FakeRocmTensor(), _FakeRocmTensor())
    with pytest.raises(ValueError, match="unknown reduce op"):
        _core.allreduce_async(np.ones(3), np.ones(3), op=9)
    with pytest.raises(TypeError):
        accord.allreduce(x, process_set="everyone")


class _FakeRocmTensor:
    """Says it lives on a ROCm device; must be refused before __dlpack__ is called."""

    def __dlpack_device__(self):
        return (10, 0)

    def __dlpack__(self, stream=None):
        raise AssertionError("__dlpack__ must not be called for a tensor on an unsupported device")


def test_capsules_in_place_and_once(rank, size):
    x = np.full(4, rank + 1.0)
    capsule = x.__dlpack__()
    _core.allreduce_async(capsule, capsule, op=_core.OP_SUM).wait()
    assert_close(x, np.full(4, size * (size + 1) / 2), "in-place allreduce of a capsule")
    with pytest.raises(ValueError, match="consumed"):
        _core.allreduce_async(capsule, capsule)


class _ArraySubclass(np.ndarray):
    """An ndarray subclass: not what the fast path of allreduce takes."""


def test_allreduce_fast_path_argument_forms(rank, size):
    """The fast path of allreduce (contiguous, writeable, non-bool ndarrays) with
    every form its arguments take, beside calls the general path serves."""
    odd = accord.add_process_set([r for r in range(size) if r % 2 == 1]) if size > 1 else None
    try:
        key = "fast.forms"
        inputs = all_inputs(key, size, (6, 5), np.float64)
        cases = [  # (what, keyword arguments, expected)
            ("default op", {}, reference_reduce(inputs, accord.Average)),
            (
                "int scale factors",
                dict(op=accord.Sum, prescale_factor=2, postscale_factor=3),
                reference_reduce(inputs, accord.Sum, prescale=2.0, postscale=3.0),
            ),
            ("process set by id", dict(op=accord.Max, process_set=0), reference_reduce(inputs, accord.Max)),
            (
                "process set object",
                dict(op=accord.Min, process_set=accord.global_process_set),
                reference_reduce(inputs, accord.Min),
            ),
            ("unnamed", dict(op=accord.Sum, name=None), reference_reduce(inputs, accord.Sum)),
        ]
        for i, (what, kwargs, expected) in enumerate(cases):
            kwargs.setdefault("name", f"{key}.{i}")
            mine = inputs[rank].copy()
            handle = accord.allreduce_async_(mine, **kwargs)
            assert handle.wait() is mine and handle.poll() and handle.wait() is mine
            assert_close(mine, expected, f"allreduce_async_ ({what})")
            kwargs["name"] = None if kwargs["name"] is None else kwargs["name"] + ".out"
            mine = inputs[rank].copy()
            handle = accord.allreduce_async(mine, **kwargs)
            result = accord.synchronize(handle, timeout=30)
            assert result is not mine and handle.wait() is result
            assert_close(result, expected, f"allreduce_async ({what})")
            assert_close(mine, inputs[rank], f"the input of allreduce_async ({what}), must be unchanged")
            kwargs["name"] = None if kwargs["name"] is None else kwargs["name"] + ".sync"
            assert_close(accord.allreduce(inputs[rank].copy(), **kwargs), expected, f"allreduce ({what})")
            kwargs["name"] = None if kwargs["name"] is None else kwargs["name"] + "_"
            mine = inputs[rank].copy()
            assert accord.allreduce_(mine, **kwargs) is mine
            assert_close(mine, expected, f"allreduce_ ({what})")
        # A subclass of ndarray and a slice with an offset into its base.
        base = np.zeros(9)
        view = base[2:6]
        view[:] = rank + 1.0
        assert accord.allreduce_(view, op=accord.Sum, name=f"{key}.offset") is view
        assert_close(
            base, np.array([0, 0] + [size * (size + 1) / 2] * 4 + [0, 0, 0]), "allreduce_ of a slice"
        )
        sub = np.full((2, 2), rank + 1.0).view(_ArraySubclass)
        assert accord.allreduce_(sub, op=accord.Sum, name=f"{key}.subclass") is sub
        assert_close(
            np.asarray(sub), np.full((2, 2), size * (size + 1) / 2), "allreduce_ of an ndarray subclass"
        )
        # On a process set that not every rank belongs to.
        if odd is not None and odd.included():
            members = [r for r in range(size) if r % 2 == 1]
            mine = np.full(3, rank + 1.0)
            accord.allreduce_async_(mine, op=accord.Sum, name=f"{key}.odd", process_set=odd).wait()
            assert_close(mine, np.full(3, float(sum(r + 1 for r in members))), "allreduce_ on a process set")
        # Errors are those of the general path.
        x = np.ones(3)
        with pytest.raises(ValueError, match="Adasum"):
            accord.allreduce_async_(x.astype(np.int32), op=accord.Adasum)
        with pytest.raises(ValueError, match="unknown reduction op"):
            accord.allreduce_(x, op=[1])
        with pytest.raises(TypeError):
            accord.allreduce_async(x, prescale_factor=None)
        with pytest.raises(TypeError):
            accord.allreduce_(x, name=5)
        go(f"{key}.done")
    finally:
        if odd is not None:
            accord.remove_process_set(odd)


def test_common_allreduces_skip_the_general_path(rank, size, monkeypatch):
    """Contiguous, writeable arrays reach the core without the general argument
    handling (which costs more than the core's enqueue)."""
    from accord import collectives

    def general(*args, **kwargs):
        raise AssertionError("the general path was taken")

    x = np.full(5, rank + 1.0)
    total = size * (size + 1) / 2
    with monkeypatch.context() as patch:
        for name in ("_input", "_inplace", "_is_bool", "_grouped_allreduce"):
            patch.setattr(collectives, name, general)
        assert accord.allreduce_async_(x, op=accord.Sum, name="skip.async_").wait() is x
        out = accord.allreduce_async(x, op=accord.Max, name="skip.async", prescale_factor=2.0).wait()
        summed = accord.allreduce(x, name="skip.sync", process_set=accord.global_process_set)
        assert accord.allreduce_(summed, name="skip.sync_", op=accord.Min) is summed
    assert_close(x, np.full(5, total), "allreduce_async_")
    assert_close(out, np.full(5, 2 * total), "allreduce_async (Max, prescaled)")
    assert_close(summed, np.full(5, total), "allreduce then allreduce_ (Min)")


def test_core_allreduce_argument_forms_and_handles(rank, size):
    """_core.allreduce_async's fast call (positional, exact types) and the general
    one (keywords, conversions) give the same results; Handle's methods."""
    total = size * (size + 1) / 2
    calls = [
        ("positional", lambda x, n: _core.allreduce_async(x, x, n, _core.OP_SUM, 1.0, 1.0, 0, None)),
        ("positional, two arguments", lambda x, n: _core.allreduce_async(x, x)),
        ("keywords", lambda x, n: _core.allreduce_async(x, x, name=n, op=_core.OP_SUM)),
        ("int scale factors", lambda x, n: _core.allreduce_async(x, x, n, _core.OP_SUM, 1, 1, 0)),
        ("numpy ints", lambda x, n: _core.allreduce_async(x, x, n, np.int64(_core.OP_SUM), np.float64(1.0))),
    ]
    for i, (what, call) in enumerate(calls):
        x = np.full(4, rank + 1.0)
        handle = call(x, f"core.forms.{i}")
        assert isinstance(handle, _core.Handle)
        assert handle.wait() is None
        assert handle.poll() is True
        assert handle.wait(timeout=0) is None and handle.wait(5) is None  # done: returns at once
        expected = total if "two arguments" not in what else (total / size)  # op defaults to Average
        assert_close(x, np.full(4, expected), f"_core.allreduce_async ({what})")
    x = np.ones(2)
    for bad in (
        lambda: _core.allreduce_async(x),
        lambda: _core.allreduce_async(x, x, 5),
        lambda: _core.allreduce_async(x, x, "n", 1.5),
        lambda: _core.allreduce_async(x, x, "n", 2**40),
        lambda: _core.allreduce_async(x, x, "n", 1, 1.0, 1.0, 0, None, None, 7),
        lambda: _core.allreduce_async(x, x, "n", 1, 1.0, 1.0, 0, None, "stream"),
        lambda: _core.allreduce_async(x, x, "\udcff"),
        lambda: _core.allreduce_async(x, x, colour="red"),
    ):
        with pytest.raises(TypeError):
            bad()
    with pytest.raises(ValueError, match="process set"):
        _core.allreduce_async(x, x, "n", 1, 1.0, 1.0, 12345)
    with pytest.raises(TypeError, match="made by"):
        _core.Handle()
    handle = _core.allreduce_async(x, x, "core.forms.handle", _core.OP_SUM)
    # The lambdas run before the ``del handle`` below, which pyflakes cannot tell.
    for bad in (
        lambda: handle.wait(1, 2),  # noqa: F821
        lambda: handle.wait(timeout=1, other=2),  # noqa: F821
        lambda: handle.wait(other=2),  # noqa: F821
        lambda: handle.wait("soon"),  # noqa: F821
    ):
        with pytest.raises(TypeError):
            bad()
    with pytest.raises(ValueError, match="non-negative"):
        handle.wait(-1)
    handle.wait(timeout=None)
    assert handle.outputs() == [] and handle.value() == -1
    assert_close(x, np.full(2, float(size)), "allreduce behind the handle")
    reference = weakref.ref(handle)
    assert reference() is handle
    del handle
    gc.collect()
    assert reference() is None, "a weak reference outlived its handle"


# --------------------------------------------------------- zero-copy outputs


def test_outputs_are_zero_copy(rank, size):
    x = all_inputs("zerocopy", size, lambda r: (r + 2, 3), np.float64)
    handle = _core.allgather_async(x[rank], name="zerocopy.core")
    handle.wait()
    tensor = handle.outputs()[0]
    assert handle.outputs()[0] is tensor  # the same wrappers on every call
    assert tensor.shape == (sum(r + 2 for r in range(size)), 3) and tensor.dtype == "float64"
    pointer = tensor.data_ptr
    array = np.from_dlpack(tensor)
    assert tensor.consumed
    assert array.ctypes.data == pointer, "np.from_dlpack copied the core's output"
    with pytest.raises(ValueError, match="already been exported"):
        tensor.__dlpack__()
    del handle, tensor
    gc.collect()
    # The memory belongs to the array now; reuse the allocator and check it.
    for i in range(3):
        accord.allgather(np.full((4, 3), float(i)), name=f"zerocopy.churn.{i}")
    assert_close(array, np.concatenate(x), "np.from_dlpack of an allgather output, after its handle is gone")

    # accord's numpy layer hands over the core's allocation as well, writeable.
    result = accord.allgather(x[rank], name="zerocopy.numpy")
    assert not result.flags.owndata and result.flags.writeable
    assert isinstance(result.base, _core.DLPackTensor)
    assert result.ctypes.data == result.base.data_ptr
    with pytest.raises(ValueError, match="__array_interface__"):
        result.base.__dlpack__()
    assert_close(result, np.concatenate(x), "accord.allgather output")
    flags = accord.allgather(np.array([rank % 2 == 0]), name="zerocopy.bool")
    assert flags.dtype == np.bool_ and isinstance(flags.base.base, _core.DLPackTensor)
    assert_close(flags, np.array([r % 2 == 0 for r in range(size)]), "bool allgather output")


def test_unconsumed_and_unfetched_outputs(size):
    # Outputs never fetched, or fetched and never consumed, are freed with the handle.
    for i in range(20):
        handle = _core.reducescatter_async(np.ones((size * 64, 64)), name=f"unfetched.{i}", op=_core.OP_SUM)
        handle.wait()
        if i % 2:
            handle.outputs()
    assert_close(
        accord.reducescatter(np.ones((size, 2)), op=accord.Sum, name="unfetched.after"),
        np.full((1, 2), float(size)),
        "reducescatter after dropped outputs",
    )


@needs_ranks(2)
def test_dropped_handle_keeps_its_arrays_alive(rank, size):
    if rank == 0:
        array = np.full(1000, 1.0)
        alive = weakref.ref(array)
        handle = _core.allreduce_async(array, array, name="orphan", op=_core.OP_SUM)
        del handle, array
        gc.collect()
        # The last rank has not submitted "orphan" yet, so it is in flight and
        # the module must still hold the array the coordinator will write.
        assert alive() is not None, "an array in flight was freed when its handle was dropped"
        go("orphan.go")
    else:
        go("orphan.go")
        _core.allreduce_async(np.full(1000, 1.0), np.empty(1000), name="orphan", op=_core.OP_SUM).wait()
    accord.barrier()  # the last rank waited for "orphan", so it is complete everywhere
    accord.barrier()  # enqueueing sweeps completed orphans
    if rank == 0:
        gc.collect()
        assert alive() is None, "the array of a dropped, completed handle was never released"


def test_handle_outputs_before_completion(rank, size):
    if size == 1:
        pytest.skip("needs a second rank to hold the operation back")
    if rank == 0:
        handle = _core.allgather_async(np.ones(2), name="early")
        with pytest.raises(ValueError, match="wait"):
            handle.outputs()
        go("early.go")
    else:
        go("early.go")
        handle = _core.allgather_async(np.ones(2), name="early")
    handle.wait()
    assert_close(np.from_dlpack(handle.outputs()[0]), np.ones(2 * size), "allgather after an early outputs()")


# ---------------------------------------------------- shutdown (runs last)


def test_zz_calls_after_shutdown_raise_and_init_again(rank, size):
    accord.shutdown()
    assert not accord.is_initialized()
    # The message names Python's init(), not the C++ one.
    with pytest.raises(
        accord.AccordError, match=r"shut down; call hvd\.init\(\) \(accord\.init\(\)\)"
    ) as info:
        accord.allreduce(np.ones(2))
    assert info.value.code == "SHUT_DOWN"
    with pytest.raises(accord.AccordError):
        _core.barrier_async()
    with pytest.raises(
        accord.RequestError, match=r"not initialised: call hvd\.init\(\) \(accord\.init\(\)\)"
    ):
        accord.rank()
    # accord can be initialised again, here with process sets given to init().
    first = accord.ProcessSet([0])
    accord.init(process_sets=[first, list(range(size))])
    assert accord.is_initialized() and accord.rank() == rank
    assert first.process_set_id == 1 and _core.process_set_ranks(2) == list(range(size))
    got = accord.allreduce(np.array([rank + 1.0]), op=accord.Sum, name="reinit", process_set=2)
    assert_close(got, np.array([size * (size + 1) / 2]), "allreduce after init() again")
    if rank == 0:
        assert_close(accord.allreduce(np.ones(1), process_set=first), np.ones(1), "allreduce in set [0]")
