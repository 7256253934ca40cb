"""torch.distributed's backend "accord" across ranks (run under mpiexec with 1, 2 and 3 ranks).

``import accord.torch`` registers the backend; one ``init_process_group("accord")``
per run, under a bare mpiexec (no MASTER_ADDR: the backend's env:// supplies
rank, world size and the store). Every op x reduce op x dtype is compared with
a reference that each rank computes from every rank's seeded input; then the
object collectives, async work and its futures, groups (subsets, members and
non-members, subgroups, two groups interleaved) and the errors: ranks that
disagree get torch's DistBackendError with accord's message and stay in step,
bad arguments raise ValueError, point-to-point is refused, and (in a job of its
own, at 1 rank) the group's timeout stops a job in which a rank skipped a
collective through accord's stall inspector.

On a torch without Python backends (before 2.1, Debian's 1.13) only the
refusal is tested: ``init_process_group("accord")`` names the torch needed.
"""

import faulthandler
import os
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
import time
import warnings
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

import accord
import accord.torch as hvd
from accord.torch import process_group

from torch_helpers import Checker, dtype_name, rank_values, reference_reduce, tolerance

MODERN = process_group.backend_supported()
SIZE = int(os.environ.get("OMPI_COMM_WORLD_SIZE", "1"))

legacy_only = pytest.mark.skipif(
    MODERN, reason="the refusal is for a torch without Python backends (before 2.1)"
)
needs_two = pytest.mark.skipif(SIZE < 2, reason="needs two ranks")

R = dist.ReduceOp
DTYPES = [
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.int32,
    torch.int64,
    torch.uint8,
    torch.int8,
    torch.bool,
]
FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
BITWISE_DTYPES = [torch.uint8, torch.int8, torch.int32, torch.int64, torch.bool]
HVD_OP = {R.SUM: hvd.Sum, R.AVG: hvd.Average, R.MIN: hvd.Min, R.MAX: hvd.Max, R.PRODUCT: hvd.Product}
BITWISE = {R.BAND: torch.bitwise_and, R.BOR: torch.bitwise_or, R.BXOR: torch.bitwise_xor}


# ------------------------------------------------------------------ session


@pytest.fixture(scope="session")
def world():
    """The default group, made once: init_process_group("accord") under a bare mpiexec."""
    bare = "MASTER_ADDR" not in os.environ
    dist.init_process_group("accord")
    yield bare
    faulthandler.dump_traceback_later(60, exit=True)  # the closing barrier is watched too
    if accord.is_initialized():
        dist.barrier()
    dist.destroy_process_group()
    accord.shutdown()
    faulthandler.cancel_dump_traceback_later()


@pytest.fixture(autouse=True)
def _backend(request):
    """Every test but the refusal runs on torch 2.1+ with the default group made."""
    if request.node.originalname == "test_refusal_names_the_torch_needed":
        yield
        return
    if not MODERN:
        pytest.skip(f"torch {torch.__version__} has no Python backends (needs 2.1)")
    request.getfixturevalue("world")
    yield


def me() -> int:
    return dist.get_rank()


class Check(Checker):
    """torch_helpers' Checker, comparing complex tensors as (real, imaginary) pairs."""

    def values(self, what, got, expected, rel_tolerance=0.0):
        if isinstance(got, torch.Tensor) and got.is_complex() and expected.is_complex():
            got, expected = torch.view_as_real(got), torch.view_as_real(expected)
        super().values(what, got, expected, rel_tolerance)


def inputs(key, shape, dtype, kind="small", ranks=None):
    """Every rank's input for ``key`` (global ranks ``ranks``, all by default), in order."""
    ranks = range(dist.get_world_size()) if ranks is None else ranks
    if dtype == torch.complex64:
        return [
            torch.complex(
                rank_values(key + "/re", r, shape, torch.float32),
                rank_values(key + "/im", r, shape, torch.float32),
            )
            for r in ranks
        ]
    return [rank_values(key, r, shape, dtype, kind) for r in ranks]


def expected_reduce(values, op, dtype, factor=1.0):
    """torch op ``op`` over ``values`` (one tensor per rank)."""
    if op in BITWISE:
        acc = values[0].clone()
        for v in values[1:]:
            acc = BITWISE[op](acc, v)
        return acc
    if dtype == torch.complex64:
        assert op == R.SUM
        return torch.stack(values).sum(0)
    return reference_reduce(values, HVD_OP.get(op, hvd.Sum), prescale=factor)


def tol(dtype, op=None):
    """Relative tolerance: exact unless the result needs rounding (AVG, half types' scaling)."""
    if dtype == torch.complex64:
        return 1e-6
    if op in (R.AVG, "premul") or dtype in (torch.float16, torch.bfloat16):
        return tolerance(dtype)
    return 0.0


def op_name(op) -> str:
    return str(getattr(op, "op", op)).split(".")[-1]


