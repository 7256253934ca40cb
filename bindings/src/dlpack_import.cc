#include "dlpack_import.h"

#include <cstring>
#include <utility>

#include "errors.h"

namespace py = pybind11;

namespace accord::python {

namespace {

const char* DeviceTypeName(int type) {
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

// The accord device of a DLPack device, or ValueError. Page-locked host
// memory is CPU memory; managed memory is used on its GPU.
Device ToDevice(const TensorLabel& what, int type, int id) {
  switch (type) {
    case kDLCPU:
    case kDLCUDAHost:
      return Device::CPU();
    case kDLCUDA:
    case kDLCUDAManaged:
      return Device::CUDA(id);
    default:
      ThrowValueError(what.str() + " is on " + DeviceTypeName(type) + ":" + std::to_string(id) +
                      ", but accord runs collectives on CPU and CUDA tensors only; move it to one of those first");
  }
}

// What a CUDA consumer passes to __dlpack__(stream=...): the stream's int,
// with the legacy default stream spelled 1 (DLPack reserves 0).
int64_t DlpackStream(const StreamArg& stream) { return stream && *stream != 0 ? *stream : 1; }

// Attribute names as interned Python strings, made once (with the GIL) and
// never freed: looking an attribute up by a C string would build a new
// Python string on every call.
struct AttributeNames {
  PyObject* dlpack = PyUnicode_InternFromString("__dlpack__");
  PyObject* dlpack_device = PyUnicode_InternFromString("__dlpack_device__");
};

const AttributeNames& Names() {
  static const AttributeNames* names = new AttributeNames();
  return *names;
}

// object.<name>, or a null object if it has none. Like hasattr(), any error
// raised while looking the attribute up counts as "has none".
py::object AttributeOrNull(py::handle object, PyObject* name) {
  PyObject* value = PyObject_GetAttr(object.ptr(), name);
  if (!value) PyErr_Clear();
  return py::reinterpret_steal<py::object>(value);
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
    default:
      return false;
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

// Compact row-major: NULL strides, or strides equal to the row-major ones
// wherever they matter (a dimension of size 1 may carry any stride, and a
// tensor with no elements has no layout at all).
bool IsRowMajor(const DLTensor& t) {
  if (!t.strides) return true;
  for (int i = 0; i < t.ndim; ++i) {
    if (t.shape[i] == 0) return true;
  }
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

// Calls `dlpack` (the object's bound __dlpack__) after checking the device,
// so that no stream handshake ever happens for a device we would refuse
// anyway. A CUDA producer gets the consumer's stream.
py::object CallDlpack(py::handle object, const py::object& dlpack, const TensorLabel& what, const StreamArg& stream) {
  bool cuda = false;
  if (py::object device_method = AttributeOrNull(object, Names().dlpack_device)) {
    PyObject* result = PyObject_CallNoArgs(device_method.ptr());
    if (!result) throw py::error_already_set();
    py::tuple device = py::reinterpret_steal<py::object>(result);
    cuda = ToDevice(what, device[0].cast<int>(), device[1].cast<int>()).type == DeviceType::kCUDA;
  }
  try {
    PyObject* capsule = nullptr;
    if (cuda) {
      py::dict kwargs;
      kwargs["stream"] = py::int_(DlpackStream(stream));
      capsule = PyObject_Call(dlpack.ptr(), py::tuple().ptr(), kwargs.ptr());
    } else {
      capsule = PyObject_CallNoArgs(dlpack.ptr());
    }
    if (!capsule) throw py::error_already_set();
    return py::reinterpret_steal<py::object>(capsule);
  } catch (py::error_already_set& e) {
    // numpy raises BufferError (read-only or bool arrays), torch RuntimeError
    // (bool tensors, tensors that require grad).
    if (e.matches(PyExc_BufferError) || e.matches(PyExc_RuntimeError) || e.matches(PyExc_TypeError)) {
      py::raise_from(e, PyExc_ValueError,
                     (what.str() + " cannot be exported through DLPack: " + std::string(py::str(e.value())) +
                      " (bool data can be passed as a uint8 view with dtype_override='bool')")
                         .c_str());
      throw py::error_already_set();
    }
    throw;
  }
}

}  // namespace

ImportedTensor::ImportedTensor(ImportedTensor&& other) noexcept
    : view_(std::move(other.view_)),
      dl_dtype_(other.dl_dtype_),
      managed_(std::exchange(other.managed_, nullptr)),
      source_(std::move(other.source_)),
      capsule_(std::move(other.capsule_)) {}

ImportedTensor& ImportedTensor::operator=(ImportedTensor&& other) noexcept {
  if (this != &other) {
    Release();
    view_ = std::move(other.view_);
    dl_dtype_ = other.dl_dtype_;
    managed_ = std::exchange(other.managed_, nullptr);
    source_ = std::move(other.source_);
    capsule_ = std::move(other.capsule_);
  }
  return *this;
}

ImportedTensor::~ImportedTensor() { Release(); }

ImportedTensor ImportedTensor::Borrowed(py::object owner) {
  ImportedTensor t;
  t.source_ = std::move(owner);
  return t;
}

void ImportedTensor::Release() {
  if (managed_ && managed_->deleter) managed_->deleter(managed_);
  managed_ = nullptr;
}

DataType ParseDataType(const std::string& name) {
  for (int i = 0; i < kNumDataTypes; ++i) {
    const auto dtype = static_cast<DataType>(i);
    if (name == DataTypeName(dtype)) return dtype;
  }
  ThrowValueError("unknown dtype '" + name + "'; accord supports " + SupportedDtypes());
}

DLDataType ToDLDataType(DataType dtype) {
  switch (dtype) {
    case DataType::kUInt8: return {kDLUInt, 8, 1};
    case DataType::kInt8: return {kDLInt, 8, 1};
    case DataType::kInt16: return {kDLInt, 16, 1};
    case DataType::kInt32: return {kDLInt, 32, 1};
    case DataType::kInt64: return {kDLInt, 64, 1};
    case DataType::kFloat16: return {kDLFloat, 16, 1};
    case DataType::kBFloat16: return {kDLBfloat, 16, 1};
    case DataType::kFloat32: return {kDLFloat, 32, 1};
    case DataType::kFloat64: return {kDLFloat, 64, 1};
    case DataType::kBool: return {kDLUInt, 8, 1};
  }
  return {kDLUInt, 8, 1};
}

void* NativeStream(const StreamArg& stream) {
  return stream && *stream != 0 && *stream != 1 ? reinterpret_cast<void*>(static_cast<intptr_t>(*stream)) : nullptr;
}

ImportedTensor ImportTensor(py::handle object, const TensorLabel& what,
                            const std::optional<std::string>& dtype_override, const StreamArg& stream) {
  ImportedTensor result;
  py::object capsule;
  if (PyCapsule_CheckExact(object.ptr())) {
    capsule = py::reinterpret_borrow<py::object>(object);
  } else if (py::object dlpack = AttributeOrNull(object, Names().dlpack)) {
    capsule = CallDlpack(object, dlpack, what, stream);
    if (!PyCapsule_CheckExact(capsule.ptr())) {
      ThrowTypeError(what.str() + ": __dlpack__() returned a " +
                     std::string(py::str(py::type::of(capsule).attr("__name__"))) + ", not a PyCapsule");
    }
  } else {
    ThrowTypeError(what.str() +
                   " must be a tensor that supports DLPack (an object with __dlpack__, e.g. a numpy array or a "
                   "torch tensor) or a DLPack capsule, not " +
                   std::string(py::str(py::type::of(object).attr("__name__"))));
  }
  const char* capsule_name = PyCapsule_GetName(capsule.ptr());
  if (!capsule_name || std::strcmp(capsule_name, "dltensor") != 0) {
    PyErr_Clear();
    ThrowValueError(what.str() + " is a DLPack capsule that has already been consumed (a capsule can be used once)");
  }
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), "dltensor"));
  if (!managed) throw py::error_already_set();
  // From here on the tensor is ours: renaming stops the capsule's destructor
  // from deleting it.
  if (PyCapsule_SetName(capsule.ptr(), "used_dltensor") != 0) throw py::error_already_set();
  result.managed_ = managed;
  result.source_ = py::reinterpret_borrow<py::object>(object);
  result.capsule_ = std::move(capsule);

