"""torch tensors through accord._core's DLPack boundary, every dtype incl. bfloat16 and bool.

The module is not compiled against torch: these tests check that torch's
DLPack export and import (torch 1.13 and 2.x) meet accord's on both sides, for the
collectives that write into the caller's tensor (allreduce, broadcast) and
for outputs the core allocates (allgather). Bool tensors travel as uint8
views with dtype_override="bool", since torch refuses to export bool.
"""

import zlib

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch.utils.dlpack import from_dlpack  # noqa: E402

from accord import _core  # noqa: E402

pytestmark = pytest.mark.usefixtures("accord_initialized")

DTYPES = [
    torch.uint8,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
    torch.bool,
]


def dtype_id(dtype):
    return str(dtype).replace("torch.", "")


def rank_tensor(key, rank, shape, dtype):
    """Rank ``rank``'s seeded input: small integers (plus quarter steps for
    floats), exact in every dtype and in sums and products of a few ranks."""
    generator = torch.Generator().manual_seed(zlib.crc32(f"{key}/{rank}".encode()))
    if dtype == torch.bool:
        return torch.rand(shape, generator=generator) > 0.5
    low = 0 if dtype == torch.uint8 else -4
    values = torch.randint(low, 5, shape, generator=generator).to(torch.float64)
    if dtype.is_floating_point:
        values += torch.randint(0, 4, shape, generator=generator).to(torch.float64) / 4
    return values.to(dtype)


def wire(tensor):
    """What crosses the boundary: bool as a uint8 view, everything else as is."""
    if tensor.dtype == torch.bool:
        return tensor.view(torch.uint8), "bool"
    return tensor, None


def check_equal(got, expected, what, rank):
    assert got.dtype == expected.dtype, f"rank {rank}: {what}: dtype {got.dtype}, expected {expected.dtype}"
    assert got.shape == expected.shape, (
        f"rank {rank}: {what}: shape {tuple(got.shape)}, expected {tuple(expected.shape)}"
    )
    bad = got != expected
    if bool(bad.any()):
        index = tuple(int(i) for i in bad.nonzero()[0])
        raise AssertionError(
            f"rank {rank}: {what}: {int(bad.sum())} elements differ; first at {index}: "
            f"expected {expected[index].item()!r}, got {got[index].item()!r}"
        )


def reference(inputs, op):
    dtype = inputs[0].dtype
    if dtype == torch.bool:
        stacked = torch.stack(inputs)
        return stacked.any(0) if op in (_core.OP_SUM, _core.OP_MAX) else stacked.all(0)
    stacked = torch.stack([x.to(torch.float64) for x in inputs])
    result = {
        _core.OP_SUM: lambda: stacked.sum(0),
        _core.OP_MIN: lambda: stacked.min(0).values,
        _core.OP_MAX: lambda: stacked.max(0).values,
        _core.OP_PRODUCT: lambda: stacked.prod(0),
    }[op]()
    return result.to(dtype)


@pytest.mark.parametrize("in_place", [False, True], ids=["out", "inplace"])
@pytest.mark.parametrize(
    "op", [_core.OP_SUM, _core.OP_MIN, _core.OP_MAX, _core.OP_PRODUCT], ids=["sum", "min", "max", "product"]
)
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_allreduce(rank, size, dtype, op, in_place):
    key = f"torch.allreduce.{dtype_id(dtype)}.{op}.{in_place}"
    inputs = [rank_tensor(key, r, (3, 7), dtype) for r in range(size)]
    mine = inputs[rank].clone()
    out = mine if in_place else torch.empty_like(mine)
    wire_in, override = wire(mine)
    wire_out = wire_in if in_place else wire(out)[0]
    _core.allreduce_async(wire_in, wire_out, name=key, op=op, dtype_override=override).wait()
    check_equal(out, reference(inputs, op), f"allreduce {dtype_id(dtype)} op {op}", rank)
    if not in_place:
        check_equal(mine, inputs[rank], "the input of an out-of-place allreduce", rank)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.int32], ids=dtype_id)
