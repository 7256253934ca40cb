// Turning Python objects that speak DLPack into the core's TensorView.
//
// An input is any object with `__dlpack__` (torch.Tensor, numpy.ndarray,
// CuPy, JAX, ...) or a bare "dltensor" PyCapsule. Importing one follows the
// DLPack protocol: call `__dlpack__()`, take the DLManagedTensor out of the
// capsule and rename the capsule "used_dltensor", which makes this module
// responsible for calling the tensor's deleter. An ImportedTensor does that
// when it is destroyed, and until then it also holds the producer object, so
// the memory stays valid while the coordinator thread reads or writes it
// without the GIL. What is checked about the DLTensor is in dlpack_view.h.
//
// Thread safety: create and destroy ImportedTensor with the GIL held (a
// producer's deleter may touch Python objects, as numpy's does).
#pragma once

#include <dlpack/dlpack.h>
#include <pybind11/pybind11.h>

#include <optional>
#include <string>

#include "accord/tensor.h"
#include "dlpack_view.h"

namespace accord::python {

// The stream argument of the enqueue functions: None, or a CUDA stream as an
// int (a cudaStream_t; 0 and 1 both mean the legacy default stream).
using StreamArg = std::optional<int64_t>;
// The native handle the core takes (null: the legacy default stream).
void* NativeStream(const StreamArg& stream);

class ImportedTensor {
 public:
  ImportedTensor() = default;
  ImportedTensor(const ImportedTensor&) = delete;
  ImportedTensor& operator=(const ImportedTensor&) = delete;
  ImportedTensor(ImportedTensor&& other) noexcept;
  ImportedTensor& operator=(ImportedTensor&& other) noexcept;
  ~ImportedTensor();

  // Memory described by the caller instead of by DLPack (the torch
  // adapter's fast path): only `owner`, which keeps that memory alive, is
  // held until this is destroyed; view() is empty. Nothing is checked here.
  static ImportedTensor Borrowed(pybind11::object owner);

  const TensorView& view() const { return view_; }
  // The element type as the producer described it (before any dtype
  // override); outputs allocated for this input are described the same way.
  DLDataType dl_dtype() const { return dl_dtype_; }

 private:
  friend ImportedTensor ImportTensor(pybind11::handle, const TensorLabel&, const std::optional<std::string>&,
                                     const StreamArg&);
  void Release();

  TensorView view_;
  DLDataType dl_dtype_{};
  DLManagedTensor* managed_ = nullptr;  // ours to delete
  pybind11::object source_;             // the producer object (or the capsule itself)
  pybind11::object capsule_;            // the capsule, renamed "used_dltensor"
};

// Imports `object` (described as `what`, e.g. "input 2", in error messages).
// A bare "dltensor" capsule is the cheapest input: no attribute lookups.
// `dtype_override` names an accord dtype ("bool", "bfloat16", ...) of the same
// element size to use instead of the producer's: the way to pass bool data
// through producers whose DLPack export refuses bool (a uint8 view).
// CPU tensors (page-locked ones too) and CUDA tensors are accepted. For a
// CUDA tensor the producer is asked, through DLPack's stream handshake, to
// make `stream` (the stream the core will record its ready event on; None:
// the legacy default stream) wait for the tensor's pending work.
// Raises TypeError for an object that does not speak DLPack, and ValueError
// for a tensor on another device, non-contiguous, or of an unsupported dtype.
ImportedTensor ImportTensor(pybind11::handle object, const TensorLabel& what,
                            const std::optional<std::string>& dtype_override, const StreamArg& stream = std::nullopt);

// The accord dtype named `name`, or ValueError.
DataType ParseDataType(const std::string& name);

// The DLPack description of an accord dtype (bool is described as uint8, the
// form numpy 1.24 and torch 1.13 can read).
DLDataType ToDLDataType(DataType dtype);

}  // namespace accord::python
