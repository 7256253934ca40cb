"""accord.torch collectives across ranks (run under mpiexec with 1, 2 and 3 ranks).

Every collective x op x dtype on torch tensors, in place and out of place,
async with poll/synchronize, grouped, on process sets, with fp16 compression,
and the error cases: mismatched shapes and dtypes fail on every rank naming
the ranks, a duplicate name is refused, and calls after shutdown raise.
"""

import os
import time
import warnings

import pytest
import torch

import accord
import accord.torch as hvd

from torch_helpers import (
    ALL_DTYPES,
    ALL_OPS,
    OP_NAMES,
    Checker,
    dtype_name,
    rank_values,
    reference_reduce,
    tolerance,
)


@pytest.fixture(scope="module", autouse=True)
def initialized():
    hvd.init()
    yield


needs_two = pytest.mark.skipif(int(os.environ.get("OMPI_COMM_WORLD_SIZE", "1")) < 2, reason="needs two ranks")


def every_rank(key, shape, dtype, kind="small", ranks=None):
    """Every rank's input for ``key``, in rank order."""
    ranks = range(hvd.size()) if ranks is None else ranks
    return [rank_values(key, r, shape, dtype, kind) for r in ranks]


def supported(op, dtype):
    return not (dtype == torch.bool and op == hvd.Average)


def scalable(op, dtype):
    return dtype != torch.bool and op != hvd.Product


# ------------------------------------------------------------------ queries


def test_rank_queries_and_build_facts():
    check = Checker()
    check.true(hvd.is_initialized(), "is_initialized() is False after init()")
    env_size = os.environ.get("OMPI_COMM_WORLD_SIZE")
    env_rank = os.environ.get("OMPI_COMM_WORLD_RANK")
    if env_size is not None:
        check.true(hvd.size() == int(env_size), f"size() {hvd.size()} != {env_size}")
        check.true(hvd.rank() == int(env_rank), f"rank() {hvd.rank()} != {env_rank}")
    local_rank = os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK")
    if local_rank is not None:
        check.true(hvd.local_rank() == int(local_rank), f"local_rank() {hvd.local_rank()} != {local_rank}")
        check.true(
            hvd.local_size() == int(os.environ["OMPI_COMM_WORLD_LOCAL_SIZE"]),
            f"local_size() {hvd.local_size()}",
        )
    check.true(0 <= hvd.rank() < hvd.size(), f"rank {hvd.rank()} outside [0, {hvd.size()})")
    check.true(0 <= hvd.cross_rank() < hvd.cross_size(), "cross_rank outside [0, cross_size)")
    check.true(hvd.mpi_built() is True and hvd.mpi_enabled() is True, "MPI not reported")
    check.true(hvd.gloo_built() is False and hvd.gloo_enabled() is False, "gloo reported")
    # nccl_built() is Horovod's int: NCCL's version code, 0 without NCCL.
    nccl = hvd.nccl_built()
    info = accord.build_info()
    check.true(type(nccl) is int, f"nccl_built() is a {type(nccl).__name__}, not an int")
    check.true(bool(nccl) == info["nccl"], f"nccl_built() {nccl} but build_info()['nccl'] {info['nccl']}")
    if info["nccl"]:
        major, minor, patch = (int(p) for p in info["nccl_version"].split()[-1].split("."))
        check.true(
            nccl == major * 10000 + minor * 100 + patch, f"nccl_built() {nccl} for {info['nccl_version']}"
        )
    check.true(isinstance(hvd.cuda_built(), bool), "cuda_built() is not a bool")
    check.true(isinstance(hvd.mpi_threads_supported(), bool), "mpi_threads_supported() is not a bool")
    check.true(
        issubclass(hvd.HorovodInternalError, RuntimeError), "HorovodInternalError is not a RuntimeError"
    )
    check.true(
        issubclass(hvd.RequestError, ValueError) and issubclass(hvd.RequestError, RuntimeError),
        "RequestError is not both a ValueError and a RuntimeError",
    )
    check.check()


def test_nccl_version_codes_in_nccls_encoding():
    """Up to 2.8 NCCL's code is major*1000 + minor*100 + patch, from 2.9 on major*10000 + ..."""
    from accord.basics import _nccl_version_code

    for version, code in [
        ("NCCL 2.7.8", 2708),
        ("NCCL 2.8.4", 2804),
        ("NCCL 2.9.6", 20906),
        ("NCCL 2.18.3", 21803),
        ("NCCL 2.28.9", 22809),
    ]:
        assert _nccl_version_code(version) == code, f"{version}: {_nccl_version_code(version)}"


def test_horovod_names_exist():
    names = """init shutdown is_initialized size local_size cross_size rank local_rank cross_rank
        mpi_threads_supported mpi_enabled mpi_built gloo_enabled gloo_built nccl_built cuda_built
        allreduce allreduce_ allreduce_async allreduce_async_ grouped_allreduce grouped_allreduce_
        grouped_allreduce_async grouped_allreduce_async_ allgather allgather_async
        grouped_allgather grouped_allgather_async broadcast broadcast_ broadcast_async
        broadcast_async_ alltoall alltoall_async reducescatter reducescatter_async
        grouped_reducescatter grouped_reducescatter_async join barrier poll synchronize
        Average Sum Min Max Product Adasum Compression broadcast_object allgather_object
        ProcessSet global_process_set add_process_set remove_process_set sparse_allreduce_async
        start_timeline stop_timeline HorovodInternalError""".split()
    here = os.path.dirname(hvd.__file__)
    if os.path.exists(os.path.join(here, "optimizer.py")):
        names += ["DistributedOptimizer", "broadcast_parameters", "broadcast_optimizer_state"]
    if os.path.exists(os.path.join(here, "sync_batch_norm.py")):
        names += ["SyncBatchNorm"]
    missing = [n for n in names if not hasattr(hvd, n)]
    assert not missing, f"accord.torch lacks {missing}"
    assert hvd.Compression.none is not None and hvd.Compression.fp16 is not None


def test_timeline_and_metrics_are_the_core_ones():
    import accord

    assert hvd.start_timeline is accord.start_timeline
    assert hvd.stop_timeline is accord.stop_timeline
    assert hvd.metrics is accord.metrics
    assert set(hvd.metrics()) >= {"collectives", "tensors", "bytes", "negotiation_rounds"}


