// What accord accepts from a DLPack producer, checked without Python.
//
// ImportTensor (dlpack_import.h) takes the DLManagedTensor out of a capsule;
// everything it then checks about the DLTensor (device, ndim, shape,
// strides, dtype, data pointer and byte offset) is here, as pure functions
// that return a Status instead of raising, so that they can be tested and
// fuzzed on DLTensors built by hand. The DLTensor is taken as the DLPack
// contract describes it: `shape` (and `strides`, when not null) hold `ndim`
// entries; nothing else about it is trusted.
//
// Pure functions; any thread may call them.
#pragma once

#include <dlpack/dlpack.h>

#include <cstdint>
#include <optional>
#include <string>

#include "accord/status.h"
#include "accord/tensor.h"

namespace accord::python {

// DLPack 0.8 added a bool type code; the 0.6 header Debian ships lacks it.
inline constexpr uint8_t kDLBoolCode = 6;

// How error messages name a tensor argument: "input", "output 2", ... . The
// text is built only when an error needs it, so that importing a tensor
// allocates no string on the success path.
class TensorLabel {
 public:
  TensorLabel(const char* role) : role_(role) {}  // NOLINT: implicit on purpose ("input")
  TensorLabel(const char* role, size_t index) : role_(role), index_(static_cast<long long>(index)) {}

  std::string str() const { return index_ < 0 ? std::string(role_) : role_ + (" " + std::to_string(index_)); }

 private:
  const char* role_;
  long long index_ = -1;
};

// The accord device of a DLPack device (its type code and id), or
// InvalidArgument naming `what` for a device other than CPU and CUDA.
// Page-locked host memory is CPU memory; managed memory is used on its GPU.
Result<Device> DeviceFromDLPack(const TensorLabel& what, int32_t device_type, int32_t device_id);

// The accord dtype named `name` ("float32", "bool", ...), or InvalidArgument
// listing the dtypes accord supports.
Result<DataType> DataTypeFromName(const std::string& name);

// The view of `t`: accord's device, dtype (or `dtype_override`, the name of
// an accord dtype of the same element size), shape, and data pointer (data
// plus byte offset). Every refusal is InvalidArgument (ValueError in Python)
// naming `what`: a device other than CPU and CUDA; a negative ndim, a null
// shape, a negative dimension, or dimensions whose product (zeros left out)
// in bytes does not fit in an int64; strides
// that are not row-major; a dtype accord does not support; an unknown or
// differently sized override; no data pointer for a tensor with elements
// or with a byte offset, or an offset that runs past the end of the address
// space.
Result<TensorView> ViewOfDLTensor(const DLTensor& t, const TensorLabel& what,
                                  const std::optional<std::string>& dtype_override);

}  // namespace accord::python