def test_allreduce_average(rank, size, dtype):
    key = f"torch.average.{dtype_id(dtype)}"
    inputs = [rank_tensor(key, r, (50,), dtype) for r in range(size)]
    out = inputs[rank].clone()
    _core.allreduce_async(out, out, name=key, op=_core.OP_AVERAGE).wait()
    exact = torch.stack([x.to(torch.float64) for x in inputs]).sum(0) / size
    if dtype.is_floating_point:
        tol = 1e-2 if dtype in (torch.float16, torch.bfloat16) else 1e-6
        error = (out.to(torch.float64) - exact).abs().max().item()
        assert error <= tol * (1 + exact.abs().max().item()), f"rank {rank}: Average error {error}"
    else:
        check_equal(out, torch.trunc(exact).to(dtype), "integer Average", rank)


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_allgather(rank, size, dtype):
    key = f"torch.allgather.{dtype_id(dtype)}"
    inputs = [rank_tensor(key, r, (r + 1, 2, 3), dtype) for r in range(size)]
    tensor, override = wire(inputs[rank])
    handle = _core.allgather_async(tensor, name=key, dtype_override=override)
    handle.wait()
    output = handle.outputs()[0]
    assert output.dtype == ("uint8" if dtype == torch.bool else dtype_id(dtype))
    pointer = output.data_ptr
    result = from_dlpack(output)
    assert result.data_ptr() == pointer, "torch copied the core's output"
    del handle, output
    if dtype == torch.bool:
        assert result.dtype == torch.uint8
        result = result.view(torch.bool)
    check_equal(result, torch.cat(inputs), f"allgather {dtype_id(dtype)}", rank)


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_broadcast(rank, size, dtype):
    for root in range(size):
        key = f"torch.broadcast.{dtype_id(dtype)}.{root}"
        inputs = [rank_tensor(key, r, (5, 4), dtype) for r in range(size)]
        mine = inputs[rank].clone()
        out = torch.empty_like(mine)
        wire_in, override = wire(mine)
        _core.broadcast_async(wire_in, wire(out)[0], root, name=key, dtype_override=override).wait()
        check_equal(out, inputs[root], f"broadcast {dtype_id(dtype)} from {root}", rank)
        # ... and in place.
        _core.broadcast_async(wire_in, wire_in, root, name=key + ".inplace", dtype_override=override).wait()
        check_equal(mine, inputs[root], f"in-place broadcast {dtype_id(dtype)} from {root}", rank)


def test_views_with_offsets_and_torch_outputs_for_numpy(rank, size):
    base = torch.zeros(10, dtype=torch.float32)
    window = base[3:7]  # storage offset 3: the DLPack data pointer must account for it
    window.fill_(rank + 1)
    _core.allreduce_async(window, window, name="torch.window", op=_core.OP_SUM).wait()
    expected = torch.zeros(10)
    expected[3:7] = size * (size + 1) / 2
    check_equal(base, expected, "in-place allreduce of a slice", rank)
    # An output allocated for a torch input can go to numpy as well.
    handle = _core.allgather_async(torch.full((2,), float(rank)), name="torch.to_numpy")
    handle.wait()
    array = np.from_dlpack(handle.outputs()[0])
    np.testing.assert_array_equal(
        array,
        np.repeat(np.arange(size, dtype=np.float32), 2),
        err_msg=f"rank {rank}: allgather output read by numpy",
    )


def test_refused_tensors(rank, size):
    with pytest.raises(ValueError, match="contiguous"):
        _core.allreduce_async(torch.ones(4, 6).t(), torch.ones(4, 6).t())
    with pytest.raises(ValueError, match="DLPack"):
        _core.allgather_async(torch.ones(3, requires_grad=True))
    with pytest.raises(ValueError, match="complex"):
        _core.allgather_async(torch.ones(3, dtype=torch.complex64))
    with pytest.raises(ValueError, match="must match"):
        _core.allreduce_async(torch.ones(3), torch.ones(3, dtype=torch.float64))
    # A size-1 dimension may carry any stride: (3, 1) with strides (1, 3) is row-major.
    column = torch.arange(3.0).reshape(1, 3).t()
    assert column.stride() == (1, 3)
    _core.allreduce_async(column, column, name="torch.size1", op=_core.OP_SUM).wait()
    check_equal(column, torch.arange(3.0).reshape(3, 1) * size, "allreduce of a (3, 1) column view", rank)


def torch_exports_bool() -> bool:
    """Whether this torch hands bool tensors to DLPack (2.x does; 1.13 raises in __dlpack__)."""
    try:
        torch.utils.dlpack.to_dlpack(torch.ones(1, dtype=torch.bool))
    except (RuntimeError, TypeError, BufferError):
        return False
    return True


