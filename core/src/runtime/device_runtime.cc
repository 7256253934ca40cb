#include "runtime/device_runtime.h"

#include <algorithm>

#include "backends/device_selection.h"
#include "ops/device_ops.h"

namespace accord {

// Events are made once and reused: a handle's or an entry's reference
// gives its event back here when it goes. The pool lives as long as any of
// its events (they hold it).
class DeviceRuntime::EventPool : public std::enable_shared_from_this<EventPool> {
 public:
  explicit EventPool(DeviceApi* api) : api_(api) {}

  Result<std::shared_ptr<DeviceEvent>> Take(int ordinal) {
    std::unique_ptr<DeviceEvent> event;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto& free = free_[ordinal];
      if (!free.empty()) {
        event = std::move(free.back());
        free.pop_back();
      }
    }
    if (!event) {
      ACCORD_ASSIGN_OR_RETURN(event, api_->CreateEvent(ordinal));
    }
    return std::shared_ptr<DeviceEvent>(event.release(), [pool = shared_from_this(), ordinal](DeviceEvent* e) {
      pool->Give(ordinal, std::unique_ptr<DeviceEvent>(e));
    });
  }

 private:
  // More than this many idle events of a device are destroyed instead.
  static constexpr size_t kKeep = 4096;

  void Give(int ordinal, std::unique_ptr<DeviceEvent> event) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto& free = free_[ordinal];
    if (free.size() < kKeep) free.push_back(std::move(event));
  }

  DeviceApi* api_;
  std::mutex mutex_;
  std::map<int, std::vector<std::unique_ptr<DeviceEvent>>> free_;
};

DeviceRuntime::DeviceRuntime(const Config& config, DeviceApi* api, std::function<void(const Status&)> on_failure)
    : config_(config),
      api_(api),
      events_(std::make_shared<EventPool>(api)),
      poller_(std::make_unique<CompletionPoller>(config.collective_timeout_seconds, std::move(on_failure),
                                                 std::chrono::microseconds(config.device_spin_us))) {}

bool DeviceRuntime::ActiveWithin(std::chrono::microseconds window) const {
  return poller_ && poller_->active_within(window);
}

DeviceRuntime::~DeviceRuntime() { Shutdown(); }

void DeviceRuntime::Shutdown() {
  if (poller_) poller_->Drain();
  poller_.reset();
  collectives_.clear();
  devices_.clear();
}

Result<std::shared_ptr<DeviceEvent>> DeviceRuntime::Ready(const Device& device, void* stream, const std::string& name) {
  ACCORD_RETURN_IF_ERROR(api_->CheckOrdinal(device.ordinal));
  int expected = -1;
  if (!ordinal_.compare_exchange_strong(expected, device.ordinal) && expected != device.ordinal) {
    return Status::InvalidArgument("tensor '" + name + "' is on " + device.ToString() +
                                   ", but this rank's CUDA tensors are on cuda:" + std::to_string(expected) +
                                   ": accord uses one GPU per rank (the GPU of the first CUDA tensor it was given)");
  }
  ACCORD_ASSIGN_OR_RETURN(std::shared_ptr<DeviceEvent> ready, events_->Take(device.ordinal));
  ACCORD_RETURN_IF_ERROR(ready->RecordNative(stream));
  return ready;
}

Result<int> DeviceRuntime::OrdinalOf(const std::vector<OpItem>& items) {
  for (const OpItem& item : items) {
    if (item.entry) return item.entry->input.device.ordinal;
  }
  const int adopted = ordinal_.load();
  if (adopted >= 0) return adopted;
  return api_->CurrentDevice();
}

Result<DeviceRuntime::PerDevice*> DeviceRuntime::DeviceFor(int ordinal) {
  auto it = devices_.find(ordinal);
  if (it != devices_.end()) return &it->second;
  PerDevice device;
  ACCORD_ASSIGN_OR_RETURN(device.stream, api_->CreateStream(ordinal));
  device.buffer = std::make_unique<DeviceFusionBuffer>(device.stream.get());
  return &devices_.emplace(ordinal, std::move(device)).first->second;
}