# ---------------------------------------------------------------- allreduce


def test_allreduce_every_op_and_dtype_in_and_out_of_place():
    cases = []
    index = 0
    for op in ALL_OPS:
        for dtype in ALL_DTYPES:
            if not supported(op, dtype):
                continue
            for in_place in (False, True):
                for scaled in (False, True):
                    if scaled and not scalable(op, dtype):
                        continue
                    key = f"ar.{OP_NAMES[op]}.{dtype_name(dtype)}.{in_place}.{scaled}"
                    shape = [1 + index % 13] if index % 2 else [1 + index % 5, 3, 2]
                    index += 1
                    kind = "product" if op == hvd.Product else "small"
                    pre, post = (2.0, 0.5) if scaled else (1.0, 1.0)
                    tensor = rank_values(key, hvd.rank(), shape, dtype, kind)
                    original = tensor.clone()
                    enqueue = hvd.allreduce_async_ if in_place else hvd.allreduce_async
                    handle = enqueue(tensor, name=key, op=op, prescale_factor=pre, postscale_factor=post)
                    cases.append((key, op, dtype, in_place, shape, kind, pre, post, tensor, original, handle))
    check = Checker()
    for key, op, dtype, in_place, shape, kind, pre, post, tensor, original, handle in cases:
        check.true(isinstance(handle, int), f"{key}: handle {handle!r} is not an int")
        result = hvd.synchronize(handle)
        expected = reference_reduce(every_rank(key, shape, dtype, kind), op, pre, post)
        rel = tolerance(dtype) if op == hvd.Average else 0.0
        check.values(key, result, expected, rel)
        if in_place:
            check.true(result is tensor, f"{key}: in-place synchronize did not return the input")
        else:
            check.values(key + " (input must be unchanged)", tensor, original)
    check.check()