def test_bool_tensors_through_dlpack(rank, size):
    """A bool tensor given to the neutral API: gathered as bool where torch exports it, else refused."""
    mine = torch.tensor([rank % 2 == 0, True, rank == 1])
    if not torch_exports_bool():
        assert torch.__version__ < "2", f"torch {torch.__version__} does not export bool through DLPack"
        with pytest.raises(ValueError, match="dtype_override"):
            _core.allgather_async(mine)
        return
    handle = _core.allgather_async(mine, name="torch.bool.dlpack")
    handle.wait()
    output = handle.outputs()[0]
    assert output.dtype == "bool", f"rank {rank}: the core's output is {output.dtype}, expected bool"
    got = from_dlpack(output)
    expected = torch.tensor([[r % 2 == 0, True, r == 1] for r in range(size)]).reshape(-1)
    assert got.dtype == torch.bool, f"rank {rank}: gathered {got.dtype}, expected torch.bool"
    check_equal(got, expected, "allgather of bool tensors over DLPack", rank)


@pytest.mark.parametrize("in_place", [False, True], ids=["out", "inplace"])
@pytest.mark.parametrize("dtype", [d for d in DTYPES if d != torch.bool], ids=dtype_id)
def test_allreduce_by_address(rank, size, dtype, in_place):
    """accord.torch's fast path: memory described by address, dtype id and shape."""
    key = f"torch.by_address.{dtype_id(dtype)}.{in_place}"
    inputs = [rank_tensor(key, r, (4, 5), dtype) for r in range(size)]
    mine = inputs[rank].clone()
    out = mine if in_place else torch.empty_like(mine)
    owner = mine if in_place else (mine, out)
    handle = _core.allreduce_async_ptr(
        owner,
        mine.data_ptr(),
        out.data_ptr(),
        _core.DTYPE_IDS[dtype_id(dtype)],
        mine.shape,
        key,
        _core.OP_SUM,
        1.0,
        1.0,
        0,
        -1,
        0,
    )
    del owner
    handle.wait()
    check_equal(out, reference(inputs, _core.OP_SUM), f"allreduce by address {dtype_id(dtype)}", rank)
    if not in_place:
        check_equal(mine, inputs[rank], "the input of an out-of-place allreduce by address", rank)


def test_allreduce_by_address_keeps_its_owner_alive(rank, size):
    import gc
    import weakref

    key = "torch.by_address.owner"
    tensor = torch.full((1000,), float(rank + 1))
    alive = weakref.ref(tensor)
    handle = _core.allreduce_async_ptr(
        tensor,
        tensor.data_ptr(),
        tensor.data_ptr(),
        _core.DTYPE_IDS["float32"],
        tensor.shape,
        key,
        _core.OP_SUM,
        1.0,
        2.0,
        0,
        -1,
        0,
    )
    view = tensor[:3]  # shares the memory, to read the result after the tensor itself is dropped
    del tensor
    gc.collect()
    handle.wait()
    expected = 2.0 * size * (size + 1) / 2
    assert view.tolist() == [expected] * 3, f"rank {rank}: allreduce by address gave {view.tolist()}"
    del handle, view
    gc.collect()
    assert alive() is None, f"rank {rank}: the handle kept its owner after completing and being dropped"


def test_allreduce_by_address_refuses_bad_arguments(rank, size):
    t = torch.ones(3)
    good = [
        t,
        t.data_ptr(),
        t.data_ptr(),
        _core.DTYPE_IDS["float32"],
        t.shape,
        "torch.by_address.bad",
        _core.OP_SUM,
        1.0,
        1.0,
        0,
        -1,
        0,
    ]

    def call(index, value):
        args = list(good)
        args[index] = value
        return _core.allreduce_async_ptr(*args)

    with pytest.raises(TypeError, match="12 positional"):
        _core.allreduce_async_ptr(*good[:11])
    with pytest.raises(TypeError, match="addresses"):
        call(1, "0x10")
    with pytest.raises(ValueError, match="dtype id"):
        call(3, 10)
    with pytest.raises(TypeError, match="tuple of ints"):
        call(4, [3])
    with pytest.raises(TypeError, match="tuple of ints"):
        call(4, (3.5,))
    with pytest.raises(TypeError, match="name"):
        call(5, b"bytes")
    with pytest.raises(TypeError, match="scale factors"):
        call(7, 1)
    with pytest.raises(TypeError, match="device and stream"):
        call(10, "cuda:0")
    with pytest.raises(TypeError, match="device and stream"):
        call(11, None)
    # The core's own checks still apply: a negative dimension is refused.
    with pytest.raises(ValueError, match="negative dimension"):
        call(4, (-3,))