def reduce_cases():
    """(op, dtype, factor) for every reduce op x the dtypes torch allows it on."""
    for dtype in DTYPES:
        yield R.SUM, dtype, None
        yield R.MIN, dtype, None
        yield R.MAX, dtype, None
        yield R.PRODUCT, dtype, None
    for dtype in FLOATS:
        yield R.AVG, dtype, None
        yield R.PREMUL_SUM, dtype, 0.5
    for dtype in BITWISE_DTYPES:
        for op in BITWISE:
            yield op, dtype, None
    yield R.SUM, torch.complex64, None


def torch_op(op, factor):
    if op == R.PREMUL_SUM:
        return dist._make_nccl_premul_sum(factor)
    return op


# ---------------------------------------------------------------- refusal


@legacy_only
def test_refusal_names_the_torch_needed(monkeypatch):
    """torch < 2.1: both a given store and env:// reach the backend, which refuses."""
    import socket

    with pytest.raises(RuntimeError, match=r"needs torch 2\.1 or newer") as caught:
        dist.init_process_group("accord", store=dist.HashStore(), rank=0, world_size=1)
    assert torch.__version__ in str(caught.value), str(caught.value)
    assert not dist.is_initialized()

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for var, value in (
        ("MASTER_ADDR", "127.0.0.1"),
        ("MASTER_PORT", str(port)),
        ("RANK", "0"),
        ("WORLD_SIZE", "1"),
    ):
        monkeypatch.setenv(var, value)
    with pytest.raises(RuntimeError, match=r"init_process_group\('accord'\) needs torch 2\.1 or newer"):
        dist.init_process_group("accord", init_method="env://")
    assert not dist.is_initialized()


# ------------------------------------------------------------------ basics


def test_backend_rank_size_and_store(request):
    check = Check()
    check.true(dist.is_initialized(), "not initialized")
    check.true(dist.get_backend() == "accord", f"get_backend() {dist.get_backend()!r}")
    check.true(
        dist.get_rank() == accord.rank(), f"get_rank() {dist.get_rank()} != accord.rank() {accord.rank()}"
    )
    check.true(
        dist.get_world_size() == accord.size() == SIZE,
        f"get_world_size() {dist.get_world_size()}, accord.size() {accord.size()}, launched {SIZE}",
    )
    pg = dist.distributed_c10d._get_default_group()
    check.true(pg.rank() == me() and pg.size() == SIZE, f"default group {pg.rank()} of {pg.size()}")
    check.true(
        isinstance(pg, hvd._process_group.AccordProcessGroup), f"default group is a {type(pg).__name__}"
    )
    check.true(pg.getBackendName() == "accord", f"getBackendName() {pg.getBackendName()!r}")
    # The store (the backend's TCPStore under a bare mpiexec) is shared by every rank.
    store = dist.distributed_c10d._get_default_store()
    store.set(f"hello/{me()}", f"rank {me()}")
    dist.barrier()
    for r in range(SIZE):
        got = store.get(f"hello/{r}").decode()
        check.true(got == f"rank {r}", f"store: rank {r}'s key holds {got!r}")
    check.check()
    bare = request.getfixturevalue("world")
    assert bare, "MASTER_ADDR was set: the bare-mpiexec env:// path was not tested"


def test_wrong_rank_or_world_size_is_refused():
    """Both ways torch hands rank and world size to accord refuse values the launch contradicts."""
    wrong_rank = (me() + 1) % (SIZE + 1)
    with pytest.raises(ValueError, match=r"takes rank from the launch"):
        next(dist.rendezvous("env://", rank=wrong_rank, world_size=SIZE))
    with pytest.raises(ValueError, match=r"takes world_size from the launch"):
        next(dist.rendezvous("env://", rank=me(), world_size=SIZE + 1))
    creator = dist.Backend._plugins["ACCORD"].creator_fn
    for rank, size in ((wrong_rank, SIZE), (me(), SIZE + 1)):
        options = dist.distributed_c10d._DistributedBackendOptions()
        options.store = dist.distributed_c10d._get_default_store()
        options.group_rank = rank
        options.group_size = size
        options.global_ranks_in_group = []
        options.group_id = "wrong"
        options.timeout = timedelta(seconds=30)
        with pytest.raises(
            ValueError, match=rf"was given rank {rank} and world_size {size}.*rank {me()} of {SIZE}"
        ):
            creator(options)
    # The session's group still works.
    t = torch.ones(2)
    dist.all_reduce(t)
    assert t.tolist() == [SIZE, SIZE]


# ------------------------------------------------------------- all_reduce


