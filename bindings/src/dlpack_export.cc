#include "dlpack_export.h"

#include <pybind11/stl.h>

#include <cstdlib>
#include <cstring>
#include <new>

#include "accord/accord.h"
#include "dlpack_import.h"
#include "errors.h"

namespace py = pybind11;

namespace accord::python {

namespace {

// One output: the DLManagedTensor and the storage its fields point at.
struct OwnedOutput {
  DLManagedTensor managed{};
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
  void* data = nullptr;
  int cuda_ordinal = -1;  // device memory from the core (>= 0), or host memory
};

void DeleteOwnedOutput(DLManagedTensor* managed) {
  auto* owned = static_cast<OwnedOutput*>(managed->manager_ctx);
  if (owned->cuda_ordinal >= 0) {
    FreeDeviceMemory(owned->cuda_ordinal, owned->data);
  } else {
    std::free(owned->data);
  }
  delete owned;
}

// Whether the interpreter can still run Python code (calls from the
// coordinator thread must not try after it has begun to finalize).
bool InterpreterAlive() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsInitialized() && !Py_IsFinalizing();
#else
  return Py_IsInitialized() && !_Py_IsFinalizing();
#endif
}

// The capsule's destructor: delete the tensor unless a consumer took it
// (consumers rename the capsule to "used_dltensor").
void CapsuleDestructor(PyObject* capsule) {
  if (!PyCapsule_IsValid(capsule, "dltensor")) return;
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
  if (managed && managed->deleter) managed->deleter(managed);
}

std::string DescribeDLDataType(DLDataType t) {
  switch (t.code) {
    case kDLInt: return "int" + std::to_string(t.bits);
    case kDLUInt: return "uint" + std::to_string(t.bits);
    case kDLFloat: return "float" + std::to_string(t.bits);
    case kDLBfloat: return "bfloat" + std::to_string(t.bits);
    case kDLBoolCode: return "bool";
    default: return "code" + std::to_string(t.code) + "_" + std::to_string(t.bits);
  }
}

}  // namespace

OutputStore::OutputStore(std::map<DataType, DLDataType> described_as, py::object allocate)
    : described_as_(std::move(described_as)) {
  if (!allocate.is_none()) allocate_ = allocate.release().ptr();
}

OutputStore::~OutputStore() {
  for (auto& [data, managed] : outputs_) managed->deleter(managed);
  // The last reference may go on the coordinator thread (with the
  // allocator it made): Python objects are dropped with the GIL taken, or
  // leaked once the interpreter is gone.
  if ((!allocate_ && framework_outputs_.empty()) || !InterpreterAlive()) return;
  py::gil_scoped_acquire gil;
  for (auto& [data, object] : framework_outputs_) Py_DECREF(object);
  Py_XDECREF(allocate_);
}

Allocator OutputStore::MakeAllocator() {
  std::shared_ptr<OutputStore> self = shared_from_this();
  return [self](DataType dtype, const Shape& shape, Device device) { return self->Allocate(dtype, shape, device); };
}

Result<TensorView> OutputStore::AllocateThroughFramework(DataType dtype, const Shape& shape, Device device) {
  if (!InterpreterAlive()) return Status::ShutDown("the Python interpreter is shutting down; no output was allocated");
  py::gil_scoped_acquire gil;
  TensorView view;
  view.dtype = dtype;
  view.shape = shape;
  view.device = device;
  try {
    py::tuple made =
        py::reinterpret_borrow<py::object>(allocate_)(py::tuple(py::cast(shape)), DataTypeName(dtype), device.ordinal);
    py::object tensor = made[0];
    view.data = reinterpret_cast<void*>(made[1].cast<uintptr_t>());
    if (!view.data && view.num_elements() > 0) return Status::Internal("the output allocator returned a null pointer");
    std::lock_guard<std::mutex> lock(mutex_);
    framework_outputs_[view.data] = tensor.release().ptr();
  } catch (py::error_already_set& e) {
    return Status::Internal(std::string("the output allocator raised ") + e.what());
  } catch (const std::exception& e) {
    return Status::Internal(std::string("the output allocator did not return (tensor, data pointer): ") + e.what());
  }
  return view;
}

