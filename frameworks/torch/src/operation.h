// TensorHandle::Operation: everything one enqueued collective needs until it
// completes, and the code that turns the core's result into at::Tensors.
//
// Thread safety: an Operation belongs to the user thread that owns its
// TensorHandle, or to the orphan list (orphans.h). The only part the
// coordinator thread touches is the OutputStore, through the allocator.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <mutex>
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

// A core Allocator that makes each output with at::empty and keeps it in
// `store`. Runs on the coordinator thread; never throws.
Allocator MakeAllocator(const std::shared_ptr<OutputStore>& store);

// Throws Error(kInvalidArgument) unless `tensor` is something the core can
// take (defined, dense, a supported dtype). `what` names the call.
void CheckInput(const at::Tensor& tensor, const std::string& what);

}  // namespace internal

struct TensorHandle::Operation {
  explicit Operation(size_t parts) : outputs(parts) {}

  // Adds the result of an enqueue call: throws Error if it failed (the
  // operation then never started), otherwise keeps the handle. Also releases
  // the tensors of finished orphaned operations.
  void Start(Result<Handle> enqueued);
  // After the handle completed: records its status and, on success, the
  // result tensors; copies staged in-place results back; drops the tensors
  // held only for the core.
  void Finish(const Status& status);

  // Input `tensor`, detached and made contiguous for the core (a copy if it
  // is not). For an in-place operation, part `part`'s output is `tensor`
  // itself, and a staging copy is copied back into it on success.
  at::Tensor Stage(const at::Tensor& tensor, bool in_place, size_t part);

  Handle handle;
  std::vector<at::Tensor> keep_alive;  // every tensor the core reads or writes
  std::vector<at::Tensor> outputs;     // per part; undefined where the allocator makes it
  std::vector<std::pair<at::Tensor, at::Tensor>> copy_back;  // (staging, caller's tensor)
  std::vector<at::Tensor> written;     // caller's tensors written in place (version bump)
  std::shared_ptr<internal::OutputStore> allocated;

  bool finished = false;
  Status status;
  std::vector<at::Tensor> results;
};

}  // namespace torch
}  // namespace accord