def test_all_reduce_every_op_and_dtype():
    check = Check()
    for op, dtype, factor in reduce_cases():
        kind = "product" if op == R.PRODUCT else "small"
        key = f"all_reduce/{op_name(op)}/{dtype_name(dtype)}"
        values = inputs(key, (4, 3), dtype, kind)
        t = values[me()].clone()
        assert dist.all_reduce(t, op=torch_op(op, factor)) is None
        expected = expected_reduce(values, op, dtype, factor or 1.0)
        check.values(f"all_reduce {op_name(op)}", t, expected, tol(dtype, "premul" if factor else op))
    # A tensor factor for PREMUL_SUM, and non-contiguous tensors (a transpose, a strided slice).
    values = inputs("premul_tensor", (5,), torch.float64)
    t = values[me()].clone()
    dist.all_reduce(t, op=dist._make_nccl_premul_sum(torch.tensor([0.25], dtype=torch.float64)))
    check.values(
        "all_reduce PREMUL_SUM (tensor factor)", t, reference_reduce(values, hvd.Sum, prescale=0.25), 1e-14
    )
    values = inputs("noncontiguous", (3, 4), torch.int64)
    base = values[me()].clone()
    t = base.t()
    dist.all_reduce(t, op=R.MAX)
    check.values("all_reduce MAX (transposed)", base, reference_reduce(values, hvd.Max))
    values = inputs("strided", (10,), torch.float32)
    base = values[me()].clone()
    dist.all_reduce(base[::2])
    expected = values[me()].clone()
    expected[::2] = reference_reduce([v[::2] for v in values], hvd.Sum)
    check.values("all_reduce SUM (every other element; the rest untouched)", base, expected)
    check.check()


def test_all_reduce_coalesced():
    check = Check()
    shapes = [(3,), (2, 2), (1,)]
    values = [inputs(f"coalesced/{i}", shape, torch.float32) for i, shape in enumerate(shapes)]
    mine_ = [v[me()].clone() for v in values]
    dist.all_reduce_coalesced(mine_, op=R.SUM)
    for i, (got, v) in enumerate(zip(mine_, values)):
        check.values(f"all_reduce_coalesced SUM [{i}]", got, reference_reduce(v, hvd.Sum))
    values = [inputs(f"coalesced_max/{i}", shape, torch.int64) for i, shape in enumerate(shapes)]
    mine_ = [v[me()].clone() for v in values]
    work = dist.all_reduce_coalesced(mine_, op=R.MAX, async_op=True)
    work.wait()
    for i, (got, v) in enumerate(zip(mine_, values)):
        check.values(f"all_reduce_coalesced MAX async [{i}]", got, reference_reduce(v, hvd.Max))
    check.check()


# -------------------------------------------------------------- broadcast


def test_broadcast_every_root_and_dtype():
    check = Check()
    for root in range(SIZE):
        for dtype in DTYPES + [torch.complex64]:
            values = inputs(f"broadcast/{root}/{dtype_name(dtype)}", (3, 2), dtype)
            t = values[me()].clone()
            dist.broadcast(t, src=root)
            check.values(f"broadcast from {root}", t, values[root], tol(dtype))
        # Non-contiguous: a transposed view is written through.
        values = inputs(f"broadcast_t/{root}", (2, 5), torch.float64)
        base = values[me()].clone()
        dist.broadcast(base.t(), src=root)
        check.values(f"broadcast from {root} (transposed)", base, values[root])
    check.check()


# ------------------------------------------------------------- all_gather


def test_all_gather_and_all_gather_into_tensor():
    check = Check()
    for dtype in DTYPES + [torch.complex64]:
        values = inputs(f"all_gather/{dtype_name(dtype)}", (2, 3), dtype)
        outputs = [torch.zeros_like(values[0]) for _ in range(SIZE)]
        dist.all_gather(outputs, values[me()])
        for r in range(SIZE):
            check.values(f"all_gather [{r}]", outputs[r], values[r], tol(dtype))
        if dtype == torch.complex64:
            continue
        flat = torch.zeros(SIZE * 2, 3, dtype=dtype)
        dist.all_gather_into_tensor(flat, values[me()])
        check.values("all_gather_into_tensor (concatenated)", flat, torch.cat(values))
        stacked = torch.zeros(SIZE, 2, 3, dtype=dtype)
        dist.all_gather_into_tensor(stacked, values[me()])
        check.values("all_gather_into_tensor (stacked)", stacked, torch.stack(values))
    # Uneven sizes in the list form, and a non-contiguous input.
    values = [rank_values("all_gather_uneven", r, (r + 1, 2), torch.int32) for r in range(SIZE)]
    outputs = [torch.zeros(r + 1, 2, dtype=torch.int32) for r in range(SIZE)]
    dist.all_gather(outputs, values[me()])
    for r in range(SIZE):
        check.values(f"all_gather uneven [{r}]", outputs[r], values[r])
    values = inputs("all_gather_t", (3, 2), torch.float32)
    outputs = [torch.zeros(2, 3) for _ in range(SIZE)]
    dist.all_gather(outputs, values[me()].t())
    for r in range(SIZE):
        check.values(f"all_gather transposed input [{r}]", outputs[r], values[r].t())
    check.check()


# --------------------------------------------------------- reduce_scatter


