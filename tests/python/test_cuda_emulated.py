"""The Python bindings' GPU path, without a GPU.

Runs with ACCORD_CUDA_HOST_EMULATION=1 (tests/CMakeLists.txt), where accord
serves CUDA tensors with a host emulation of the device: "device" memory is
host memory. ``EmulatedCuda`` is a producer that speaks DLPack like CuPy or
JAX on a GPU, over a numpy array: it says it lives on cuda:0 and rewrites the
device of the capsule it exports. So the whole route of a CUDA tensor
through the framework-neutral API runs here: the device check, DLPack's
stream handshake (the stream the consumer passes), the readiness event on
the legacy default stream, outputs the core allocates on the device and
hands back as DLPack tensors on cuda:0, and in-place results. On a real GPU
tests/gpu/ runs the same with CuPy and torch.
"""

import ctypes

import numpy as np
import pytest

import accord
from accord import _core
from accord.ops import core_op

import half_rounding
from conftest import all_inputs, assert_close, rank_input, reference_reduce

pytestmark = pytest.mark.usefixtures("accord_initialized")

_KDLCPU, _KDLCUDA = 1, 2
# DLManagedTensor starts with a DLTensor: data pointer, then DLDevice
# {int32 device_type, int32 device_id}.
_DEVICE_TYPE_OFFSET = ctypes.sizeof(ctypes.c_void_p)
_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def _set_capsule_device(capsule, device_type: int) -> None:
    managed = _capsule_pointer(capsule, b"dltensor")
    ctypes.c_int32.from_address(managed + _DEVICE_TYPE_OFFSET).value = device_type


class EmulatedCuda:
    """A numpy array presented as a CUDA tensor on cuda:0 (see the module docstring)."""

    def __init__(self, array: np.ndarray):
        self.array = array
        self.streams = []  # what each __dlpack__ call was given

    def __dlpack_device__(self):
        return (_KDLCUDA, 0)

    def __dlpack__(self, stream=None):
        self.streams.append(stream)
        capsule = self.array.__dlpack__()
        _set_capsule_device(capsule, _KDLCUDA)
        return capsule


class _Capsule:
    """Hands numpy a capsule (numpy.from_dlpack wants an object)."""

    def __init__(self, capsule):
        self.capsule = capsule

    def __dlpack_device__(self):
        return (_KDLCPU, 0)

    def __dlpack__(self, stream=None):
        return self.capsule


def host_view(output) -> np.ndarray:
    """The values of an output on emulated cuda:0 (host memory underneath)."""
    assert output.__dlpack_device__() == (_KDLCUDA, 0), (
        f"the output is on {output.__dlpack_device__()}, not cuda:0"
    )
    capsule = output.__dlpack__(stream=1)
    _set_capsule_device(capsule, _KDLCPU)
    return np.from_dlpack(_Capsule(capsule))


def test_in_place_allreduce_of_a_cuda_tensor(rank, size):
    key = "emulated.allreduce_"
    inputs = all_inputs(key, size, lambda r: (7, 5), np.float32)
    tensor = EmulatedCuda(inputs[rank].copy())
    assert accord.allreduce_(tensor, op=accord.Sum, name=key) is tensor
    assert_close(tensor.array, reference_reduce(inputs, accord.Sum), "in-place allreduce of a CUDA tensor")
    # The producer was asked to make the legacy default stream (1) wait for it.
    assert tensor.streams == [1], f"rank {rank}: __dlpack__ was called with {tensor.streams}"


@pytest.mark.parametrize("dtype", [np.int32, np.float16, np.float64], ids=lambda d: np.dtype(d).name)
def test_allreduce_of_a_cuda_tensor_into_a_new_device_tensor(rank, size, dtype):
    key = f"emulated.allreduce.{np.dtype(dtype).name}"
    inputs = all_inputs(key, size, lambda r: (3, 33), dtype)
    tensor = EmulatedCuda(inputs[rank].copy())
    result = accord.allreduce(tensor, op=accord.Average, name=key, postscale_factor=2.0)
    assert_close(
        host_view(result),
        reference_reduce(inputs, accord.Average, postscale=2.0),
        "allreduce of a CUDA tensor",
    )
    assert_close(tensor.array, inputs[rank], "the input of an out-of-place allreduce")


def test_grouped_allreduce_of_cuda_tensors(rank, size):
    key = "emulated.grouped"
    shapes = [(4,), (2, 3), (1000,)]
    inputs = [all_inputs(f"{key}.{i}", size, lambda r, s=s: s, np.float32) for i, s in enumerate(shapes)]
    tensors = [EmulatedCuda(inputs[i][rank].copy()) for i in range(len(shapes))]
    results = accord.grouped_allreduce(tensors, op=accord.Sum, name=key)
    for i, result in enumerate(results):
        assert_close(
            host_view(result), reference_reduce(inputs[i], accord.Sum), f"grouped allreduce member {i}"
        )
    accord.grouped_allreduce_(tensors, op=accord.Max, name=key + "_")
    for i, tensor in enumerate(tensors):
        assert_close(tensor.array, reference_reduce(inputs[i], accord.Max), f"in-place grouped member {i}")