Result<TensorView> OutputStore::Allocate(DataType dtype, const Shape& shape, Device device) {
  const bool cuda = device.type == DeviceType::kCUDA;
  if (cuda && allocate_) return AllocateThroughFramework(dtype, shape, device);
  TensorView view;
  view.dtype = dtype;
  view.shape = shape;
  view.device = device;
  // At least one byte, so that every output (even an empty one) has its own
  // address to be found by in Take().
  const size_t bytes = std::max<size_t>(view.size_bytes(), 1);
  void* data = nullptr;
  if (cuda) {
    ACCORD_ASSIGN_OR_RETURN(data, AllocateDeviceMemory(device.ordinal, bytes));
  } else {
    data = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!data) return Status::Internal("out of memory allocating an output of " + std::to_string(bytes) + " bytes");
  }
  auto* owned = new (std::nothrow) OwnedOutput();
  if (!owned) {
    if (cuda) {
      FreeDeviceMemory(device.ordinal, data);
    } else {
      std::free(data);
    }
    return Status::Internal("out of memory allocating an output descriptor");
  }
  owned->data = data;
  owned->cuda_ordinal = cuda ? device.ordinal : -1;
  owned->shape = shape;
  owned->strides.assign(shape.size(), 1);
  for (int i = static_cast<int>(shape.size()) - 2; i >= 0; --i)
    owned->strides[i] = owned->strides[i + 1] * shape[i + 1];
  DLTensor& t = owned->managed.dl_tensor;
  t.data = data;
  t.device = cuda ? DLDevice{kDLCUDA, device.ordinal} : DLDevice{kDLCPU, 0};
  t.ndim = static_cast<int>(shape.size());
  auto it = described_as_.find(dtype);
  t.dtype = it != described_as_.end() ? it->second : ToDLDataType(dtype);
  t.shape = owned->shape.data();
  t.strides = owned->strides.data();
  t.byte_offset = 0;
  owned->managed.manager_ctx = owned;
  owned->managed.deleter = DeleteOwnedOutput;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    outputs_[data] = &owned->managed;
  }
  view.data = data;
  return view;
}

py::object OutputStore::TakeFrameworkTensor(const void* data) {
  PyObject* object = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = framework_outputs_.find(data);
    if (it == framework_outputs_.end()) return py::none();
    object = it->second;
    framework_outputs_.erase(it);
  }
  return py::reinterpret_steal<py::object>(object);
}

DLManagedTensor* OutputStore::Take(const void* data) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = outputs_.find(data);
  if (it == outputs_.end()) return nullptr;
  DLManagedTensor* managed = it->second;
  outputs_.erase(it);
  return managed;
}

DLPackTensor::DLPackTensor(DLManagedTensor* managed)
    : managed_(managed),
      shape_(managed->dl_tensor.shape, managed->dl_tensor.shape + managed->dl_tensor.ndim),
      data_ptr_(reinterpret_cast<uintptr_t>(managed->dl_tensor.data)),
      dtype_(DescribeDLDataType(managed->dl_tensor.dtype)),
      device_(managed->dl_tensor.device) {}

DLPackTensor::~DLPackTensor() {
  if (managed_) managed_->deleter(managed_);
}

py::capsule DLPackTensor::ToCapsule(const py::object& stream) {
  if (!stream.is_none() && device_.device_type == kDLCPU) {
    // CPU data: there is no stream to synchronise with. The DLPack protocol
    // allows only None (or -1) for CPU producers.
    if (!py::isinstance<py::int_>(stream) || stream.cast<int64_t>() != -1) {
      ThrowValueError("__dlpack__: stream must be None for a CPU tensor");
    }
  }
  if (!managed_) ThrowValueError("this accord output has already been exported through __dlpack__ (once only)");
  if (viewed_) {
    ThrowValueError(
        "this accord output is already viewed through __array_interface__ (e.g. by numpy.asarray); "
        "it cannot also be exported through __dlpack__");
  }
  py::capsule capsule(managed_, "dltensor", &CapsuleDestructor);
  managed_ = nullptr;
  return capsule;
}

py::tuple DLPackTensor::Device() const {
  return py::make_tuple(static_cast<int>(device_.device_type), device_.device_id);
}

py::dict DLPackTensor::ArrayInterface() {
  if (!managed_) ThrowValueError("this accord output has already been exported through __dlpack__");
  if (device_.device_type != kDLCPU) {
    ThrowValueError("this accord output is on cuda:" + std::to_string(device_.device_id) +
                    ": numpy cannot view it; use the framework's from_dlpack (e.g. cupy.from_dlpack)");
  }
  const DLDataType t = managed_->dl_tensor.dtype;
  std::string typestr;
  const std::string bytes = std::to_string(t.bits / 8);
  switch (t.code) {
    case kDLInt: typestr = "<i" + bytes; break;
    case kDLUInt: typestr = "<u" + bytes; break;
    case kDLFloat: typestr = "<f" + bytes; break;
    case kDLBoolCode: typestr = "|b1"; break;
    default:
      ThrowValueError("an accord output of dtype " + dtype_ +
                      " has no numpy equivalent; use torch.utils.dlpack.from_dlpack (or pass a uint16 view)");
  }
  if (t.bits == 8) typestr[0] = '|';
  viewed_ = true;
  return py::dict(py::arg("version") = 3, py::arg("shape") = py::tuple(py::cast(shape_)), py::arg("typestr") = typestr,
                  py::arg("data") = py::make_tuple(data_ptr_, false), py::arg("strides") = py::none());
}

}  // namespace accord::python
