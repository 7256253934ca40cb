// CompletionPoller: completes the handles of operations on CUDA tensors once
// their work has run on the device, off the coordinator thread; and the
// watchdog for collectives that never complete.
//
// The coordinator enqueues a fused batch on a device's communication
// stream, records a done event after it and hands the batch here (Add). The
// poller's thread queries the done events; when one has fired it completes
// the batch's handles (an entry's own error, e.g. a failed allocation,
// wins) and wakes their waiters. It polls with a short spin, then sleeps
// that grow with the wait (to 1 ms); an Add wakes it at once. With nothing
// in flight it polls for the next Add for `idle_spin` after its last change
// (ACCORD_DEVICE_SPIN_US) before it sleeps: operations that follow each
// other closely then cost no wake-up.
//
// The watchdog: a batch whose event has not fired `timeout_seconds` after
// it was handed over
//   1. fails, with every other batch in flight on the same device (they
//      wait behind it on the stream), with a kAborted Status naming the
//      tensor, the process set, the device and how long it waited;
//   2. has the collectives of each of those batches aborted
//      (DeviceCollectives::Abort: ncclCommAbort, on a thread of its own,
//      since it may block), so that the GPU is freed;
//   3. is reported once through `on_failure`, which the runtime turns into
//      the fatal error that stops every rank (failure_protocol.h).
// timeout_seconds 0 disables it.
//
// Thread safety: Add and Drain from the coordinator (or the thread that
// shuts the runtime down); the poller owns its thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backends/device_collectives.h"
#include "device/device.h"
#include "runtime/tensor_queue.h"

namespace accord {

class CompletionPoller {
 public:
  struct Batch {
    std::shared_ptr<DeviceEvent> done;
    std::vector<TensorQueue::Taken> entries;  // empty where this rank had none
    OpType type = OpType::kAllreduce;
    std::string first_name;  // the batch's first tensor, for the watchdog's message
    ProcessSetId process_set = kGlobalProcessSet;
    int ordinal = 0;
    std::shared_ptr<DeviceCollectives> collectives;  // aborted by the watchdog
  };

  CompletionPoller(double timeout_seconds, std::function<void(const Status&)> on_failure,
                   std::chrono::microseconds idle_spin = std::chrono::microseconds(0));
  // Drain(), then stops the thread.
  ~CompletionPoller();
  CompletionPoller(const CompletionPoller&) = delete;
  CompletionPoller& operator=(const CompletionPoller&) = delete;

  void Add(Batch batch);
  // Returns once every batch handed over has completed or failed (the
  // watchdog bounds the wait, when it is on).
  void Drain();
  size_t in_flight() const;
  // Any thread: whether a batch is in flight, or was added or finished
  // within `window`.
  bool active_within(std::chrono::microseconds window) const;

 private:
  using Clock = std::chrono::steady_clock;
  struct InFlight {
    Batch batch;
    Clock::time_point since;
  };

  void Run();
  // One pass over the batches: takes out those that fired (into `fired`)
  // and those the watchdog fails (into `failed`, with the failure).
  void Sweep(std::vector<InFlight>* fired, std::vector<InFlight>* failed, Status* failure);
  // Completes the entries of `batches` with `status` (OK: each batch's
  // own), outside the lock.
  static void Finish(std::vector<InFlight>& batches, const Status& status);
  // Aborts the collectives of `batches` on a detached thread (an abort may
  // block: it must not stop the handles failing or the runtime stopping).
  static void AbortInBackground(const std::vector<InFlight>& batches);

  // Marks a change for active_within.
  void Touch();

  const double timeout_seconds_;
  const std::function<void(const Status&)> on_failure_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;       // work added, or stopping
  std::condition_variable drained_;  // the last batch left
  std::deque<InFlight> batches_;
  size_t finishing_ = 0;  // batches taken out and being completed outside the lock
  uint64_t added_ = 0;    // batches ever added
  bool stopping_ = false;
  bool reported_ = false;  // on_failure_ has been called
  const std::chrono::microseconds idle_spin_;
  std::atomic<size_t> busy_{0};             // batches added and not yet finished
  std::atomic<int64_t> last_change_ns_{0};  // steady clock, of the last Add or finish
  std::thread thread_;
};

}  // namespace accord