def test_reduce_scatter_list_and_tensor():
    check = Check()
    cases = [
        (op, dtype) for op, dtype, factor in reduce_cases() if factor is None and dtype != torch.complex64
    ]
    cases.append((R.PREMUL_SUM, torch.float32))
    for op, dtype in cases:
        factor = 2.0 if op == R.PREMUL_SUM else 1.0
        kind = "product" if op == R.PRODUCT else "small"
        key = f"reduce_scatter/{op_name(op)}/{dtype_name(dtype)}"
        # Each rank's input: SIZE pieces of 3 elements; rank r gets the reduction of piece r.
        values = inputs(key, (SIZE, 3), dtype, kind)
        expected = expected_reduce(values, op, dtype, factor)[me()]
        what = f"{op_name(op)} {dtype_name(dtype)}"
        out = torch.zeros(3, dtype=dtype)
        dist.reduce_scatter(out, list(values[me()].clone().unbind(0)), op=torch_op(op, factor))
        check.values(f"reduce_scatter (list) {what}", out, expected, tol(dtype, op))
        out = torch.zeros(3, dtype=dtype)
        dist.reduce_scatter_tensor(out, values[me()].clone().reshape(-1), op=torch_op(op, factor))
        check.values(f"reduce_scatter_tensor {what}", out, expected, tol(dtype, op))
    # The stacked form of reduce_scatter_tensor: input (SIZE, 2, 2), output (2, 2).
    values = inputs("reduce_scatter_stacked", (SIZE, 2, 2), torch.float64)
    out = torch.zeros(2, 2, dtype=torch.float64)
    dist.reduce_scatter_tensor(out, values[me()].clone(), op=R.AVG)
    check.values("reduce_scatter_tensor stacked AVG", out, reference_reduce(values, hvd.Average)[me()], 1e-14)
    check.check()


# -------------------------------------------------------------- all_to_all


def test_all_to_all_lists_uneven():
    """Rank s sends s + d + 1 rows of 2 to rank d."""
    check = Check()
    for dtype in (torch.float32, torch.int64, torch.bfloat16, torch.bool):
        key = f"all_to_all/{dtype_name(dtype)}"
        sent = [rank_values(f"{key}/{me()}->{d}", me(), (me() + d + 1, 2), dtype) for d in range(SIZE)]
        outputs = [torch.zeros(s + me() + 1, 2, dtype=dtype) for s in range(SIZE)]
        dist.all_to_all(outputs, sent)
        for s in range(SIZE):
            expected = rank_values(f"{key}/{s}->{me()}", s, (s + me() + 1, 2), dtype)
            check.values(f"all_to_all {dtype_name(dtype)} from {s}", outputs[s], expected)
    check.check()


def test_all_to_all_single_even_and_split():
    check = Check()
    for dtype in (torch.float64, torch.int8, torch.float16):
        values = inputs(f"a2a_single/{dtype_name(dtype)}", (SIZE * 2, 3), dtype)
        out = torch.zeros(SIZE * 2, 3, dtype=dtype)
        dist.all_to_all_single(out, values[me()])
        expected = torch.cat([values[s][2 * me() : 2 * me() + 2] for s in range(SIZE)])
        check.values(f"all_to_all_single even {dtype_name(dtype)}", out, expected)
    # Rank s sends s + d + 1 rows to rank d.
    splits = [[s + d + 1 for d in range(SIZE)] for s in range(SIZE)]
    values = [rank_values("a2a_split", s, (sum(splits[s]), 2), torch.int32) for s in range(SIZE)]
    out = torch.zeros(sum(splits[s][me()] for s in range(SIZE)), 2, dtype=torch.int32)
    dist.all_to_all_single(
        out,
        values[me()],
        output_split_sizes=[splits[s][me()] for s in range(SIZE)],
        input_split_sizes=splits[me()],
    )
    pieces = []
    for s in range(SIZE):
        start = sum(splits[s][: me()])
        pieces.append(values[s][start : start + splits[s][me()]])
    check.values("all_to_all_single with split sizes", out, torch.cat(pieces))
    check.check()


# ------------------------------------------------------- barrier and async


def test_barrier_waits_for_every_rank():
    """Rank 0 writes a store key late, then enters the barrier; every rank finds it after."""
    store = dist.distributed_c10d._get_default_store()
    if me() == 0:
        time.sleep(0.3)
        store.set("barrier/late", "here")
    dist.barrier()
    assert store.check(["barrier/late"]), f"rank {me()}: left the barrier before rank 0 entered it"
    work = dist.barrier(async_op=True)
    assert work.wait()
    assert work.is_completed()


