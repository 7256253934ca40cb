// at::Tensor <-> the core's TensorView, the output allocator, and
// TensorHandle with its Operation and the orphan list.
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <c10/core/StreamGuard.h>

#include <algorithm>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "accord/torch/collectives.h"
#include "cuda_streams.h"
#include "operation.h"
#include "orphans.h"

namespace accord {
namespace torch {

// ------------------------------------------------------- dtypes and views

DataType to_data_type(c10::ScalarType type) {
  switch (type) {
    case at::kByte: return DataType::kUInt8;
    case at::kChar: return DataType::kInt8;
    case at::kShort: return DataType::kInt16;
    case at::kInt: return DataType::kInt32;
    case at::kLong: return DataType::kInt64;
    case at::kHalf: return DataType::kFloat16;
    case at::kBFloat16: return DataType::kBFloat16;
    case at::kFloat: return DataType::kFloat32;
    case at::kDouble: return DataType::kFloat64;
    case at::kBool: return DataType::kBool;
    default:
      throw Error(StatusCode::kInvalidArgument,
                  std::string("accord has no dtype for torch ") + c10::toString(type) +
                      "; supported: uint8, int8, int16, int32, int64, float16, bfloat16, float32, float64, bool");
  }
}

c10::ScalarType to_scalar_type(DataType dtype) {
  switch (dtype) {
    case DataType::kUInt8: return at::kByte;
    case DataType::kInt8: return at::kChar;
    case DataType::kInt16: return at::kShort;
    case DataType::kInt32: return at::kInt;
    case DataType::kInt64: return at::kLong;
    case DataType::kFloat16: return at::kHalf;
    case DataType::kBFloat16: return at::kBFloat16;
    case DataType::kFloat32: return at::kFloat;
    case DataType::kFloat64: return at::kDouble;
    case DataType::kBool: return at::kBool;
  }
  throw Error(StatusCode::kInvalidArgument, "unknown accord dtype id " + std::to_string(static_cast<int>(dtype)));
}

TensorView to_tensor_view(const at::Tensor& tensor) {
  if (!tensor.defined()) throw Error(StatusCode::kInvalidArgument, "to_tensor_view: the tensor is undefined");
  if (tensor.layout() != at::kStrided) {
    throw Error(StatusCode::kInvalidArgument, "to_tensor_view: only dense (strided) tensors can be viewed, not " +
                                                  c10::str(tensor.layout()) + " ones");
  }
  if (!tensor.is_contiguous()) {
    throw Error(StatusCode::kInvalidArgument, "to_tensor_view: the tensor must be contiguous (call .contiguous())");
  }
  TensorView view;
  view.dtype = to_data_type(tensor.scalar_type());
  view.shape.assign(tensor.sizes().begin(), tensor.sizes().end());
  view.data = tensor.data_ptr();
  const at::Device device = tensor.device();
  if (device.is_cuda()) {
    view.device = Device::CUDA(device.index());
  } else if (!device.is_cpu()) {
    throw Error(StatusCode::kInvalidArgument,
                "to_tensor_view: tensors on " + device.str() + " are not supported (CPU and CUDA tensors only)");
  }
  return view;
}

namespace {

c10::Device TorchDevice(const Device& device) {
  return device.type == DeviceType::kCUDA ? c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(device.ordinal))
                                          : c10::Device(c10::kCPU);
}

}  // namespace

namespace internal {

void CheckInput(const at::Tensor& tensor, const std::string& what) {
  if (!tensor.defined()) throw Error(StatusCode::kInvalidArgument, what + ": the tensor is undefined");
  if (tensor.layout() != at::kStrided) {
    throw Error(StatusCode::kInvalidArgument, what + ": only dense tensors are supported, got a " +
                                                  c10::str(tensor.layout()) + " tensor (convert it with to_dense())");
  }
  (void)to_data_type(tensor.scalar_type());  // throws for an unsupported dtype
  const c10::Device device = tensor.device();
  if (!device.is_cpu() && !device.is_cuda()) {
    throw Error(StatusCode::kInvalidArgument,
                what + ": tensors on " + device.str() + " are not supported (CPU and CUDA tensors only)");
  }
  RequireCuda(device, what);
}

Allocator MakeAllocator(const std::shared_ptr<OutputStore>& store, const std::optional<c10::Stream>& producer) {
  return [store, producer](DataType dtype, const Shape& shape, Device device) -> Result<TensorView> {
    try {
      std::optional<c10::StreamGuard> current;
      if (producer) current.emplace(*producer);
      at::Tensor output =
          at::empty(shape, at::TensorOptions().dtype(to_scalar_type(dtype)).device(TorchDevice(device)));
      TensorView view = to_tensor_view(output);
      std::lock_guard<std::mutex> lock(store->mutex);
      store->tensors.push_back(std::move(output));
      return view;
    } catch (const std::exception& error) {
      return Status::Internal(std::string("allocating an output tensor of shape ") + ShapeToString(shape) + " on " +
                              device.ToString() + " failed: " + error.what());
    }
  };
}

// --------------------------------------------------------------- orphans

namespace {

struct OrphanList {
  std::mutex mutex;
  std::vector<std::unique_ptr<TensorHandle::Operation>> operations;
};

// Deliberately leaked, like the core's runtime: operations may still be in
// flight while static destructors run at exit.
OrphanList& Orphans() {
  static OrphanList* list = new OrphanList();
  return *list;
}

}  // namespace

void AddOrphan(std::unique_ptr<TensorHandle::Operation> operation) {
  OrphanList& list = Orphans();
  std::lock_guard<std::mutex> lock(list.mutex);
  list.operations.push_back(std::move(operation));
}

void SweepOrphans() {
  OrphanList& list = Orphans();
  std::vector<std::unique_ptr<TensorHandle::Operation>> done;
  {
    std::lock_guard<std::mutex> lock(list.mutex);
    if (list.operations.empty()) return;
    auto finished = std::stable_partition(list.operations.begin(), list.operations.end(),
                                          [](const auto& op) { return !op->handle.Done(); });
    std::move(finished, list.operations.end(), std::back_inserter(done));
    list.operations.erase(finished, list.operations.end());
  }
  // `done` releases the tensors here, outside the lock.
}

}  // namespace internal

// ------------------------------------------------------------- Operation

void TensorHandle::Operation::Bind(const at::Tensor& tensor, CollectiveOptions* options) {
  device = tensor.device();
  if (!device.is_cuda()) return;
  producer = internal::CurrentStream(device);
  void* native = internal::NativeStream(*producer);
  if (options->stream != nullptr && options->stream != native) {
    throw Error(StatusCode::kInvalidArgument,
                "accord::torch: options.stream is not the current CUDA stream of " + device.str() +
                    "; the adapter takes the current stream as the producer's (make a stream current with "
                    "c10::cuda::CUDAStreamGuard instead of setting options.stream)");
  }
  options->stream = native;
}

at::Tensor TensorHandle::Operation::Stage(const at::Tensor& tensor, bool in_place, size_t part) {
  // Detached: the core works on the data and autograd must not see the
  // staging copy.
  at::Tensor data = tensor.detach();
  at::Tensor staged = data.is_contiguous() ? data : data.contiguous();
  keep_alive.push_back(staged);
  if (in_place) {
    outputs[part] = tensor;
    written.push_back(data);
    if (!staged.is_same(data)) copy_back.emplace_back(staged, data);
  }
  return staged;
}

void TensorHandle::Operation::Start(Result<Handle> enqueued) {
  internal::SweepOrphans();
  if (!enqueued.ok()) throw Error(enqueued.status());
  handle = std::move(enqueued).value();
}

Status TensorHandle::Operation::MakeResults(std::optional<c10::Stream> stream) {
  try {
    if (device.is_cuda() && !stream) stream = internal::CurrentStream(device);
    const std::vector<TensorView> views = handle.outputs();
    results.resize(outputs.size());
    for (size_t i = 0; i < outputs.size(); ++i) {
      if (outputs[i].defined()) {
        results[i] = outputs[i];
        continue;
      }
      if (i >= views.size()) return Status::Internal("the core returned no output for part " + std::to_string(i));
      const TensorView& view = views[i];
      if (allocated) {
        std::lock_guard<std::mutex> lock(allocated->mutex);
        for (const at::Tensor& t : allocated->tensors) {
          if (view.num_elements() > 0 && t.data_ptr() == view.data) results[i] = t;
        }
      }
      if (!results[i].defined()) {
        if (view.num_elements() != 0) {
          return Status::Internal("the output of part " + std::to_string(i) + " was not allocated here");
        }
        results[i] = at::empty(view.shape, at::TensorOptions().dtype(to_scalar_type(view.dtype)).device(device));
      }
    }
    c10::NoGradGuard no_grad;
    std::optional<c10::StreamGuard> current;
    if (stream) current.emplace(*stream);
    for (auto& [staging, target] : copy_back) {
      target.copy_(staging);
      // The staging copy is released before this copy has run on the
      // device: the caching allocator must not hand it out meanwhile.
      if (stream) staging.record_stream(*stream);
    }
    for (at::Tensor& t : written) {
      // The memory changed behind autograd's back: bump the version as an
      // in-place op would, so autograd notices if the tensor was saved.
      if (!t.is_inference()) t.unsafeGetTensorImpl()->bump_version();
    }
    results_on = stream;
    return Status::OK();
  } catch (const Error& error) {
    return error.status();
  } catch (const std::exception& error) {
    return Status::Internal(std::string("finishing the operation failed: ") + error.what());
  }
}

void TensorHandle::Operation::Finish(const Status& final_status) {
  status = final_status;
  finished = true;
  if (status.ok() && !results_on) status = MakeResults(std::nullopt);
  if (!status.ok()) results.clear();
  keep_alive.clear();
  copy_back.clear();
  written.clear();
  outputs.clear();
  allocated.reset();
}

void TensorHandle::Operation::Queue(const c10::Stream& stream) {
  const Status made = MakeResults(stream);
  if (!made.ok()) {
    results.clear();
    throw Error(made);
  }
}

void TensorHandle::Operation::Follow(const c10::Stream& stream) const {
  if (results_on) internal::StreamWaitsFor(stream, *results_on);
}

// ----------------------------------------------------------- TensorHandle

TensorHandle::TensorHandle() = default;
TensorHandle::TensorHandle(std::unique_ptr<Operation> operation) : operation_(std::move(operation)) {}
TensorHandle::TensorHandle(TensorHandle&& other) noexcept = default;

TensorHandle& TensorHandle::operator=(TensorHandle&& other) noexcept {
  if (this != &other) {
    TensorHandle old(std::move(*this));  // orphaned by its destructor if still in flight
    operation_ = std::move(other.operation_);
  }
  return *this;
}

TensorHandle::~TensorHandle() {
  if (operation_ && !operation_->finished && operation_->handle.valid() && !operation_->handle.Done()) {
    internal::AddOrphan(std::move(operation_));
  }
}

bool TensorHandle::poll() const {
  if (!operation_) throw Error(StatusCode::kPreconditionFailed, "TensorHandle::poll() on an empty handle");
  return operation_->finished || operation_->handle.Poll();
}

namespace {

// The results of a finished operation, for a caller on its current stream.
std::vector<at::Tensor> Results(const TensorHandle::Operation& op) {
  if (!op.status.ok()) throw Error(op.status);
  // Copies back queued on another stream by an earlier wait.
  if (op.device.is_cuda()) op.Follow(internal::CurrentStream(op.device));
  return op.results;
}

}  // namespace

std::vector<at::Tensor> TensorHandle::wait_all() {
  if (!operation_) throw Error(StatusCode::kPreconditionFailed, "TensorHandle::wait() on an empty handle");
  if (!operation_->finished) operation_->Finish(operation_->handle.Wait());
  return Results(*operation_);
}

std::vector<at::Tensor> TensorHandle::wait_all(std::chrono::milliseconds timeout) {
  if (!operation_) throw Error(StatusCode::kPreconditionFailed, "TensorHandle::wait() on an empty handle");
  if (!operation_->finished) {
    const Status status = operation_->handle.Wait(timeout);
    if (status.code() == StatusCode::kTimeout) throw Error(status);
    operation_->Finish(status);
  }
  return Results(*operation_);
}

std::vector<at::Tensor> TensorHandle::wait_all_on_stream() {
  if (!operation_) throw Error(StatusCode::kPreconditionFailed, "TensorHandle::wait_on_stream() on an empty handle");
  Operation& op = *operation_;
  if (!op.device.is_cuda()) return wait_all();
  const c10::Stream current = internal::CurrentStream(op.device);
  if (op.finished || op.results_on) {
    if (!op.status.ok()) throw Error(op.status);
    op.Follow(current);
    return op.results;
  }
  const Status queued = op.handle.WaitOnStream(internal::NativeStream(current));
  // A failure of one part: the others may still be in flight, so the
  // operation (and its tensors) stays until it has completed.
  if (!queued.ok()) throw Error(queued);
  op.Queue(current);
  return op.results;
}

namespace {

at::Tensor Single(std::vector<at::Tensor> results) {
  if (results.size() != 1) {
    throw Error(StatusCode::kInvalidArgument, "TensorHandle::wait(): the operation has " +
                                                  std::to_string(results.size()) +
                                                  " outputs (a grouped operation); use wait_all()");
  }
  return std::move(results[0]);
}

}  // namespace

at::Tensor TensorHandle::wait() { return Single(wait_all()); }
at::Tensor TensorHandle::wait(std::chrono::milliseconds timeout) { return Single(wait_all(timeout)); }
at::Tensor TensorHandle::wait_on_stream() { return Single(wait_all_on_stream()); }

std::vector<int64_t> TensorHandle::received_splits() const {
  if (!operation_) throw Error(StatusCode::kPreconditionFailed, "TensorHandle::received_splits() on an empty handle");
  return operation_->handle.received_splits();
}

const Handle& TensorHandle::core_handle() const {
  if (!operation_) throw Error(StatusCode::kPreconditionFailed, "TensorHandle::core_handle() on an empty handle");
  return operation_->handle;
}

}  // namespace torch
}  // namespace accord
