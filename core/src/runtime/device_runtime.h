// DeviceRuntime: the GPU path of a Runtime (runtime.h), made the first time
// a CUDA tensor is used.
//
// It holds, for this rank:
//   - the device API (device/device_factory.h: CUDA, or the host emulation),
//     given at construction,
//   - the rank's device: accord uses one GPU per rank, the one of the first
//     CUDA tensor enqueued; a tensor on another GPU is refused at enqueue,
//   - per device, the communication stream and the device fusion buffer,
//   - per process set and device, the DeviceCollectives: NCCL or MPI staged
//     through host memory, chosen on first use by the backends' one door
//     (backends/device_selection.h),
//   - a pool of events, and the CompletionPoller with its watchdog.
//
// A CUDA tensor's journey: Ready() records an event on the producer's
// stream at enqueue (user thread); Execute() makes the communication stream
// wait for it, enqueues the fused batch (ops/device_ops.h), records the
// done event and hands the batch to the poller, which completes the handles
// when the device has run it. The coordinator never waits for the device,
// except inside MPI staging.
//
// Threads: Ready() from any thread; Execute, ForgetSet and Shutdown from
// the coordinator thread (Shutdown also from the thread that shuts the
// runtime down once the coordinator has stopped).
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "config/config.h"
#include "device/device.h"
#include "fusion/device_fusion_buffer.h"
#include "ops/collective_ops.h"
#include "runtime/completion_poller.h"
#include "runtime/process_set.h"

namespace accord {

class DeviceRuntime {
 public:
  // `on_failure` hears of the watchdog's (or the device's) fatal error once.
  DeviceRuntime(const Config& config, DeviceApi* api, std::function<void(const Status&)> on_failure);
  ~DeviceRuntime();
  DeviceRuntime(const DeviceRuntime&) = delete;
  DeviceRuntime& operator=(const DeviceRuntime&) = delete;

  DeviceApi* api() const { return api_; }

  // Any thread, at enqueue: checks that `device` is this rank's GPU (the
  // first CUDA tensor fixes it) and records the event that says when the
  // work submitted to the producer's `stream` so far has run. `name` is for
  // the error message.
  Result<std::shared_ptr<DeviceEvent>> Ready(const Device& device, void* stream, const std::string& name);

  // Coordinator: enqueues a fused batch of CUDA tensors of `set`. On
  // success the entries have moved to the completion poller (`entries` is
  // left empty). An error that every rank of the set meets alike (e.g. NCCL
  // refused because two ranks share a GPU) goes to `*agreed`, and the
  // caller fails the batch's handles with it; any other error is fatal.
  Status Execute(ProcessSet& set, const std::vector<OpItem>& items, std::vector<TensorQueue::Taken>* entries,
                 Status* agreed, PhaseTimes* phases);

  // Coordinator: whether GPU work is in flight, or was handed over or
  // finished within `window` (then more is likely to follow soon).
  bool ActiveWithin(std::chrono::microseconds window) const;

  // Coordinator: the set was removed; its collectives go (NCCL
  // communicators are finalized once their queued work has run).
  void ForgetSet(ProcessSetId id);

  // Waits for every batch in flight (the watchdog bounds it), then frees
  // the collectives, buffers and streams. Idempotent.
  void Shutdown();

 private:
  struct PerDevice {
    std::unique_ptr<DeviceStream> stream;  // the communication stream
    std::unique_ptr<DeviceFusionBuffer> buffer;
  };
  class EventPool;

  Result<PerDevice*> DeviceFor(int ordinal);
  // The set's collectives on `ordinal`: kept from an earlier batch, or made
  // now by SelectDeviceCollectives (collective over the set; null with
  // `*agreed` set when every rank of the set meets the same error).
  Result<std::shared_ptr<DeviceCollectives>> CollectivesFor(ProcessSet& set, int ordinal, Status* agreed);
  // The device of a batch on this rank: its entries', else (a rank that has
  // joined) this rank's GPU.
  Result<int> OrdinalOf(const std::vector<OpItem>& items);

  const Config config_;
  DeviceApi* api_;
  std::shared_ptr<EventPool> events_;
  std::atomic<int> ordinal_{-1};      // this rank's GPU, once a CUDA tensor was enqueued
  std::map<int, PerDevice> devices_;  // coordinator
  std::map<std::pair<ProcessSetId, int>, std::shared_ptr<DeviceCollectives>> collectives_;  // coordinator
  std::unique_ptr<CompletionPoller> poller_;
};

}  // namespace accord