def test_async_work_and_futures():
    check = Check()
    values = inputs("async", (6,), torch.float32)
    t = values[me()].clone()
    store = dist.distributed_c10d._get_default_store()
    if me() == 0 and SIZE > 1:
        # The others submit first: their work cannot be complete before rank 0 submits.
        store.wait(["async/submitted"], timedelta(seconds=30))
        time.sleep(0.1)
    work = dist.all_reduce(t, async_op=True)
    if me() == SIZE - 1 and SIZE > 1:
        check.true(not work.is_completed(), "all_reduce work completed before rank 0 submitted")
        store.set("async/submitted", "1")
    check.true(work.wait() is True, "wait() is not True")
    check.true(work.is_completed(), "is_completed() is False after wait()")
    expected = reference_reduce(values, hvd.Sum)
    check.values("all_reduce async (in place)", t, expected)
    fut = work.get_future()
    value = fut.wait()
    check.true(isinstance(value, list) and len(value) == 1, f"future value {value!r}")
    check.values("future value", value[0], expected)
    chained = fut.then(lambda f: f.value()[0] * 2).then(lambda f: f.value() + 1)
    check.values("then-chain", chained.wait(), expected * 2 + 1)

    # A future's then-chain before completion, and several outstanding works waited out of order.
    b_values = inputs("async_b", (3, 2), torch.int64)
    g_values = inputs("async_g", (4,), torch.float64)
    a = inputs("async_a", (5,), torch.int32)[me()].clone()
    b = b_values[me()].clone()
    gathered = [torch.zeros(4, dtype=torch.float64) for _ in range(SIZE)]
    w1 = dist.all_reduce(a, op=R.MIN, async_op=True)
    doubled = w1.get_future().then(lambda f: f.value()[0] * 2)
    w2 = dist.broadcast(b, src=SIZE - 1, async_op=True)
    w3 = dist.all_gather(gathered, g_values[me()], async_op=True)
    w3.wait()
    w2.wait()
    w1.wait()
    min_expected = reference_reduce(inputs("async_a", (5,), torch.int32), hvd.Min)
    check.values("all_reduce MIN async", a, min_expected)
    check.values("then on a pending future", doubled.wait(), min_expected * 2)
    check.values("broadcast async", b, b_values[SIZE - 1])
    for r in range(SIZE):
        check.values(f"all_gather async [{r}]", gathered[r], g_values[r])
    check.check()


# ----------------------------------------------------- reduce, gather, scatter


def test_reduce_every_root():
    check = Check()
    for root in range(SIZE):
        for op, dtype in (
            (R.SUM, torch.float32),
            (R.MAX, torch.int64),
            (R.PRODUCT, torch.int8),
            (R.MIN, torch.bool),
        ):
            kind = "product" if op == R.PRODUCT else "small"
            values = inputs(f"reduce/{root}/{op_name(op)}", (2, 3), dtype, kind)
            t = values[me()].clone()
            dist.reduce(t, dst=root, op=op)
            if me() == root:
                check.values(f"reduce {op_name(op)} to {root}", t, expected_reduce(values, op, dtype))
            else:
                check.values(f"reduce {op_name(op)} to {root}: a non-root's tensor", t, values[me()])
    check.check()


def test_gather_and_scatter_every_root():
    check = Check()
    for root in range(SIZE):
        for dtype in (torch.float32, torch.bfloat16, torch.uint8, torch.bool, torch.complex64):
            values = inputs(f"gather/{root}/{dtype_name(dtype)}", (2, 2), dtype)
            out = [torch.zeros_like(values[0]) for _ in range(SIZE)] if me() == root else None
            dist.gather(values[me()], gather_list=out, dst=root)
            if me() == root:
                for r in range(SIZE):
                    check.values(f"gather to {root} [{r}]", out[r], values[r], tol(dtype))
        for dtype in (torch.float64, torch.int32, torch.float16):
            pieces = inputs(f"scatter/{root}/{dtype_name(dtype)}", (SIZE, 3), dtype)[root]
            out = torch.zeros(3, dtype=dtype)
            dist.scatter(out, scatter_list=list(pieces.unbind(0)) if me() == root else None, src=root)
            check.values(f"scatter from {root}", out, pieces[me()])
    check.check()


# --------------------------------------------------------- object collectives


def obj(rank, tag):
    return {"rank": rank, "tag": tag, "payload": list(range(rank * 3)), "text": "x" * (rank + 1)}


def test_object_collectives():
    check = Check()
    out = [None] * SIZE
    dist.all_gather_object(out, obj(me(), "ago"))
    check.true(out == [obj(r, "ago") for r in range(SIZE)], f"all_gather_object {out}")
    for root in range(SIZE):
        objects = [obj(me(), "bol"), ("tuple", me())]
        dist.broadcast_object_list(objects, src=root)
        check.true(
            objects == [obj(root, "bol"), ("tuple", root)], f"broadcast_object_list from {root}: {objects}"
        )
        gathered = [None] * SIZE if me() == root else None
        dist.gather_object(obj(me(), "go"), gathered, dst=root)
        if me() == root:
            check.true(
                gathered == [obj(r, "go") for r in range(SIZE)], f"gather_object to {root}: {gathered}"
            )
        received = [None]
        sources = [obj(r + 100 * root, "sol") for r in range(SIZE)] if me() == root else None
        dist.scatter_object_list(received, sources, src=root)
        check.true(
            received == [obj(me() + 100 * root, "sol")], f"scatter_object_list from {root}: {received}"
        )
    check.check()


# ------------------------------------------------------------------ groups


def subset():
    """The subset group's global ranks: [0, 2] at 3 ranks, [1] at 2, [0] at 1."""
    return {1: [0], 2: [1]}.get(SIZE, [0, 2])


