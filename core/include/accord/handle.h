// Handle: the caller's side of an enqueued operation, like c10d's Work.
//
// Thread safety: every method may be called from any thread. The coordinator
// thread completes a handle exactly once; waiters are woken then.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "accord/status.h"
#include "accord/tensor.h"

namespace accord {

class HandleState;

class Handle {
 public:
  Handle() = default;
  explicit Handle(std::shared_ptr<HandleState> state) : state_(std::move(state)) {}

  bool valid() const { return state_ != nullptr; }
  // True once the operation has finished, successfully or not. Never blocks.
  // A poll of an unfinished operation tells accord that the caller wants it
  // to progress now.
  bool Poll() const;
  // The same check, telling accord nothing: for a caller that is about to
  // Wait() anyway.
  bool Done() const;
  // Blocks until the operation has finished; returns its Status.
  Status Wait() const;
  // Like Wait(), but returns a kTimeout Status if the operation has not
  // finished within `timeout`; the operation then stays in flight.
  Status Wait(std::chrono::milliseconds timeout) const;
  // For operations on CUDA tensors, a wait that does not block the host
  // until the GPU has finished: it blocks only until the operation is
  // queued on the device, then makes `stream` (a cudaStream_t; null is the
  // legacy default stream) wait for it there, as torch.distributed's
  // Work.wait() does for NCCL. Returns the error of a part that already
  // failed; a later failure shows in Wait() and status(). For an operation
  // on CPU tensors it is Wait().
  Status WaitOnStream(void* stream) const;
  // The final Status; kTimeout-free. Only meaningful once Poll() is true.
  Status status() const;

  // Outputs, valid once the handle has completed successfully. For an
  // in-place or caller-provided output these are the caller's views; for
  // allgather/alltoall/reducescatter they come from the caller's Allocator.
  std::vector<TensorView> outputs() const;
  // alltoall: how many rows (dim 0) arrived from each rank.
  std::vector<int64_t> received_splits() const;
  // join: the last rank to join (-1 for other operations).
  int last_joined_rank() const;

 private:
  std::shared_ptr<HandleState> state_;
};

}  // namespace accord
