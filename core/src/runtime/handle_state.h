// HandleState: the shared state behind a Handle.
//
// The coordinator thread fills outputs and completes the state exactly once
// per part (a grouped op has one part per tensor); the handle is done when
// every part is, and its Status is the first error reported (or OK). Any
// thread may poll or wait.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "accord/status.h"
#include "accord/tensor.h"
#include "device/device.h"

namespace accord {

class HandleState {
 public:
  explicit HandleState(int parts);

  // Coordinator thread.
  void SetOutput(int part, const TensorView& view);
  void SetReceivedSplits(std::vector<int64_t> splits);
  void SetValue(int64_t value);  // join: last rank; add process set: the new id
  // Records one part's result. Returns true when this completed the handle;
  // the caller must then call NotifyWaiters(). Split so that the coordinator
  // can complete a whole batch before waking anyone: a user thread waiting
  // on the first handle of a batch, on the same core, then wakes once
  // instead of once per handle.
  bool CompletePartQuietly(const Status& status);
  // The same for part `part` (a part queued on a device must be completed
  // through an overload that names it).
  bool CompletePartQuietly(const Status& status, int part);
  // The same, recording `output` as the part's output under the same lock
  // (allreduce and broadcast: the caller's memory, known at enqueue).
  bool CompletePartQuietly(const Status& status, int part, TensorView&& output);
  void NotifyWaiters();
  // Coordinator thread: part `part` is queued on a device; `done` fires
  // once its work there has run (the part completes later, from the
  // completion poller). Wakes threads in WaitOnStream.
  void SetOnDevice(int part, std::shared_ptr<DeviceEvent> done);
  void CompletePart(const Status& status) {
    if (CompletePartQuietly(status)) NotifyWaiters();
  }

  // Any thread.
  bool done() const;
  // Every part completed or queued on a device (nothing left for the
  // coordinator to do).
  bool settled() const;
  // Waits until done, or until `timeout` passes (then returns kTimeout).
  Status Wait(std::optional<std::chrono::milliseconds> timeout);
  Status status() const;
  // Waits until every part has completed or is queued on a device, then
  // makes the stream with native handle `native_stream` wait, on the
  // device, for the queued parts. Returns the first error of the parts
  // completed so far (an error of a part still on the device comes later,
  // from Wait or status()).
  Status WaitOnStream(void* native_stream);
  std::vector<TensorView> outputs() const;
  std::vector<int64_t> received_splits() const;
  int64_t value() const;
  // Before a thread blocks in Wait or WaitOnStream, it polls for up to
  // `spin`, yielding the core between polls. Set for operations on CUDA
  // tensors (ACCORD_DEVICE_SPIN_US), whose results come within
  // microseconds, when a sleeping thread woken from another core takes
  // about as long again to run. Call before the handle is shared.
  void SpinBeforeWaiting(std::chrono::microseconds spin) { spin_ = spin; }
  // Memory the handle keeps alive for the outputs (the heap allocator's).
  // Made on first use: most operations write into the caller's memory.
  std::shared_ptr<std::vector<std::shared_ptr<void>>> keep_alive();

 private:
  TensorView& output(int part);                         // caller holds mutex_
  bool CompleteLocked(const Status& status, int part);  // caller holds mutex_
  // Called when `ready` is false: polls it under `lock` (held on entry and
  // return) for up to spin_, and not past `limit`, yielding between polls;
  // returns whether it became true.
  template <typename Ready>
  bool Spin(std::unique_lock<std::mutex>& lock, Ready ready, std::chrono::steady_clock::time_point limit);

  // Sets settled_flag_ (and done_flag_ with done_). Caller holds mutex_.
  void PublishLocked();

  mutable std::mutex mutex_;
  std::condition_variable cv_;
  int remaining_;
  bool done_ = false;
  // done_ and settled(), readable without mutex_ (done(), settled(), Wait's
  // first checks): set under it once true, never reset. status_ is final
  // before done_flag_ is set, so a thread that reads it true may read status_.
  std::atomic<bool> done_flag_{false};
  std::atomic<bool> settled_flag_{false};
  Status status_;
  int parts_;
  // Part 0's output, then the others: a single op allocates no vector.
  TensorView first_output_;
  std::vector<TensorView> more_outputs_;
  std::vector<int64_t> received_splits_;
  int64_t value_ = -1;
  // Parts queued on a device and not yet completed, by part index.
  std::vector<std::shared_ptr<DeviceEvent>> on_device_;
  int settled_ = 0;  // parts completed or queued on a device
  std::shared_ptr<std::vector<std::shared_ptr<void>>> keep_alive_;
  std::chrono::microseconds spin_{0};
};

}  // namespace accord
