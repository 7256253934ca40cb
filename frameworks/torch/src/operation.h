// TensorHandle::Operation: everything one enqueued collective needs until it
// completes, and the code that turns the core's result into at::Tensors.
//
// CUDA tensors. An operation's tensors are all on one device. For a CUDA
// device the producer stream is the current stream of that device when the
// operation starts: the adapter's own staging work (contiguous copies,
// outputs, clones) is queued there, and the core reads the inputs after it.
// The tensors stay held until the core's handle has completed, which for a
// CUDA operation means that the device has finished with them; only then
// can LibTorch's caching allocator hand their memory out again.
//
// Thread safety: an Operation belongs to the user thread that owns its
// TensorHandle, or to the orphan list (orphans.h). The only part the
// coordinator thread touches is the OutputStore, through the allocator.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/Stream.h>

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "accord/accord.h"
#include "accord/torch/collectives.h"

namespace accord {
namespace torch {
namespace internal {

// Outputs made by the allocator of an allgather, alltoall or reducescatter.
// The coordinator thread adds to it; the user thread reads it after the
// handle has completed (the handle's completion orders the two).
struct OutputStore {
  std::mutex mutex;
  std::vector<at::Tensor> tensors;
};

// A core Allocator that makes each output with at::empty on the device the
// core names (the input's) and keeps it in `store`. With a `producer`
// stream, that stream is current during the allocation, so LibTorch's
// caching allocator ties the memory to it (the core has its communication
// stream wait for the producer stream again before writing the output).
// Runs on the coordinator thread; never throws.
Allocator MakeAllocator(const std::shared_ptr<OutputStore>& store, const std::optional<c10::Stream>& producer);

// Throws Error(kInvalidArgument) unless `tensor` is something the core can
// take (defined, dense, a supported dtype), and Error(kUnimplemented) for a
// CUDA tensor when this adapter has no CUDA. `what` names the call.
void CheckInput(const at::Tensor& tensor, const std::string& what);

}  // namespace internal

struct TensorHandle::Operation {
  explicit Operation(size_t parts) : outputs(parts) {}

  // Before staging: takes the device of `tensor` (checked by CheckInput) as
  // the operation's and, for a CUDA device, the current stream as the
  // producer stream, which goes into `options->stream` (the caller leaves it
  // null, or sets that same stream; another one is refused with
  // kInvalidArgument, as the adapter's staging work runs on the current
  // stream).
  void Bind(const at::Tensor& tensor, CollectiveOptions* options);

  // Adds the result of an enqueue call: throws Error if it failed (the
  // operation then never started), otherwise keeps the handle. Also releases
  // the tensors of finished orphaned operations.
  void Start(Result<Handle> enqueued);
  // After the handle completed: records its status and, on success, the
  // result tensors (unless Queue() made them), copying staged in-place
  // results back (queued on the current stream for CUDA); drops the tensors
  // held only for the core.
  void Finish(const Status& status);
  // CUDA operations, once the core's handle has made `stream` (current)
  // wait for the operation on the device: makes the result tensors, with
  // the copies back queued on `stream`. The tensors stay held until
  // Finish(). Throws Error (the operation stays in flight) on failure.
  void Queue(const c10::Stream& stream);
  // Makes `stream` wait for the copies back that Finish() or Queue()
  // queued on another stream.
  void Follow(const c10::Stream& stream) const;

  // Input `tensor`, detached and made contiguous for the core (a copy if it
  // is not). For an in-place operation, part `part`'s output is `tensor`
  // itself, and a staging copy is copied back into it on success.
  at::Tensor Stage(const at::Tensor& tensor, bool in_place, size_t part);

  Handle handle;
  std::vector<at::Tensor> keep_alive;                        // every tensor the core reads or writes
  std::vector<at::Tensor> outputs;                           // per part; undefined where the allocator makes it
  std::vector<std::pair<at::Tensor, at::Tensor>> copy_back;  // (staging, caller's tensor)
  std::vector<at::Tensor> written;                           // caller's tensors written in place (version bump)
  std::shared_ptr<internal::OutputStore> allocated;

  c10::Device device = c10::kCPU;         // of every tensor of the operation
  std::optional<c10::Stream> producer;    // CUDA: the current stream at Bind()
  std::optional<c10::Stream> results_on;  // CUDA: where the copies back were queued

  bool finished = false;
  Status status;
  std::vector<at::Tensor> results;

 private:
  // The result tensors; the copies back, queued for a CUDA operation on
  // `stream` (unset: the current stream of its device), which it records in
  // results_on; the version bumps of tensors written in place.
  Status MakeResults(std::optional<c10::Stream> stream);
};

}  // namespace torch
}  // namespace accord
