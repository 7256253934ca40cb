#include "dlpack_view.h"

#include <cstring>
#include <limits>

namespace accord::python {

namespace {

const char* DeviceTypeName(int32_t type) {
  switch (type) {
    case kDLCPU: return "cpu";
    case kDLCUDA: return "cuda";
    case kDLCUDAHost: return "cuda_host";
    case kDLOpenCL: return "opencl";
    case kDLVulkan: return "vulkan";
    case kDLMetal: return "metal";
    case kDLROCM: return "rocm";
    case kDLROCMHost: return "rocm_host";
    case kDLCUDAManaged: return "cuda_managed";
    default: return "an unknown device";
  }
}

// The device type code of `device`. Newer producers use codes past the last
// enumerator of the header we compile against (kDLCUDAManaged = 13 in 0.6;
// 1.0 has kDLHexagon = 16, kDLMAIA = 17), which are outside the range of its
// DLDeviceType: loading such a value as the enum is undefined behaviour, so
// the int behind it is read instead.
int32_t DeviceTypeCode(const DLDevice& device) {
  static_assert(sizeof(device.device_type) == sizeof(int32_t), "DLDeviceType is stored as an int32");
  int32_t code;
  std::memcpy(&code, &device.device_type, sizeof(code));
  return code;
}

std::string DLDataTypeToString(DLDataType t) {
  const char* code = "code";
  switch (t.code) {
    case kDLInt: code = "int"; break;
    case kDLUInt: code = "uint"; break;
    case kDLFloat: code = "float"; break;
    case kDLBfloat: code = "bfloat"; break;
    case kDLComplex: code = "complex"; break;
    case kDLBoolCode: code = "bool"; break;
    default: break;
  }
  std::string s = std::string(code) + std::to_string(t.bits);
  if (t.lanes != 1) s += "x" + std::to_string(t.lanes);
  return s;
}

// The accord dtype of a DLPack dtype, or false.
bool FromDLDataType(DLDataType t, DataType* out) {
  if (t.lanes != 1) return false;
  switch (t.code) {
    case kDLUInt:
      if (t.bits == 8) return *out = DataType::kUInt8, true;
      return false;
    case kDLInt:
      switch (t.bits) {
        case 8: return *out = DataType::kInt8, true;
        case 16: return *out = DataType::kInt16, true;
        case 32: return *out = DataType::kInt32, true;
        case 64: return *out = DataType::kInt64, true;
        default: return false;
      }
    case kDLFloat:
      switch (t.bits) {
        case 16: return *out = DataType::kFloat16, true;
        case 32: return *out = DataType::kFloat32, true;
        case 64: return *out = DataType::kFloat64, true;
        default: return false;
      }
    case kDLBfloat:
      if (t.bits == 16) return *out = DataType::kBFloat16, true;
      return false;
    case kDLBoolCode:
      if (t.bits == 8) return *out = DataType::kBool, true;
      return false;
    default: return false;
  }
}

std::string SupportedDtypes() {
  std::string s;
  for (int i = 0; i < kNumDataTypes; ++i) {
    s += (i ? ", " : "") + std::string(DataTypeName(static_cast<DataType>(i)));
  }
  return s;
}

std::string ShapeText(const DLTensor& t) {
  std::string s = "[";
  for (int i = 0; i < t.ndim; ++i) s += (i ? ", " : "") + std::to_string(t.shape[i]);
  return s + "]";
}

// The product of the non-zero dimensions of a shape whose dimensions are all
// >= 0, or nullopt when it does not fit in an int64. A tensor with a zero
// dimension has no elements, but the core still multiplies its other
// dimensions (the elements of a row, of the whole tensor), so those products
// must fit too.
std::optional<int64_t> NonZeroProduct(const DLTensor& t) {
  int64_t product = 1;
  for (int i = 0; i < t.ndim; ++i) {
    if (t.shape[i] != 0 && __builtin_mul_overflow(product, t.shape[i], &product)) return std::nullopt;
  }
  return product;
}

bool HasZeroDim(const DLTensor& t) {
  for (int i = 0; i < t.ndim; ++i) {
    if (t.shape[i] == 0) return true;
  }
  return false;
}

// Compact row-major: NULL strides, or strides equal to the row-major ones
// wherever they matter (a dimension of size 1 may carry any stride, and a
// tensor with no elements has no layout at all). The shape has been checked:
// no dimension is negative and the product fits in an int64, so the running
// product below cannot overflow.
bool IsRowMajor(const DLTensor& t) {
  if (!t.strides || HasZeroDim(t)) return true;
  int64_t expected = 1;
  for (int i = t.ndim - 1; i >= 0; --i) {
    if (t.shape[i] != 1 && t.strides[i] != expected) return false;
    expected *= t.shape[i];
  }
  return true;
}

std::string StridesText(const DLTensor& t) {
  std::string s = "[";
  for (int i = 0; i < t.ndim; ++i) s += (i ? ", " : "") + std::to_string(t.strides[i]);
  return s + "]";
}

}  // namespace

Result<Device> DeviceFromDLPack(const TensorLabel& what, int32_t device_type, int32_t device_id) {
  switch (device_type) {
    case kDLCPU:
    case kDLCUDAHost: return Device::CPU();
    case kDLCUDA:
    case kDLCUDAManaged: return Device::CUDA(device_id);
    default:
      return Status::InvalidArgument(what.str() + " is on " + DeviceTypeName(device_type) + ":" +
                                     std::to_string(device_id) +
                                     ", but accord runs collectives on CPU and CUDA tensors only; move it to one of "
                                     "those first");
  }
}

Result<DataType> DataTypeFromName(const std::string& name) {
  for (int i = 0; i < kNumDataTypes; ++i) {
    const auto dtype = static_cast<DataType>(i);
    if (name == DataTypeName(dtype)) return dtype;
  }
  return Status::InvalidArgument("unknown dtype '" + name + "'; accord supports " + SupportedDtypes());
}

Result<TensorView> ViewOfDLTensor(const DLTensor& t, const TensorLabel& what,
                                  const std::optional<std::string>& dtype_override) {
  Result<Device> device = DeviceFromDLPack(what, DeviceTypeCode(t.device), t.device.device_id);
  if (!device.ok()) return device.status();
  if (t.ndim < 0 || (t.ndim > 0 && !t.shape)) {
    return Status::InvalidArgument(what.str() + " has a malformed DLPack shape (ndim " + std::to_string(t.ndim) +
                                   (t.shape ? "" : ", no shape array") + ")");
  }
  for (int i = 0; i < t.ndim; ++i) {
    if (t.shape[i] < 0) {
      return Status::InvalidArgument(what.str() + " has a negative dimension (shape " + ShapeText(t) + ")");
    }
  }
  const std::optional<int64_t> product = NonZeroProduct(t);
  if (!product) {
    return Status::InvalidArgument(what.str() + " has shape " + ShapeText(t) +
                                   ", whose number of elements does not fit in 64 bits");
  }
  if (!IsRowMajor(t)) {
    return Status::InvalidArgument(what.str() + " is not contiguous (shape " + ShapeText(t) + ", strides " +
                                   StridesText(t) +
                                   "); accord needs C-contiguous (row-major) tensors: make a contiguous copy first");
  }
  DataType dtype;
  if (!FromDLDataType(t.dtype, &dtype)) {
    return Status::InvalidArgument(what.str() + " has dtype " + DLDataTypeToString(t.dtype) +
                                   ", which accord does not support; it supports " + SupportedDtypes());
  }
  if (dtype_override) {
    Result<DataType> wanted = DataTypeFromName(*dtype_override);
    if (!wanted.ok()) return wanted.status();
    if (DataTypeSize(*wanted) != DataTypeSize(dtype)) {
      return Status::InvalidArgument(what.str() + ": dtype_override '" + *dtype_override + "' has " +
                                     std::to_string(DataTypeSize(*wanted)) + "-byte elements but the tensor is " +
                                     DataTypeName(dtype) + " (" + std::to_string(DataTypeSize(dtype)) + " bytes)");
    }
    dtype = *wanted;
  }
  int64_t bytes = 0;
  if (__builtin_mul_overflow(*product, static_cast<int64_t>(DataTypeSize(dtype)), &bytes)) {
    return Status::InvalidArgument(what.str() + " has shape " + ShapeText(t) + " of " + DataTypeName(dtype) +
                                   ", whose size in bytes does not fit in 64 bits");
  }
  const int64_t elements = HasZeroDim(t) ? 0 : *product;
  const auto address = reinterpret_cast<uintptr_t>(t.data);
  if (address == 0 && (elements > 0 || t.byte_offset != 0)) {
    return Status::InvalidArgument(what.str() + " has no data pointer but " + std::to_string(elements) +
                                   " elements and a byte offset of " + std::to_string(t.byte_offset));
  }
  if (t.byte_offset > std::numeric_limits<uintptr_t>::max() - address) {
    return Status::InvalidArgument(what.str() + " has a byte offset of " + std::to_string(t.byte_offset) +
                                   ", which runs past the end of the address space");
  }
  TensorView view;
  view.data = reinterpret_cast<void*>(address + static_cast<uintptr_t>(t.byte_offset));
  view.dtype = dtype;
  view.shape.assign(t.shape, t.shape + t.ndim);
  view.device = *device;
  return view;
}

}  // namespace accord::python