def test_group_of_a_subset():
    ranks = subset()
    group = dist.new_group(ranks)
    check = Check()
    member = me() in ranks
    check.true(
        dist.get_rank(group) == (ranks.index(me()) if member else -1),
        f"get_rank(group) {dist.get_rank(group)}",
    )
    if member:
        check.true(
            dist.get_world_size(group) == len(ranks), f"get_world_size(group) {dist.get_world_size(group)}"
        )
        check.true(dist.get_backend(group) == "accord", f"get_backend(group) {dist.get_backend(group)!r}")
        check.true(
            [dist.get_global_rank(group, i) for i in range(len(ranks))] == ranks, "get_global_rank mapping"
        )
        values = inputs("group/all_reduce", (4,), torch.float32, ranks=ranks)
        t = values[ranks.index(me())].clone()
        dist.all_reduce(t, group=group)
        check.values("group all_reduce", t, reference_reduce(values, hvd.Sum))
        # broadcast's src is a global rank; group_src a group rank.
        last = ranks[-1]
        values = inputs("group/broadcast", (3,), torch.int64, ranks=ranks)
        t = values[ranks.index(me())].clone()
        dist.broadcast(t, src=last, group=group)
        check.values(f"group broadcast src={last} (global)", t, values[-1])
        t = values[ranks.index(me())].clone()
        dist.broadcast(t, group=group, group_src=0)
        check.values("group broadcast group_src=0", t, values[0])
        gathered = [torch.zeros(3, dtype=torch.int64) for _ in ranks]
        dist.all_gather(gathered, values[ranks.index(me())], group=group)
        for i in range(len(ranks)):
            check.values(f"group all_gather [{i}]", gathered[i], values[i])
        values = inputs("group/reduce", (2,), torch.float64, ranks=ranks)
        t = values[ranks.index(me())].clone()
        dist.reduce(t, dst=last, group=group, op=R.MAX)
        expected = reference_reduce(values, hvd.Max) if me() == last else values[ranks.index(me())]
        check.values(f"group reduce dst={last} (global)", t, expected)
        out = [None] * len(ranks)
        dist.all_gather_object(out, ("member", me()), group=group)
        check.true(out == [("member", r) for r in ranks], f"group all_gather_object {out}")
    else:
        check.true(
            dist.get_world_size(group) == -1, f"non-member get_world_size(group) {dist.get_world_size(group)}"
        )
        t = torch.full((4,), 7.0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            check.true(dist.all_reduce(t, group=group) is None, "non-member all_reduce did not return None")
            check.true(dist.broadcast(t, src=ranks[0], group=group) is None, "non-member broadcast")
            check.true(dist.all_reduce(t, group=group, async_op=True) is None, "non-member async all_reduce")
            check.true(dist.barrier(group=group) is None, "non-member barrier")
        check.values("non-member's tensor untouched", t, torch.full((4,), 7.0))
    # The world group still lines up afterwards, on members and non-members.
    t = torch.ones(1)
    dist.all_reduce(t)
    check.true(t.item() == SIZE, f"world all_reduce after the group: {t.item()}")
    check.check()


def test_new_subgroups():
    check = Check()
    size = 2 if SIZE % 2 == 0 else 1
    mine_group, groups = dist.new_subgroups(group_size=size)
    first = me() - me() % size
    members = list(range(first, first + size))
    check.true(len(groups) == SIZE // size, f"new_subgroups made {len(groups)} groups")
    check.true(dist.get_rank(mine_group) == me() % size, f"subgroup rank {dist.get_rank(mine_group)}")
    values = inputs("subgroups", (3,), torch.int32, ranks=members)
    t = values[members.index(me())].clone()
    dist.all_reduce(t, group=mine_group)
    check.values(f"new_subgroups({size}) all_reduce", t, reference_reduce(values, hvd.Sum))
    # Uneven subgroups by enumeration: [[0, 2], [1]] at 3 ranks.
    lists = {1: [[0]], 2: [[1], [0]], 3: [[0, 2], [1]]}[SIZE]
    mine_group, _ = dist.new_subgroups_by_enumeration(lists)
    members = next(ranks for ranks in lists if me() in ranks)
    values = inputs("subgroups_enum", (2, 2), torch.float64, ranks=members)
    t = values[members.index(me())].clone()
    dist.all_reduce(t, op=R.MAX, group=mine_group)
    check.values(
        f"new_subgroups_by_enumeration {members} all_reduce MAX", t, reference_reduce(values, hvd.Max)
    )
    check.check()


def test_two_groups_interleaved():
    """Async ops on two overlapping groups and the world, submitted interleaved, waited out of order."""
    check = Check()
    a_ranks = subset()
    b_ranks = list(range(SIZE))[::-1][: max(1, SIZE - 1)]  # [2, 1] at 3 ranks
    b_ranks.sort()
    group_a = dist.new_group(a_ranks)
    group_b = dist.new_group(b_ranks)
    works = []
    results = []
    for i in range(3):
        if me() in a_ranks:
            values = inputs(f"interleaved/a/{i}", (5,), torch.float32, ranks=a_ranks)
            t = values[a_ranks.index(me())].clone()
            works.append(dist.all_reduce(t, group=group_a, async_op=True))
            results.append((f"group a #{i}", t, reference_reduce(values, hvd.Sum)))
        values = inputs(f"interleaved/w/{i}", (3,), torch.int64)
        t = values[me()].clone()
        works.append(dist.all_reduce(t, op=R.MAX, async_op=True))
        results.append((f"world #{i}", t, reference_reduce(values, hvd.Max)))
        if me() in b_ranks:
            values = inputs(f"interleaved/b/{i}", (4,), torch.int32, ranks=b_ranks)
            t = values[b_ranks.index(me())].clone()
            works.append(dist.broadcast(t, src=b_ranks[-1], group=group_b, async_op=True))
            results.append((f"group b #{i}", t, values[-1]))
    for work in reversed(works):
        work.wait()
    for what, got, expected in results:
        check.values(what, got, expected)
    check.check()


# ------------------------------------------------------------------ errors


@needs_two
def test_ranks_that_disagree_fail_on_every_rank_and_stay_in_step():
    t = torch.ones(me() + 1)
    with pytest.raises(dist.DistBackendError) as caught:
        dist.all_reduce(t)
    message = str(caught.value)
    assert isinstance(caught.value, RuntimeError)
    assert "accord" in message.lower() and "shape" in message.lower(), message
    # Async: the error comes from wait() and from the future.
    t = torch.ones(2, dtype=torch.float32 if me() == 0 else torch.float64)
    work = dist.all_reduce(t, async_op=True)
    with pytest.raises(dist.DistBackendError, match=r"(?i)type"):
        work.wait()
    with pytest.raises(RuntimeError):
        work.get_future().wait()
    # The next collectives line up.
    values = inputs("after_error", (3,), torch.float32)
    t = values[me()].clone()
    dist.all_reduce(t)
    check = Check()
    check.values("all_reduce after errors", t, reference_reduce(values, hvd.Sum))
    check.check()
    out = [None] * SIZE
    dist.all_gather_object(out, me())
    assert out == list(range(SIZE))


def test_works_never_waited_still_complete():
    """Operations nobody waits on are held back from the completion thread (a plain wait finishes
    its own): they still complete when polled, when a later one is waited, and past the limit."""
    held = [torch.full((3,), float(me() + i)) for i in range(40)]  # more than the completer holds
    works = [dist.all_reduce(t, async_op=True) for t in held]
    x = torch.ones(1)
    dist.all_reduce(x)
    assert x.item() == SIZE
    deadline = time.monotonic() + 30
    while not all(w.is_completed() for w in works):
        assert time.monotonic() < deadline, [w.is_completed() for w in works]
        time.sleep(0.001)
    for i, t in enumerate(held):
        assert t.tolist() == [float(sum(range(SIZE)) + SIZE * i)] * 3, (i, t)
    first = dist.all_reduce(torch.ones(2), async_op=True)
    second = dist.all_reduce(torch.full((2,), 2.0), async_op=True)
    second.wait()
    assert first.get_future().wait()[0].tolist() == [float(SIZE)] * 2


def test_repeated_all_reduces_take_the_response_cache_and_still_report_mismatches():
    """A loop of like allreduces gets names that repeat (process_group._CycleNames), so accord's
    response cache answers them; a rank that then submits another shape under such a name meets
    the others under it and every rank gets accord's mismatch, and the loop goes on."""
    group = dist.new_group(list(range(SIZE)))  # its own count of allreduces
    names = group._names
    hits_before = hvd.metrics()["cache_hits"]
    for step in range(3 * names.WINDOW + 8):
        t = torch.full((5,), float(me() + step))
        dist.all_reduce(t, group=group)
        assert t.tolist() == [float(sum(range(SIZE)) + SIZE * step)] * 5, (step, t)
    assert names.slots == names.MIN_SLOTS, names.slots  # a period of 1: K = MIN_SLOTS names
    hits = hvd.metrics()["cache_hits"] - hits_before
    assert hits >= names.WINDOW, f"only {hits} cache hits over {3 * names.WINDOW + 8} named allreduces"
    if SIZE > 1:
        t = torch.ones(5 + me())
        with pytest.raises(dist.DistBackendError, match=r"(?i)shape"):
            dist.all_reduce(t, group=group)
    for step in range(names.WINDOW):
        t = torch.full((5,), float(me() - step))
        dist.all_reduce(t, group=group)
        assert t.tolist() == [float(sum(range(SIZE)) - SIZE * step)] * 5, (step, t)


def test_bad_arguments_raise_value_error():
    """Every rank makes the same bad call: refused before anything is sent, so nothing gets out of step."""
    with pytest.raises(ValueError, match="output list has"):
        dist.all_gather([torch.zeros(2) for _ in range(SIZE + 1)], torch.zeros(2))
    with pytest.raises(ValueError, match="input_split_sizes"):
        dist.all_to_all_single(
            torch.zeros(SIZE + 1), torch.zeros(SIZE + 1), input_split_sizes=[1] * (SIZE + 1)
        )
    with pytest.raises(ValueError, match="output_split_sizes"):
        dist.all_to_all_single(torch.zeros(SIZE), torch.zeros(SIZE), output_split_sizes=[2] * SIZE)
    with pytest.raises(ValueError, match="expected"):
        dist.reduce_scatter_tensor(torch.zeros(2), torch.zeros(2 * SIZE + 1))
    with pytest.raises(ValueError, match="expected"):
        dist.all_gather_into_tensor(torch.zeros(2 * SIZE + 1), torch.zeros(2))
    with pytest.raises(ValueError):
        dist.all_to_all([torch.zeros(1)] * SIZE, [torch.zeros(1)] * (SIZE + 1))
    with pytest.raises(ValueError):
        dist.broadcast(torch.zeros(2), src=SIZE)
    with pytest.raises(ValueError):
        dist.reduce(torch.zeros(2), dst=SIZE)
    with pytest.raises((ValueError, TypeError), match="bitwise"):
        dist.all_reduce(torch.zeros(2), op=R.BAND)
    # Still in step.
    t = torch.ones(2)
    dist.all_reduce(t)
    assert t.tolist() == [SIZE, SIZE]


def test_point_to_point_is_refused():
    t = torch.zeros(2)
    pg = dist.distributed_c10d._get_default_group()
    with pytest.raises(NotImplementedError, match="point-to-point"):
        pg.send([t], 0, 0)
    with pytest.raises(NotImplementedError, match="point-to-point"):
        pg.recv([t], 0, 0)
    if SIZE > 1:
        peer = (me() + 1) % SIZE
        with pytest.raises(NotImplementedError, match="point-to-point"):
            dist.send(t, dst=peer)
        with pytest.raises(NotImplementedError, match="point-to-point"):
            dist.recv(t, src=peer)
        with pytest.raises(NotImplementedError, match="point-to-point"):
            dist.isend(t, dst=peer)
        with pytest.raises(NotImplementedError, match="point-to-point"):
            dist.irecv(t, src=peer)
    t = torch.ones(1)
    dist.all_reduce(t)
    assert t.item() == SIZE


TIMEOUT_SCRIPT = """
import sys, time
from datetime import timedelta
import torch
import torch.distributed as dist
import accord.torch

dist.init_process_group("accord", timeout=timedelta(seconds=3))
rank = dist.get_rank()
t = torch.ones(4)
dist.all_reduce(t)
assert t.tolist() == [2.0] * 4, t
start = time.monotonic()
try:
    if rank == 0:
        dist.all_reduce(t)  # rank 1 skips it
    else:
        dist.all_gather_object([None, None], "rank 1 went on")
except dist.DistBackendError as error:
    text = str(error).replace("\\n", " ")
    line = f"RANK {rank} DistBackendError after {time.monotonic() - start:.1f} s: {text}\\n"
else:
    line = f"RANK {rank} no error\\n"
# One write: both ranks report at the same moment, and print() writes the
# text and its newline separately when stdout is unbuffered.
sys.stdout.write(line)
sys.stdout.flush()
"""


@pytest.mark.skipif(SIZE != 1, reason="starts its own 2-rank job: run at 1 rank only")
@pytest.mark.watchdog_seconds(120)
def test_timeout_stops_every_rank_through_the_stall_inspector(tmp_path):
    mpiexec = shutil.which("mpiexec") or shutil.which("mpirun")
    if mpiexec is None:
        pytest.skip("no mpiexec")
    script = tmp_path / "skip_one.py"
    script.write_text(textwrap.dedent(TIMEOUT_SCRIPT))
    # A job of its own: none of the variables this rank's launch set, but the
    # user's OMPI_ settings (run as root, oversubscribe, the session directory).
    launch = (
        "PMIX_",
        "OMPI_COMM_WORLD",
        "OMPI_MCA_ess",
        "OMPI_MCA_pmix",
        "OMPI_MCA_orte_",
        "OMPI_FIRST_RANKS",
    )
    launch_vars = {
        "OMPI_UNIVERSE_SIZE",
        "OMPI_APP_CTX_NUM_PROCS",
        "OMPI_ARGV",
        "OMPI_COMMAND",
        "OMPI_NUM_APP_CTX",
    }
    launch_vars |= {"OMPI_FILE_LOCATION", "OMPI_MCA_initial_wdir", "OMPI_MCA_shmem_RUNTIME_QUERY_hint"}
    env = {
        k: v
        for k, v in os.environ.items()
        if k == "OMPI_MCA_orte_tmpdir_base" or not (k.startswith(launch) or k in launch_vars)
    }
    for var in ("ACCORD_STALL_SHUTDOWN_TIME_SECONDS", "ACCORD_STALL_CHECK_TIME_SECONDS"):
        env.pop(var, None)
    flags = shlex.split(os.environ.get("ACCORD_TEST_MPIEXEC_FLAGS", "--allow-run-as-root --oversubscribe"))
    command = ["timeout", "90", mpiexec, "-n", "2", *flags, "-x", "PYTHONPATH", sys.executable, str(script)]
    start = time.monotonic()
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=110)
    elapsed = time.monotonic() - start
    output = f"status {result.returncode} after {elapsed:.0f} s\n"
    output += f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    for rank in (0, 1):
        # A record starts at "RANK r ", wherever the launcher's merged output put it.
        records = re.split(r"(?=RANK \d )", result.stdout)
        lines = [r.strip() for r in records if r.startswith(f"RANK {rank} ")]
        assert len(lines) == 1 and "DistBackendError" in lines[0], output
        assert "stall inspector" in lines[0], output
    assert elapsed < 60, output