def test_allreduce_sync_forms_and_defaults():
    check = Checker()
    shape = [4, 5]
    for dtype in (torch.float32, torch.int32, torch.bfloat16, torch.bool):
        key = f"arsync.{dtype_name(dtype)}"
        x = rank_values(key, hvd.rank(), shape, dtype)
        inputs = every_rank(key, shape, dtype)
        if dtype == torch.bool:  # bool has no Average
            check.values(
                key + " allreduce Sum",
                hvd.allreduce(x, name=key, op=hvd.Sum),
                reference_reduce(inputs, hvd.Sum),
            )
        else:  # the default op is Average
            check.values(
                key + " allreduce (default op)",
                hvd.allreduce(x, name=key),
                reference_reduce(inputs, hvd.Average),
                tolerance(dtype),
            )
        y = x.clone()
        returned = hvd.allreduce_(y, op=hvd.Max)
        check.true(returned is y, f"{key}: allreduce_ did not return its input")
        check.values(key + " allreduce_ Max", y, reference_reduce(inputs, hvd.Max))
    # Horovod's deprecated average flag.
    key = "arsync.average-flag"
    x = rank_values(key, hvd.rank(), [7], torch.float64)
    inputs = every_rank(key, [7], torch.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        check.values(
            key + " average=True",
            hvd.allreduce(x, average=True),
            reference_reduce(inputs, hvd.Average),
            tolerance(torch.float64),
        )
        check.values(
            key + " average=False", hvd.allreduce(x, average=False), reference_reduce(inputs, hvd.Sum)
        )
        with pytest.raises(ValueError, match="average"):
            hvd.allreduce(x, average=True, op=hvd.Sum)
    check.check()


def test_allreduce_non_contiguous_inputs():
    check = Checker()
    key = "ar.noncontig"
    base = rank_values(key, hvd.rank(), [6, 4], torch.float32)
    expected = reference_reduce([t.t() for t in every_rank(key, [6, 4], torch.float32)], hvd.Sum)
    view = base.t()
    assert not view.is_contiguous()
    check.values("out of place, transposed input", hvd.allreduce(view, op=hvd.Sum), expected)
    # In place: the result lands in the caller's strided view.
    returned = hvd.allreduce_(view, op=hvd.Sum)
    check.true(returned is view, "allreduce_ on a view did not return the view")
    check.values("in place, transposed view", view, expected)
    check.values("in place, the base tensor under the view", base, expected.t())
    # A strided slice written in place leaves the elements between untouched.
    key = "ar.slice"
    full = rank_values(key, hvd.rank(), [10], torch.int64)
    before = full.clone()
    strided = full[::2]
    hvd.allreduce_(strided, op=hvd.Sum)
    every = every_rank(key, [10], torch.int64)
    check.values(
        "in place, every other element", full[::2], reference_reduce([t[::2] for t in every], hvd.Sum)
    )
    check.values("in place, the elements between (unchanged)", full[1::2], before[1::2])
    check.check()


def test_invalid_arguments_are_refused_on_the_calling_rank():
    x = torch.ones(3)
    with pytest.raises(ValueError, match="Adasum"):
        hvd.allreduce(x.int(), op=hvd.Adasum)
    with pytest.raises(ValueError, match="Adasum"):
        hvd.allreduce_async(x.int(), op=hvd.Adasum)
    with pytest.raises(ValueError, match="op"):
        hvd.allreduce(x, op=42)
    with pytest.raises(ValueError, match="Min"):
        hvd.reducescatter(torch.ones(4), op=hvd.Min)
    with pytest.raises(ValueError, match="bool"):
        hvd.allreduce(torch.ones(2, dtype=torch.bool))  # Average is not defined for bool
    with pytest.raises(ValueError, match="complex64"):
        hvd.allreduce(torch.ones(2, dtype=torch.complex64))
    with pytest.raises(ValueError, match="splits"):
        hvd.alltoall(torch.ones(hvd.size() + 1), splits=[1] * hvd.size())
    with pytest.raises(ValueError, match="dimension"):
        hvd.allgather(torch.tensor(1.0))
    with pytest.raises(ValueError, match="sparse"):
        hvd.allreduce(torch.eye(3).to_sparse())
    with pytest.raises(TypeError, match="name"):
        hvd.allreduce(x, name=5)
    with pytest.raises(TypeError, match="root_rank"):
        hvd.broadcast(x, root_rank="0")
    with pytest.raises(TypeError):
        hvd.allreduce([1.0, 2.0])
    with pytest.raises(TypeError):
        hvd.grouped_allreduce(x)
    # Nothing was left in flight: the next collective matches on every rank.
    assert torch.equal(hvd.allreduce(x, op=hvd.Sum), torch.full([3], float(hvd.size())))


def test_refusals_are_caught_as_horovods_tests_catch_them():
    """Each refusal that Horovod's own tests provoke, caught by the exception
    types those tests catch: RuntimeError where Horovod raises one (an op
    reducescatter lacks, a scalar to reducescatter), ValueError where it
    raises that (alltoall's splits); accord raises RequestError, both."""
    horovod_runtime_error = [
        ("reducescatter op=Adasum", lambda: hvd.reducescatter(torch.ones(4), op=hvd.Adasum)),
        ("reducescatter op=Max", lambda: hvd.reducescatter(torch.ones(4), op=hvd.Max)),
        ("reducescatter of a scalar", lambda: hvd.reducescatter(torch.tensor(1.0))),
        ("grouped_reducescatter op=Min", lambda: hvd.grouped_reducescatter([torch.ones(4)], op=hvd.Min)),
    ]
    horovod_value_error = [
        (
            "alltoall splits summing past dim 0",
            lambda: hvd.alltoall(torch.ones(hvd.size() - 1), torch.ones(hvd.size(), dtype=torch.int32)),
        ),
        ("alltoall float splits", lambda: hvd.alltoall(torch.ones(hvd.size()), torch.ones(hvd.size()))),
    ]
    if hvd.size() > 1:
        horovod_value_error.append(
            (
                "alltoall without splits, dim 0 not a multiple of size",
                lambda: hvd.alltoall(torch.ones(hvd.size() + 1)),
            )
        )
    for what, call in horovod_runtime_error + horovod_value_error:
        for caught in (RuntimeError, ValueError, hvd.RequestError):
            with pytest.raises(caught):
                call()
        try:
            call()
        except hvd.RequestError as error:
            assert isinstance(error, ValueError) and isinstance(error, RuntimeError), what
            assert not isinstance(error, hvd.HorovodInternalError), f"{what}: {error!r}"
    # Nothing was left in flight: the next collective matches on every rank.
    assert torch.equal(hvd.allreduce(torch.ones(2), op=hvd.Sum), torch.full([2], float(hvd.size())))


def test_grouped_allreduce():
    check = Checker()
    dtypes = [torch.float32, torch.int16, torch.float16, torch.float64, torch.uint8, torch.bfloat16]
    shapes = [[3], [2, 5], [17], [1], [4, 1, 2], [0]]
    for op in (hvd.Sum, hvd.Average, hvd.Max, hvd.Product):
        kind = "product" if op == hvd.Product else "small"
        keys = [f"gar.{OP_NAMES[op]}.{i}" for i in range(len(dtypes))]
        tensors = [rank_values(k, hvd.rank(), s, d, kind) for k, s, d in zip(keys, shapes, dtypes)]
        originals = [t.clone() for t in tensors]
        out = hvd.synchronize(hvd.grouped_allreduce_async(tensors, name=f"gar.{OP_NAMES[op]}", op=op))
        in_place = [t.clone() for t in tensors]
        returned = hvd.synchronize(hvd.grouped_allreduce_async_(in_place, op=op))
        sync = hvd.grouped_allreduce(tensors, op=op)
        sync_ = hvd.grouped_allreduce_([t.clone() for t in tensors], op=op)
        check.true(
            isinstance(out, list) and len(out) == len(tensors),
            f"grouped result is {type(out).__name__} of {len(out)}",
        )
        for i, (k, s, d) in enumerate(zip(keys, shapes, dtypes)):
            expected = reference_reduce(every_rank(k, s, d, kind), op)
            rel = tolerance(d) if op == hvd.Average else 0.0
            check.values(f"{k} async", out[i], expected, rel)
            check.values(f"{k} async_ (in place)", in_place[i], expected, rel)
            check.true(returned[i] is in_place[i], f"{k}: in-place result is not the input")
            check.values(f"{k} sync", sync[i], expected, rel)
            check.values(f"{k} sync_", sync_[i], expected, rel)
            check.values(f"{k} input unchanged", tensors[i], originals[i])
    # An all-bool group works; a group mixing bool with other dtypes is refused.
    flags = [rank_values(f"gar.bool.{i}", hvd.rank(), [9], torch.bool) for i in range(2)]
    got = hvd.grouped_allreduce(flags, op=hvd.Min)
    for i in range(2):
        check.values(
            f"gar.bool.{i}", got[i], reference_reduce(every_rank(f"gar.bool.{i}", [9], torch.bool), hvd.Min)
        )
    with pytest.raises(ValueError, match="bool"):
        hvd.grouped_allreduce([torch.ones(2, dtype=torch.bool), torch.ones(2)], op=hvd.Sum)
    with pytest.raises(ValueError):
        hvd.grouped_allreduce([])
    check.check()


# ------------------------------------------------------------ async handles


def test_poll_and_synchronize():
    key = "poll"
    x = rank_values(key, hvd.rank(), [1000], torch.float32)
    handle = hvd.allreduce_async(x, name=key, op=hvd.Sum)
    assert isinstance(handle, int)
    first = hvd.poll(handle)
    assert isinstance(first, bool)
    deadline = time.monotonic() + 60
    while not hvd.poll(handle):
        assert time.monotonic() < deadline, f"rank {hvd.rank()}: allreduce never completed"
        time.sleep(0.0005)
    check = Checker()
    check.values(
        key, hvd.synchronize(handle), reference_reduce(every_rank(key, [1000], torch.float32), hvd.Sum)
    )
    check.check()
    # A handle is released by synchronize.
    with pytest.raises(ValueError, match="handle"):
        hvd.synchronize(handle)
    with pytest.raises(ValueError, match="handle"):
        hvd.poll(handle)
    with pytest.raises(ValueError, match="handle"):
        hvd.synchronize(123456789)


def test_synchronize_without_blocking_is_a_plain_wait_for_cpu_tensors():
    check = Checker()
    key = "nonblocking.cpu"
    inputs = every_rank(key, [257], torch.float32)
    expected = reference_reduce(inputs, hvd.Sum)
    check.values(
        key,
        hvd.synchronize(hvd.allreduce_async(inputs[hvd.rank()], name=key, op=hvd.Sum), blocking=False),
        expected,
    )
    tensor = inputs[hvd.rank()].clone()
    check.values(
        key + "_",
        hvd.synchronize(hvd.allreduce_async_(tensor, name=key + "_", op=hvd.Sum), blocking=False),
        expected,
    )
    check.values(key + " in place", tensor, expected)
    gathered = hvd.synchronize(hvd.allgather_async(inputs[hvd.rank()], name=key + ".gather"), blocking=False)
    check.values(key + " allgather", gathered, torch.cat(inputs))
    check.check()


def test_many_handles_in_flight_then_synchronized_in_reverse():
    count = 64
    keys = [f"many.{i}" for i in range(count)]
    handles = [
        hvd.allreduce_async(rank_values(k, hvd.rank(), [1 + i % 7], torch.int32), name=k, op=hvd.Sum)
        for i, k in enumerate(keys)
    ]
    assert len(set(handles)) == count
    check = Checker()
    for i in reversed(range(count)):
        check.values(
            keys[i],
            hvd.synchronize(handles[i]),
            reference_reduce(every_rank(keys[i], [1 + i % 7], torch.int32), hvd.Sum),
        )
    check.check()


@needs_two
def test_duplicate_name_in_flight_is_refused():
    """Rank 0 submits "dup.name", which the other ranks submit only after a
    broadcast that rank 0 sends once it has tried the duplicate, so the first
    one is certainly still in flight there."""
    x = torch.ones(3)
    check = Checker()
    if hvd.rank() == 0:
        handle = hvd.allreduce_async(x, name="dup.name", op=hvd.Sum)
        with pytest.raises(ValueError, match="dup.name"):
            hvd.allreduce_async(torch.ones(3), name="dup.name", op=hvd.Sum)
        hvd.broadcast(torch.ones(1), 0, name="dup.go")
    else:
        hvd.broadcast(torch.ones(1), 0, name="dup.go")
        handle = hvd.allreduce_async(x, name="dup.name", op=hvd.Sum)
    check.values("dup.name", hvd.synchronize(handle), torch.full([3], float(hvd.size())))
    # Once completed, the name can be used again.
    check.values(
        "dup.name again", hvd.allreduce(x, name="dup.name", op=hvd.Sum), torch.full([3], float(hvd.size()))
    )
    check.check()


def test_allreduce_fast_path_argument_forms():
    """The fast path of the single-tensor allreduces (a contiguous, dense,
    non-bool CPU tensor) with every form its arguments take, and the tensors
    it takes beyond plain ones: a Parameter, a tensor that requires grad, a
    slice at an offset into its storage, a 0-d tensor."""
    size, me = hvd.size(), hvd.rank()
    key = "fast"
    shape = [3, 4]
    inputs = every_rank(key, shape, torch.float64)
    sum_ = reference_reduce(inputs, hvd.Sum)
    cases = [  # (what, keyword arguments, expected)
        ("default op", {}, reference_reduce(inputs, hvd.Average)),
        ("op=None", dict(op=None), reference_reduce(inputs, hvd.Average)),
        (
            "int scale factors",
            dict(op=hvd.Sum, prescale_factor=2, postscale_factor=3),
            reference_reduce(inputs, hvd.Sum, 2.0, 3.0),
        ),
        ("process set by id", dict(op=hvd.Max, process_set=0), reference_reduce(inputs, hvd.Max)),
        (
            "global process set",
            dict(op=hvd.Min, process_set=hvd.global_process_set),
            reference_reduce(inputs, hvd.Min),
        ),
        ("unnamed", dict(op=hvd.Sum, name=None), sum_),
    ]
    check = Checker()
    for i, (what, kwargs, expected) in enumerate(cases):
        named = kwargs.get("name", "") is not None
        for form in ("async_", "async", "sync_", "sync"):
            kwargs = dict(kwargs, name=f"{key}.{i}.{form}" if named else None)
            mine = inputs[me].clone()
            label = f"{form} ({what})"
            if form == "async_":
                handle = hvd.allreduce_async_(mine, **kwargs)
                check.true(
                    isinstance(handle, int) and isinstance(hvd.poll(handle), bool),
                    f"{label}: handle {handle!r} or its poll() is not an int or bool",
                )
                check.true(hvd.synchronize(handle) is mine, f"{label}: did not return the input")
                result = mine
            elif form == "async":
                result = hvd.synchronize(hvd.allreduce_async(mine, **kwargs))
            elif form == "sync_":
                result = hvd.allreduce_(mine, **kwargs)
                check.true(result is mine, f"{label}: did not return the input")
            else:
                result = hvd.allreduce(mine, **kwargs)
            check.values(label, result, expected, tolerance(torch.float64))
            if not form.endswith("_"):
                check.values(label + ", input unchanged", mine, inputs[me])
    # Tensors that require grad: in-place and async forms leave autograd out.
    param = torch.nn.Parameter(inputs[me].clone())
    check.true(
        hvd.allreduce_(param, name=f"{key}.param_", op=hvd.Sum) is param,
        "allreduce_ of a Parameter did not return it",
    )
    check.values("allreduce_ of a Parameter", param.detach(), sum_)
    out = hvd.synchronize(hvd.allreduce_async(param, name=f"{key}.param", op=hvd.Sum))
    check.true(
        not out.requires_grad and type(out) is torch.Tensor,
        f"allreduce_async of a Parameter gave a {type(out).__name__} (requires_grad={out.requires_grad})",
    )
    check.values("allreduce_async of a Parameter", out, reference_reduce([sum_] * size, hvd.Sum))
    leaf = inputs[me].clone().requires_grad_()
    with torch.no_grad():
        out = hvd.allreduce(leaf, name=f"{key}.nograd", op=hvd.Sum)
    check.true(not out.requires_grad, "allreduce under no_grad() recorded autograd")
    check.values("allreduce of a leaf under no_grad()", out, sum_)
    out = hvd.allreduce(leaf, name=f"{key}.grad", op=hvd.Sum)
    check.true(out.requires_grad, "allreduce of a tensor that requires grad is not differentiable")
    check.values("allreduce of a leaf", out.detach(), sum_)
    # A contiguous slice at an offset into its storage, and a 0-d tensor.
    base = torch.zeros(10, dtype=torch.int32)
    window = base[3:7]
    window.fill_(me + 1)
    hvd.allreduce_(window, name=f"{key}.offset", op=hvd.Sum)
    expected = torch.zeros(10, dtype=torch.int32)
    expected[3:7] = size * (size + 1) // 2
    check.values("allreduce_ of a slice at an offset (and the elements around it)", base, expected)
    scalar = torch.tensor(float(me + 1))
    check.values(
        "allreduce of a 0-d tensor",
        hvd.allreduce(scalar, name=f"{key}.0d", op=hvd.Sum),
        torch.tensor(size * (size + 1) / 2),
    )
    # Errors are those of the general path, and a failed call leaves nothing behind.
    x = torch.ones(3)
    with pytest.raises(ValueError, match="op"):
        hvd.allreduce_async_(x, op=[hvd.Sum])
    with pytest.raises(TypeError, match="name"):
        hvd.allreduce_(x, name=b"bytes")
    with pytest.raises(TypeError):
        hvd.allreduce_async(x, prescale_factor=None)
    with pytest.raises(TypeError, match="process_set"):
        hvd.allreduce_(x, process_set="everyone")
    check.values(
        "after the refused calls",
        hvd.allreduce(x, name=f"{key}.after", op=hvd.Sum),
        torch.full([3], float(size)),
    )
    check.check()


def test_common_allreduces_skip_the_general_path(monkeypatch):
    """Contiguous CPU tensors reach the core without the general argument
    handling (which costs more than the core's enqueue)."""
    from accord.torch import tensor_args

    def general(*args, **kwargs):
        raise AssertionError("the general path was taken")

    x = torch.full([5], float(hvd.rank() + 1))
    p = torch.nn.Parameter(torch.ones(2))
    with monkeypatch.context() as patch:
        for name in ("check_tensor", "compact", "resolve_op", "exported"):
            patch.setattr(tensor_args, name, general)
        hvd.synchronize(hvd.allreduce_async_(x, name="skip.async_", op=hvd.Sum))
        out = hvd.synchronize(hvd.allreduce_async(x, name="skip.async", op=hvd.Max, prescale_factor=2.0))
        hvd.allreduce_(p, name="skip.param", op=hvd.Sum, process_set=hvd.global_process_set)
        summed = hvd.allreduce(x, name="skip.sync")
    check = Checker()
    total = hvd.size() * (hvd.size() + 1) / 2
    check.values("allreduce_async_", x, torch.full([5], total))
    check.values("allreduce_async (Max, prescaled)", out, torch.full([5], 2 * total))
    check.values("allreduce_ of a Parameter", p.detach(), torch.full([2], float(hvd.size())))
    check.values("allreduce (Average)", summed, torch.full([5], total))
    check.check()


@needs_two
def test_failed_async_allreduce_releases_its_handle():
    """A mismatched in-place allreduce fails in synchronize on every rank; the
    handle is gone afterwards and the name can be used again."""
    me = hvd.rank()
    x = torch.ones(2 + (me == 0))  # rank 0 has a different shape
    handle = hvd.allreduce_async_(x, name="fast.mismatch", op=hvd.Sum)
    with pytest.raises(hvd.HorovodInternalError, match="shape"):
        hvd.synchronize(handle)
    with pytest.raises(ValueError, match="handle"):
        hvd.synchronize(handle)
    with pytest.raises(ValueError, match="handle"):
        hvd.poll(handle)
    y = torch.ones(2)
    check = Checker()
    check.values(
        "the name again",
        hvd.allreduce_(y, name="fast.mismatch", op=hvd.Sum),
        torch.full([2], float(hvd.size())),
    )
    check.check()


# ---------------------------------------------------------------- allgather


@pytest.mark.skipif(
    int(os.environ.get("OMPI_COMM_WORLD_SIZE", "1")) != 2, reason="2 GiB per rank: run with two ranks only"
)
# Its cost is its volume (2 GiB through four collectives and their checks):
# about 40 s here when quiet, 100 s beside a build, so more than the default
# minute on a machine half as fast.
@pytest.mark.watchdog_seconds(240)
def test_more_than_2_31_elements():
    """MPI counts are ints; staged in windows or split into several MPI calls, a larger tensor
    still works."""
    n = (1 << 31) + 5
    t = torch.ones(n, dtype=torch.int8)
    hvd.allreduce_(t, op=hvd.Sum, name="huge.allreduce")
    chunk = 1 << 26
    bad = [i for i in range(0, n, chunk) if not bool((t[i : i + chunk] == 2).all())]
    assert not bad, f"rank {hvd.rank()}: allreduce of {n} int8 elements wrong from element {bad[0]}"
    t.fill_(7 if hvd.rank() == 1 else 0)
    hvd.broadcast_(t, root_rank=1, name="huge.broadcast")
    bad = [i for i in range(0, n, chunk) if not bool((t[i : i + chunk] == 7).all())]
    assert not bad, f"rank {hvd.rank()}: broadcast of {n} int8 elements wrong from element {bad[0]}"

    # Alltoall and reducescatter are not staged: their MPI calls are split.
    # Rank r sends its first half to rank 0 and the rest to rank 1.
    def wrong_from(x, value):
        return next(
            (i for i in range(0, x.numel(), chunk) if not bool((x[i : i + chunk] == value).all())), None
        )

    t.fill_(hvd.rank() + 1)
    half = n // 2
    got, received = hvd.alltoall(t, splits=torch.tensor([half, n - half]), name="huge.alltoall")
    mine = half if hvd.rank() == 0 else n - half
    assert got.numel() == 2 * mine and received.tolist() == [mine, mine], (
        f"rank {hvd.rank()}: alltoall received {got.numel()} elements, splits {received.tolist()}"
    )
    for source, block in enumerate((got[:mine], got[mine:])):
        at = wrong_from(block, source + 1)
        assert at is None, f"rank {hvd.rank()}: alltoall block from rank {source} wrong from element {at}"
    del got
    got = hvd.reducescatter(t, op=hvd.Sum, name="huge.reducescatter")
    rows = n // 2 + (1 if hvd.rank() < n % 2 else 0)
    assert got.numel() == rows, (
        f"rank {hvd.rank()}: reducescatter gave {got.numel()} elements, expected {rows}"
    )
    at = wrong_from(got, 3)
    assert at is None, f"rank {hvd.rank()}: reducescatter of {n} int8 elements wrong from element {at}"


def test_allgather_every_dtype_with_uneven_rows():
    check = Checker()
    handles = []
    for dtype in ALL_DTYPES:
        for trailing in ([], [3], [2, 2]):
            key = f"ag.{dtype_name(dtype)}.{len(trailing)}"
            shape = [hvd.rank() + 1] + trailing
            x = rank_values(key, hvd.rank(), shape, dtype)
            handles.append((key, dtype, trailing, x.clone(), x, hvd.allgather_async(x, name=key)))
    for key, dtype, trailing, original, x, handle in handles:
        expected = torch.cat([rank_values(key, r, [r + 1] + trailing, dtype) for r in range(hvd.size())])
        check.values(key, hvd.synchronize(handle), expected)
        check.values(key + " input unchanged", x, original)
    # The synchronous form, and a rank that contributes no rows.
    key = "ag.sync"
    rows = 0 if hvd.rank() == 0 else 2
    got = hvd.allgather(rank_values(key, hvd.rank(), [rows, 3], torch.float32), name=key)
    expected = torch.cat(
        [rank_values(key, r, [0 if r == 0 else 2, 3], torch.float32) for r in range(hvd.size())]
    )
    check.values(key, got, expected)
    check.check()


def test_grouped_allgather_mixed_dtypes():
    check = Checker()
    dtypes = [torch.float32, torch.bool, torch.int64, torch.bfloat16]
    keys = [f"gag.{i}" for i in range(len(dtypes))]
    tensors = [
        rank_values(k, hvd.rank(), [hvd.rank() + 1 + i, 2], d) for i, (k, d) in enumerate(zip(keys, dtypes))
    ]
    out = hvd.synchronize(hvd.grouped_allgather_async(tensors, name="gag"))
    sync = hvd.grouped_allgather(tensors)
    for i, (k, d) in enumerate(zip(keys, dtypes)):
        expected = torch.cat([rank_values(k, r, [r + 1 + i, 2], d) for r in range(hvd.size())])
        check.values(k + " async", out[i], expected)
        check.values(k + " sync", sync[i], expected)
    bools = [rank_values(f"gag.b{i}", hvd.rank(), [2], torch.bool) for i in range(2)]
    got = hvd.grouped_allgather(bools)
    for i in range(2):
        check.values(f"gag.b{i}", got[i], torch.cat(every_rank(f"gag.b{i}", [2], torch.bool)))
    check.check()


# ---------------------------------------------------------------- broadcast


def test_broadcast_every_dtype_and_root():
    check = Checker()
    cases = []
    for dtype in ALL_DTYPES:
        for root in range(hvd.size()):
            key = f"bc.{dtype_name(dtype)}.{root}"
            x = rank_values(key, hvd.rank(), [3, 4], dtype)
            y = x.clone()
            cases.append(
                (
                    key,
                    root,
                    x,
                    x.clone(),
                    y,
                    hvd.broadcast_async(x, root, name=key),
                    hvd.broadcast_async_(y, root, name=key + ".inplace"),
                )
            )
    for key, root, x, original, y, out_handle, in_handle in cases:
        expected = rank_values(key, root, [3, 4], x.dtype)
        check.values(key, hvd.synchronize(out_handle), expected)
        check.values(key + " input unchanged", x, original)
        check.true(hvd.synchronize(in_handle) is y, f"{key}: broadcast_async_ result is not y")
        check.values(key + " in place", y, expected)
    # Synchronous forms; an in-place broadcast into a non-contiguous view.
    root = hvd.size() - 1
    key = "bc.sync"
    x = rank_values(key, hvd.rank(), [5, 2], torch.float64)
    check.values(key, hvd.broadcast(x, root), rank_values(key, root, [5, 2], torch.float64))
    view = x.t()
    check.true(hvd.broadcast_(view, root, name="bc.view") is view, "broadcast_ result is not view")
    check.values(key + " view in place", x, rank_values(key, root, [5, 2], torch.float64))
    with pytest.raises(ValueError):
        hvd.broadcast(torch.ones(2), root_rank=hvd.size())
    check.check()


# ----------------------------------------------------------------- alltoall


def alltoall_splits(sender, size):
    """Rows that `sender` sends to each rank: uneven, with zeros."""
    return [(sender + 2 * j) % 3 for j in range(size)]


def test_alltoall_with_and_without_splits():
    check = Checker()
    size, me = hvd.size(), hvd.rank()
    for dtype in ALL_DTYPES:
        key = f"a2a.{dtype_name(dtype)}"
        splits = alltoall_splits(me, size)
        x = rank_values(key, me, [sum(splits), 2], dtype)
        as_tensor = dtype == torch.float32  # splits given as a tensor once, as a list otherwise
        output, received = hvd.alltoall(
            x, splits=torch.tensor(splits, dtype=torch.int32) if as_tensor else splits, name=key
        )
        pieces = []
        for sender in range(size):
            sent = alltoall_splits(sender, size)
            start = sum(sent[:me])
            pieces.append(rank_values(key, sender, [sum(sent), 2], dtype)[start : start + sent[me]])
        check.values(key, output, torch.cat(pieces))
        check.values(
            key + " received splits",
            received,
            torch.tensor([alltoall_splits(s, size)[me] for s in range(size)], dtype=torch.int32),
        )
    # Even split: no splits argument returns the tensor alone.
    key = "a2a.even"
    x = rank_values(key, me, [2 * size, 3], torch.int64)
    output = hvd.alltoall(x, name=key)
    check.true(isinstance(output, torch.Tensor), "alltoall without splits returned a tuple")
    expected = torch.cat(
        [rank_values(key, s, [2 * size, 3], torch.int64)[2 * me : 2 * me + 2] for s in range(size)]
    )
    check.values(key, output, expected)
    # The async form returns (output, received_splits) from synchronize.
    out, received = hvd.synchronize(hvd.alltoall_async(x, name=key + ".async"))
    check.values(key + " async", out, expected)
    check.values(key + " async splits", received, torch.full([size], 2, dtype=torch.int32))
    with pytest.raises(TypeError):
        hvd.alltoall(x, splits=[0.5] * size)
    check.check()


# ------------------------------------------------------------ reducescatter


def reducescatter_block(rows, size, rank):
    counts = [rows // size + (1 if r < rows % size else 0) for r in range(size)]
    return sum(counts[:rank]), counts[rank]


def test_reducescatter_sum_and_average():
    check = Checker()
    size, me = hvd.size(), hvd.rank()
    rows = 2 * size + 1
    first, count = reducescatter_block(rows, size, me)
    cases = []
    for op in (hvd.Sum, hvd.Average):
        for dtype in ALL_DTYPES:
            if not supported(op, dtype):
                continue
            for scaled in (False, True):
                if scaled and not scalable(op, dtype):
                    continue
                key = f"rs.{OP_NAMES[op]}.{dtype_name(dtype)}.{scaled}"
                pre, post = (2.0, 0.5) if scaled else (1.0, 1.0)
                x = rank_values(key, me, [rows, 3], dtype)
                cases.append(
                    (
                        key,
                        op,
                        dtype,
                        pre,
                        post,
                        x,
                        hvd.reducescatter_async(
                            x, name=key, op=op, prescale_factor=pre, postscale_factor=post
                        ),
                    )
                )
    for key, op, dtype, pre, post, _x, handle in cases:
        full = reference_reduce(every_rank(key, [rows, 3], dtype), op, pre, post)
        rel = tolerance(dtype) if op == hvd.Average else 0.0
        check.values(key, hvd.synchronize(handle), full[first : first + count], rel)
    key = "rs.sync"
    x = rank_values(key, me, [rows], torch.float32)
    full = reference_reduce(every_rank(key, [rows], torch.float32), hvd.Average)
    check.values(key, hvd.reducescatter(x), full[first : first + count], tolerance(torch.float32))
    check.check()


def test_grouped_reducescatter():
    check = Checker()
    size, me = hvd.size(), hvd.rank()
    dtypes = [torch.float32, torch.int32, torch.float16]
    rows = [size, 2 * size + 1, 1]
    keys = [f"grs.{i}" for i in range(3)]
    tensors = [rank_values(k, me, [r, 2], d) for k, r, d in zip(keys, rows, dtypes)]
    for op in (hvd.Sum, hvd.Average):
        out = hvd.synchronize(hvd.grouped_reducescatter_async(tensors, op=op))
        sync = hvd.grouped_reducescatter(tensors, op=op)
        for i, (k, r, d) in enumerate(zip(keys, rows, dtypes)):
            first, count = reducescatter_block(r, size, me)
            expected = reference_reduce(every_rank(k, [r, 2], d), op)[first : first + count]
            rel = tolerance(d) if op == hvd.Average else 0.0
            check.values(f"{k} {OP_NAMES[op]} async", out[i], expected, rel)
            check.values(f"{k} {OP_NAMES[op]} sync", sync[i], expected, rel)
    check.check()


# ------------------------------------------------------------- compression


def test_fp16_compression():
    check = Checker()
    key = "fp16"
    x = rank_values(key, hvd.rank(), [33], torch.float32) / 3  # not exact in float16
    sent, ctx = hvd.Compression.fp16.compress(x)
    check.true(sent.dtype == torch.float16, f"compressed dtype {sent.dtype}")
    check.true(
        hvd.Compression.fp16.decompress(sent, ctx).dtype == torch.float32, "decompressed dtype is not float32"
    )
    got = hvd.allreduce(x, op=hvd.Sum, compression=hvd.Compression.fp16)
    halves = [(t / 3).to(torch.float16) for t in every_rank(key, [33], torch.float32)]
    expected = reference_reduce(halves, hvd.Sum).to(torch.float32)
    check.values("allreduce with fp16 compression", got, expected, tolerance(torch.float16))
    # Integer tensors travel unchanged.
    key = "fp16.int"
    n = rank_values(key, hvd.rank(), [8], torch.int32)
    sent, ctx = hvd.Compression.fp16.compress(n)
    check.true(sent is n, "fp16 compression changed an integer tensor")
    check.values(
        key,
        hvd.allreduce(n, op=hvd.Sum, compression=hvd.Compression.fp16),
        reference_reduce(every_rank(key, [8], torch.int32), hvd.Sum),
    )
    # Compression.none is the identity.
    sent, ctx = hvd.Compression.none.compress(x)
    check.true(
        sent is x and hvd.Compression.none.decompress(sent, ctx) is x, "Compression.none changed its tensor"
    )
    # reducescatter with compression.
    key = "fp16.rs"
    rows = 2 * hvd.size()
    y = rank_values(key, hvd.rank(), [rows], torch.float64)
    got = hvd.reducescatter(y, op=hvd.Sum, compression=hvd.Compression.fp16)
    check.true(got.dtype == torch.float64, f"reducescatter result dtype {got.dtype}")
    full = reference_reduce(every_rank(key, [rows], torch.float64), hvd.Sum)
    check.values(key, got, full[2 * hvd.rank() : 2 * hvd.rank() + 2])
    check.check()


# -------------------------------------------------------------- process sets


def test_process_sets():
    size, me = hvd.size(), hvd.rank()
    evens = [r for r in range(size) if r % 2 == 0]
    odds = [r for r in range(size) if r % 2 == 1]
    even_set = hvd.add_process_set(evens)
    odd_set = hvd.add_process_set(odds) if odds else None
    mine, members = (even_set, evens) if me % 2 == 0 else (odd_set, odds)
    check = Checker()
    try:
        check.true(sorted(mine.ranks) == members, f"set ranks {mine.ranks} != {members}")
        check.true(
            mine.size() == len(members) and mine.rank() == members.index(me),
            f"set size/rank {mine.size()}/{mine.rank()}",
        )
        key = f"ps.{members[0]}"
        x = rank_values(key, me, [6], torch.float32)
        inputs = [rank_values(key, r, [6], torch.float32) for r in members]
        check.values(
            key + " allreduce Sum",
            hvd.allreduce(x, op=hvd.Sum, process_set=mine),
            reference_reduce(inputs, hvd.Sum),
        )
        check.values(
            key + " allreduce Average",
            hvd.allreduce(x, process_set=mine),
            reference_reduce(inputs, hvd.Average),
            tolerance(torch.float32),
        )
        check.values(key + " allgather", hvd.allgather(x, process_set=mine), torch.cat(inputs))
        # root_rank is a global rank: the last member of the set.
        root = members[-1]
        check.values(
            key + " broadcast",
            hvd.broadcast(x, root, process_set=mine),
            rank_values(key, root, [6], torch.float32),
        )
        rows = len(members) * 2
        y = rank_values(key + ".rs", me, [rows], torch.float64)
        full = reference_reduce(
            [rank_values(key + ".rs", r, [rows], torch.float64) for r in members], hvd.Sum
        )
        mine_at = members.index(me)
        check.values(
            key + " reducescatter",
            hvd.reducescatter(y, op=hvd.Sum, process_set=mine),
            full[2 * mine_at : 2 * mine_at + 2],
        )
        z = rank_values(key + ".a2a", me, [len(members)], torch.int32)
        check.values(
            key + " alltoall",
            hvd.alltoall(z, process_set=mine),
            torch.stack(
                [rank_values(key + ".a2a", r, [len(members)], torch.int32)[mine_at] for r in members]
            ),
        )
        hvd.barrier(process_set=mine)
        # A rank outside a set cannot use it, nor be a set's root.
        other, outsiders = (odd_set, odds) if me % 2 == 0 else (even_set, evens)
        if other is not None:
            with pytest.raises(ValueError):
                hvd.allreduce(torch.ones(2), process_set=other)
            with pytest.raises(ValueError, match="root_rank"):
                hvd.broadcast(torch.ones(2), outsiders[0], process_set=mine)
    finally:
        hvd.barrier()
        if odd_set is not None:
            hvd.remove_process_set(odd_set)
        hvd.remove_process_set(even_set)
    check.check()


# ---------------------------------------------------------- join, barrier


def test_join_with_uneven_work():
    """Rank r runs r allreduces before joining; joined ranks contribute zeros."""
    size, me = hvd.size(), hvd.rank()
    check = Checker()
    for i in range(me):
        key = f"join.{i}"
        got = hvd.allreduce(torch.full([4], float(me + 1)), name=key, op=hvd.Sum)
        # Ranks i+1 .. size-1 take part with (rank + 1); the others have joined.
        check.values(key, got, torch.full([4], float(sum(r + 1 for r in range(i + 1, size)))))
    last = hvd.join()
    check.true(isinstance(last, int) and 0 <= last < size, f"join() returned {last!r}")
    every = hvd.allgather(torch.tensor([last]))
    check.true(bool((every == last).all()), f"ranks disagree on the last joined rank: {every}")
    hvd.barrier()
    check.check()


# ------------------------------------------------------------------ errors


@needs_two
def test_mismatched_shapes_fail_on_every_rank():
    rows = 3 if hvd.rank() == 0 else 4
    handle = hvd.allreduce_async(torch.ones(rows), name="bad.shape", op=hvd.Sum)
    with pytest.raises(hvd.HorovodInternalError) as error:
        hvd.synchronize(handle)
    message = str(error.value)
    assert "bad.shape" in message and "rank 0" in message and "shape" in message, message
    assert error.value.code == "MISMATCH", error.value.code
    # accord still works afterwards.
    assert torch.equal(hvd.allreduce(torch.ones(2), op=hvd.Sum), torch.full([2], float(hvd.size())))


@needs_two
def test_mismatched_dtypes_fail_on_every_rank():
    dtype = torch.float32 if hvd.rank() == 0 else torch.int32
    with pytest.raises(hvd.HorovodInternalError) as error:
        hvd.allreduce(torch.ones(5, dtype=dtype), name="bad.dtype", op=hvd.Sum)
    message = str(error.value)
    assert "bad.dtype" in message and "rank 0" in message and "dtype" in message, message
    with pytest.raises(hvd.HorovodInternalError) as error:
        hvd.allgather(torch.ones([2, 2 + hvd.rank()]), name="bad.allgather")
    assert "bad.allgather" in str(error.value) and "rank 0" in str(error.value)
    with pytest.raises(hvd.HorovodInternalError) as error:
        hvd.broadcast(torch.ones(3), root_rank=hvd.rank(), name="bad.root")
    assert "bad.root" in str(error.value) and "rank 0" in str(error.value)
    assert torch.equal(hvd.allreduce(torch.ones(2), op=hvd.Sum), torch.full([2], float(hvd.size())))


# ---------------------------------------------------------------- shutdown
# Last in this file: it shuts accord down and initialises it again.


def test_calls_after_shutdown_raise_and_init_works_again():
    lonely = (
        hvd.allreduce_async(torch.ones(2), name=f"lonely.{hvd.rank()}", op=hvd.Sum)
        if hvd.size() > 1
        else None
    )
    # Every rank has its lonely operation pending before any rank shuts
    # down; otherwise a fast rank's shutdown can reach a slow one before its
    # enqueue, which is then refused instead of failing at synchronize.
    hvd.barrier()
    hvd.shutdown()
    assert not hvd.is_initialized()
    if lonely is not None:
        with pytest.raises(hvd.HorovodInternalError):
            hvd.synchronize(lonely)
    with pytest.raises((ValueError, hvd.HorovodInternalError)) as raised:
        hvd.allreduce(torch.ones(2))
    assert "hvd.init()" in str(raised.value) and "::" not in str(raised.value), raised.value
    with pytest.raises((ValueError, hvd.HorovodInternalError)):
        hvd.allgather_async(torch.ones(2))
    with pytest.raises(ValueError):
        hvd.rank()
    hvd.init()
    assert hvd.is_initialized()
    got = hvd.allreduce(torch.ones(3), op=hvd.Sum, name="after.reinit")
    assert torch.equal(got, torch.full([3], float(hvd.size()))), f"rank {hvd.rank()}: {got}"