Result<std::shared_ptr<DeviceCollectives>> DeviceRuntime::CollectivesFor(ProcessSet& set, int ordinal, Status* agreed) {
  auto it = collectives_.find({set.id, ordinal});
  if (it != collectives_.end()) return it->second;
  DeviceSelection selection;
  selection.set_id = set.id;
  selection.ranks = set.ranks;
  selection.set_rank = set.set_rank;
  selection.host = set.backend.get();
  selection.api = api_;
  selection.ordinal = ordinal;
  selection.mode = config_.gpu_operations;
  selection.timeout_seconds = config_.collective_timeout_seconds;
  ACCORD_ASSIGN_OR_RETURN(std::unique_ptr<DeviceCollectives> made, SelectDeviceCollectives(selection, agreed));
  if (!made) return std::shared_ptr<DeviceCollectives>();
  std::shared_ptr<DeviceCollectives> shared(std::move(made));
  collectives_[{set.id, ordinal}] = shared;
  return shared;
}

Status DeviceRuntime::Execute(ProcessSet& set, const std::vector<OpItem>& items,
                              std::vector<TensorQueue::Taken>* entries, Status* agreed, PhaseTimes* phases) {
  ACCORD_ASSIGN_OR_RETURN(const int ordinal, OrdinalOf(items));
  ACCORD_ASSIGN_OR_RETURN(PerDevice * device, DeviceFor(ordinal));
  ACCORD_ASSIGN_OR_RETURN(std::shared_ptr<DeviceCollectives> collectives, CollectivesFor(set, ordinal, agreed));
  if (!agreed->ok()) return Status::OK();
  DeviceStream& stream = *device->stream;
  // The inputs are read only once their producers' work has run. Tensors
  // enqueued together share one event.
  std::vector<const DeviceEvent*> waited;
  for (const OpItem& item : items) {
    const DeviceEvent* ready = item.entry ? item.entry->ready.get() : nullptr;
    if (!ready || std::find(waited.begin(), waited.end(), ready) != waited.end()) continue;
    ACCORD_RETURN_IF_ERROR(stream.Wait(*item.entry->ready));
    waited.push_back(ready);
  }
  // Outputs an adapter allocated on a producer's stream are written only
  // after the work queued there by then (which may still use that memory).
  auto outputs_allocated = [&](const std::vector<OpItem>& allocated) -> Status {
    std::vector<void*> streams;
    for (const OpItem& item : allocated) {
      if (!item.entry || std::find(streams.begin(), streams.end(), item.entry->stream) != streams.end()) continue;
      streams.push_back(item.entry->stream);
      ACCORD_ASSIGN_OR_RETURN(std::shared_ptr<DeviceEvent> mark, events_->Take(ordinal));
      ACCORD_RETURN_IF_ERROR(mark->RecordNative(item.entry->stream));
      ACCORD_RETURN_IF_ERROR(stream.Wait(*mark));
    }
    return Status::OK();
  };
  const DeviceOpContext ctx{collectives.get(), &stream, device->buffer.get(), api_, set.set_rank,
                            set.size(),        phases,  outputs_allocated};
  ACCORD_RETURN_IF_ERROR(ExecuteDeviceBatch(ctx, items));
  ACCORD_ASSIGN_OR_RETURN(std::shared_ptr<DeviceEvent> done, events_->Take(ordinal));
  ACCORD_RETURN_IF_ERROR(done->Record(stream));
  for (auto& taken : *entries) {
    if (taken) taken.mapped().handle->SetOnDevice(taken.mapped().part, done);
  }
  CompletionPoller::Batch batch;
  batch.done = std::move(done);
  batch.entries = std::move(*entries);
  entries->clear();
  batch.type = items.front().response->type;
  batch.first_name = items.front().response->name;
  batch.process_set = set.id;
  batch.ordinal = ordinal;
  batch.collectives = std::move(collectives);
  poller_->Add(std::move(batch));
  return Status::OK();
}

void DeviceRuntime::ForgetSet(ProcessSetId id) {
  for (auto it = collectives_.begin(); it != collectives_.end();) {
    it = it->first.first == id ? collectives_.erase(it) : std::next(it);
  }
}

}  // namespace accord
