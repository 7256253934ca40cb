#include "dlpack_import.h"

#include <cstring>
#include <utility>

#include "errors.h"

namespace py = pybind11;

namespace accord::python {

namespace {

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

// Calls `dlpack` (the object's bound __dlpack__) after checking the device,
// so that no stream handshake ever happens for a device we would refuse
// anyway. A CUDA producer gets the consumer's stream.
py::object CallDlpack(py::handle object, const py::object& dlpack, const TensorLabel& what, const StreamArg& stream) {
  bool cuda = false;
  if (py::object device_method = AttributeOrNull(object, Names().dlpack_device)) {
    PyObject* result = PyObject_CallNoArgs(device_method.ptr());
    if (!result) throw py::error_already_set();
    py::tuple device = py::reinterpret_steal<py::object>(result);
    cuda = ValueOrThrow(DeviceFromDLPack(what, device[0].cast<int>(), device[1].cast<int>())).type == DeviceType::kCUDA;
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

DataType ParseDataType(const std::string& name) { return ValueOrThrow(DataTypeFromName(name)); }

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

  result.view_ = ValueOrThrow(ViewOfDLTensor(managed->dl_tensor, what, dtype_override));
  result.dl_dtype_ = managed->dl_tensor.dtype;
  return result;
}

}  // namespace accord::python