  const DLTensor& t = managed->dl_tensor;
  const Device device = ToDevice(what, t.device.device_type, t.device.device_id);
  if (t.ndim < 0 || (t.ndim > 0 && !t.shape)) ThrowValueError(what.str() + " has a malformed DLPack shape");
  if (!IsRowMajor(t)) {
    ThrowValueError(what.str() + " is not contiguous (shape " + ShapeText(t) + ", strides " + StridesText(t) +
                    "); accord needs C-contiguous (row-major) tensors: make a contiguous copy first");
  }
  DataType dtype;
  if (!FromDLDataType(t.dtype, &dtype)) {
    ThrowValueError(what.str() + " has dtype " + DLDataTypeToString(t.dtype) +
                    ", which accord does not support; it supports " + SupportedDtypes());
  }
  if (dtype_override) {
    const DataType wanted = ParseDataType(*dtype_override);
    if (DataTypeSize(wanted) != DataTypeSize(dtype)) {
      ThrowValueError(what.str() + ": dtype_override '" + *dtype_override + "' has " +
                      std::to_string(DataTypeSize(wanted)) + "-byte elements but the tensor is " +
                      DataTypeName(dtype) + " (" + std::to_string(DataTypeSize(dtype)) + " bytes)");
    }
    dtype = wanted;
  }
  result.dl_dtype_ = t.dtype;
  result.view_.data = static_cast<char*>(t.data) + t.byte_offset;
  result.view_.dtype = dtype;
  result.view_.shape.assign(t.shape, t.shape + t.ndim);
  result.view_.device = device;
  return result;
}

}  // namespace accord::python
