// Outputs that the core allocates (allgather, alltoall, reducescatter), and
// how they leave as DLPack tensors without a copy.
//
// Ownership, step by step:
//   1. Enqueue makes an OutputStore and hands the core an Allocator that
//      captures it. The coordinator thread calls the allocator (no GIL) once
//      the output's shape is negotiated; each call makes a DLManagedTensor
//      whose deleter frees the memory, and the store keeps it, keyed by its
//      data pointer.
//   2. When the handle has completed, Handle.outputs() takes each output's
//      DLManagedTensor out of the store (matched by the data pointer in the
//      core's output view) and wraps it in a DLPackTensor.
//   3. DLPackTensor.__dlpack__() moves it into a "dltensor" capsule; the
//      consumer (numpy.from_dlpack, torch.utils.dlpack.from_dlpack) renames
//      the capsule and calls the deleter when its array dies. A capsule or
//      wrapper that nobody consumes deletes the tensor itself.
//   Anything still in the store when the last reference to it goes (the
//   handle failed, or outputs() was never called) is freed then.
//
// Deleters here free plain or device memory only, so they may run on any
// thread, with or without the GIL.
#pragma once

#include <dlpack/dlpack.h>
#include <pybind11/pybind11.h>

#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "accord/tensor.h"

namespace accord::python {

class OutputStore : public std::enable_shared_from_this<OutputStore> {
 public:
  // `described_as` says which DLPack dtype to give an output of each accord
  // dtype (the input's own description, so that a uint8 view passed with
  // dtype_override="bool" gets uint8 outputs back). Missing entries use
  // ToDLDataType().
  //
  // CUDA outputs come from `allocate` when it is a Python callable
  // (shape tuple, accord dtype name, device ordinal) -> (tensor, data
  // pointer): a framework's own allocation (accord.torch passes one that
  // makes torch tensors on the producer's stream). The coordinator thread
  // calls it holding the GIL for the call; the store keeps the tensor.
  // Without it, CUDA outputs are device memory from the core
  // (AllocateDeviceMemory), handed out through DLPack like CPU ones.
  explicit OutputStore(std::map<DataType, DLDataType> described_as, pybind11::object allocate = pybind11::none());
  // Drops the Python objects it still holds, taking the GIL for that (only
  // when it holds some).
  ~OutputStore();
  OutputStore(const OutputStore&) = delete;
  OutputStore& operator=(const OutputStore&) = delete;

  // An allocator for the core; it keeps this store alive. Coordinator thread.
  Allocator MakeAllocator();
  // Removes and returns the output whose data starts at `data`, or null.
  // Any thread.
  DLManagedTensor* Take(const void* data);
  // Removes and returns the framework tensor whose data starts at `data`,
  // or None. GIL held.
  pybind11::object TakeFrameworkTensor(const void* data);

 private:
  Result<TensorView> Allocate(DataType dtype, const Shape& shape, Device device);
  // A CUDA output through the Python allocator.
  Result<TensorView> AllocateThroughFramework(DataType dtype, const Shape& shape, Device device);

  const std::map<DataType, DLDataType> described_as_;
  // The framework's allocator (an owned reference), or null. A raw pointer
  // because the store may be destroyed without the GIL.
  PyObject* allocate_ = nullptr;
  std::mutex mutex_;
  std::unordered_map<const void*, DLManagedTensor*> outputs_;     // GUARDED_BY(mutex_)
  std::unordered_map<const void*, PyObject*> framework_outputs_;  // GUARDED_BY(mutex_); owned references
};

// A tensor handed to Python: a DLManagedTensor that leaves in one of two ways.
//   - __dlpack__() moves it into a capsule, once (numpy 1.24's from_dlpack
//     takes only objects with __dlpack__, not bare capsules; torch takes both).
//   - __array_interface__ lets numpy.asarray() view the memory while this
//     object stays alive as the array's base. Unlike numpy.from_dlpack, which
//     marks its arrays read-only, this gives writeable arrays, so accord's
//     numpy layer uses it. After it has been used __dlpack__ refuses, since
//     the memory must stay where the arrays see it.
// Python-side methods need the GIL.
class DLPackTensor {
 public:
  explicit DLPackTensor(DLManagedTensor* managed);
  ~DLPackTensor();
  DLPackTensor(const DLPackTensor&) = delete;
  DLPackTensor& operator=(const DLPackTensor&) = delete;

  // __dlpack__(stream=None): a "dltensor" capsule; raises after the first
  // call. A CUDA output is complete once its handle is, so any consumer
  // stream may use it at once.
  pybind11::capsule ToCapsule(const pybind11::object& stream);
  // __dlpack_device__(): (kDLCPU, 0) or (kDLCUDA, ordinal).
  pybind11::tuple Device() const;
  // __array_interface__ (version 3); raises for bfloat16, which numpy lacks,
  // and for CUDA outputs.
  pybind11::dict ArrayInterface();

  const std::vector<int64_t>& shape() const { return shape_; }
  uintptr_t data_ptr() const { return data_ptr_; }
  bool consumed() const { return managed_ == nullptr; }
  std::string dtype() const { return dtype_; }

 private:
  DLManagedTensor* managed_;  // null once exported through __dlpack__
  bool viewed_ = false;       // __array_interface__ was used: __dlpack__ refuses
  // Copies for inspection after export.
  std::vector<int64_t> shape_;
  uintptr_t data_ptr_;
  std::string dtype_;
  DLDevice device_;
};

}  // namespace accord::python