def test_allgather_alltoall_reducescatter_give_device_tensors(rank, size):
    key = "emulated.gather"
    rows = lambda r: (r + 1, 3)  # noqa: E731
    inputs = all_inputs(key, size, rows, np.int64)
    gathered = accord.allgather(EmulatedCuda(inputs[rank].copy()), name=key)
    assert_close(host_view(gathered), np.concatenate(inputs), "allgather of a CUDA tensor")

    key = "emulated.alltoall"
    splits = [(rank + j) % 3 for j in range(size)]
    mine = rank_input(key, rank, (sum(splits), 2), np.float32)
    out, received = accord.alltoall(EmulatedCuda(mine), splits=splits, name=key)
    expected = []
    for q in range(size):
        q_splits = [(q + j) % 3 for j in range(size)]
        q_input = rank_input(key, q, (sum(q_splits), 2), np.float32)
        start = sum(q_splits[:rank])
        expected.append(q_input[start : start + q_splits[rank]])
    assert_close(host_view(out), np.concatenate(expected), "alltoall of a CUDA tensor")
    assert received.tolist() == [(q + rank) % 3 for q in range(size)]

    key = "emulated.reducescatter"
    inputs = all_inputs(key, size, lambda r: (2 * size + 1, 4), np.float32)
    block = accord.reducescatter(EmulatedCuda(inputs[rank].copy()), op=accord.Sum, name=key)
    total = reference_reduce(inputs, accord.Sum)
    first = rank * ((2 * size + 1) // size) + min(rank, (2 * size + 1) % size)
    rows_here = (2 * size + 1) // size + (1 if rank < (2 * size + 1) % size else 0)
    assert_close(host_view(block), total[first : first + rows_here], "reducescatter of a CUDA tensor")


def test_broadcast_of_cuda_tensors_is_in_place(rank, size):
    key = "emulated.broadcast"
    tensor = EmulatedCuda(rank_input(key, rank, (6,), np.float32))
    accord.broadcast_(tensor, root_rank=size - 1, name=key)
    assert_close(
        tensor.array, rank_input(key, size - 1, (6,), np.float32), "in-place broadcast of a CUDA tensor"
    )
    with pytest.raises(ValueError, match="in place"):
        accord.broadcast(tensor, root_rank=0)


def test_the_stream_reaches_the_producer_and_the_core(rank, size):
    tensor = EmulatedCuda(np.ones(4, np.float32))
    # A stream the emulation does not know is refused by the core, after the
    # producer was asked to synchronise with it.
    with pytest.raises(ValueError, match="not a stream of the host emulation"):
        _core.allreduce_async(tensor, tensor, "emulated.bad_stream", _core.OP_SUM, stream=12345)
    assert tensor.streams == [12345]
    # 0 (a framework's default stream) is the legacy default stream, spelled 1 for DLPack.
    _core.allreduce_async(tensor, tensor, "emulated.stream0", _core.OP_SUM, stream=0).wait()
    assert tensor.streams[-1] == 1
    assert_close(tensor.array, np.full(4, float(size), np.float32), "allreduce with stream 0")


def test_a_cuda_tensor_waits_on_a_stream_not_the_host(rank, size):
    tensor = EmulatedCuda(np.full(8, rank + 1.0, np.float32))
    handle = _core.allreduce_async(tensor, tensor, "emulated.wait_on_stream", _core.OP_SUM)
    handle.wait_on_stream(None)  # the legacy default stream waits for the result
    handle.wait()
    assert_close(tensor.array, np.full(8, size * (size + 1) / 2, np.float32), "allreduce waited on a stream")


@pytest.mark.parametrize("kind", half_rounding.KINDS)
@pytest.mark.parametrize("prescale,postscale", [(1.0, 1.0), (0.75, 3.0)])
def test_half_averages_round_as_horovods_gpu_path(rank, size, kind, prescale, postscale):
    """Without NCCL (MPI through host memory, as here) Horovod's GPU path sums pairwise, rounding
    each sum, and scales by postscale / size rounded to float16 (the prescale likewise, before):
    bit for bit, as half_rounding.py's CPU reference with the factors rounded so. bfloat16, which
    Horovod does not scale, keeps float factors."""
    every = [half_rounding.rank_bits(21, r, 3000, kind) for r in range(size)]
    tensor = EmulatedCuda(every[rank].view(np.float16 if kind == "float16" else np.int16).copy())
    name = f"emulated.half.{kind}.{prescale}"
    _core.allreduce_async(
        tensor,
        tensor,
        name=name,
        op=core_op(accord.Average),
        prescale_factor=prescale,
        postscale_factor=postscale,
        dtype_override=None if kind == "float16" else "bfloat16",
    ).wait()

    def rounded(factor):
        return float(np.float16(np.float32(factor))) if kind == "float16" else factor

    ready = [half_rounding.scaled(x, kind, rounded(prescale)) for x in every]
    candidates = [
        half_rounding.scaled(s, kind, rounded(postscale / size)) for s in half_rounding.sums(ready, kind)
    ]
    got = tensor.array.view(np.uint16)
    bad = half_rounding.mismatches(got, candidates)
    assert bad.size == 0, (
        f"rank {rank}: {kind}: {bad.size} of {got.size} elements differ, the first at "
        f"{int(bad[0])}: got bits {int(got[bad[0]]):#06x}, expected one of "
        f"{sorted({int(c[bad[0]]) for c in candidates})}"
    )
    everyone = accord.allgather(got.view(np.int16).reshape(1, -1).copy(), name=name + ".check")
    assert (everyone == everyone[0]).all(), f"rank {rank}: the ranks' results differ"


def test_cuda_and_cpu_tensors_do_not_mix_in_a_group(rank, size):
    with pytest.raises(ValueError, match="must all be on the CPU or all on the GPU"):
        accord.grouped_allreduce(
            [np.ones(2, np.float32), EmulatedCuda(np.ones(2, np.float32))], name="emulated.mixed"
        )


def test_an_output_on_the_device_cannot_be_viewed_by_numpy(rank, size):
    gathered = accord.allgather(EmulatedCuda(np.ones((1, 2), np.float32)), name="emulated.numpy_view")
    with pytest.raises(ValueError, match="cuda:0"):
        np.asarray(gathered)
