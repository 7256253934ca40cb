#include "dlpack_export.h"

#include <pybind11/stl.h>

#include <cstdlib>
#include <cstring>
#include <new>

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
};

void DeleteOwnedOutput(DLManagedTensor* managed) {
  auto* owned = static_cast<OwnedOutput*>(managed->manager_ctx);
  std::free(owned->data);
  delete owned;
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

OutputStore::OutputStore(std::map<DataType, DLDataType> described_as) : described_as_(std::move(described_as)) {}

OutputStore::~OutputStore() {
  for (auto& [data, managed] : outputs_) managed->deleter(managed);
}

Allocator OutputStore::MakeAllocator() {
  std::shared_ptr<OutputStore> self = shared_from_this();
  return [self](DataType dtype, const Shape& shape, Device device) { return self->Allocate(dtype, shape, device); };
}

Result<TensorView> OutputStore::Allocate(DataType dtype, const Shape& shape, Device device) {
  if (device.type != DeviceType::kCPU) {
    return Status::Unimplemented("accord's Python bindings allocate CPU outputs only, not " + device.ToString());
  }
  TensorView view;
  view.dtype = dtype;
  view.shape = shape;
  view.device = device;
  // At least one byte, so that every output (even an empty one) has its own
  // address to be found by in Take().
  const size_t bytes = std::max<size_t>(view.size_bytes(), 1);
  void* data = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (!data) return Status::Internal("out of memory allocating an output of " + std::to_string(bytes) + " bytes");
  auto* owned = new (std::nothrow) OwnedOutput();
  if (!owned) {
    std::free(data);
    return Status::Internal("out of memory allocating an output descriptor");
  }
  owned->data = data;
  owned->shape = shape;
  owned->strides.assign(shape.size(), 1);
  for (int i = static_cast<int>(shape.size()) - 2; i >= 0; --i) owned->strides[i] = owned->strides[i + 1] * shape[i + 1];
  DLTensor& t = owned->managed.dl_tensor;
  t.data = data;
  t.device = {kDLCPU, 0};
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
      dtype_(DescribeDLDataType(managed->dl_tensor.dtype)) {}

DLPackTensor::~DLPackTensor() {
  if (managed_) managed_->deleter(managed_);
}

py::capsule DLPackTensor::ToCapsule(const py::object& stream) {
  if (!stream.is_none()) {
    // CPU data: there is no stream to synchronise with. The DLPack protocol
    // allows only None (or -1) for CPU producers.
    if (!py::isinstance<py::int_>(stream) || stream.cast<int64_t>() != -1) {
      ThrowValueError("__dlpack__: stream must be None for a CPU tensor");
    }
  }
  if (!managed_) ThrowValueError("this accord output has already been exported through __dlpack__ (once only)");
  if (viewed_) {
    ThrowValueError("this accord output is already viewed through __array_interface__ (e.g. by numpy.asarray); "
                    "it cannot also be exported through __dlpack__");
  }
  py::capsule capsule(managed_, "dltensor", &CapsuleDestructor);
  managed_ = nullptr;
  return capsule;
}

py::tuple DLPackTensor::Device() const { return py::make_tuple(static_cast<int>(kDLCPU), 0); }

py::dict DLPackTensor::ArrayInterface() {
  if (!managed_) ThrowValueError("this accord output has already been exported through __dlpack__");
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
  return py::dict(py::arg("version") = 3, py::arg("shape") = py::tuple(py::cast(shape_)),
                  py::arg("typestr") = typestr, py::arg("data") = py::make_tuple(data_ptr_, false),
                  py::arg("strides") = py::none());
}

}  // namespace accord::python
