#include "runtime/device_runtime.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "backends/staged/staged_collectives.h"
#include "common/logging.h"
#include "device/device_factory.h"
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

namespace {

// Each rank's description of its GPU travels in a record of this many
// bytes (truncated if longer; host names are at most 64).
constexpr size_t kIdentityBytes = 160;

std::string HostName() {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  return host;
}

}  // namespace

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

Result<std::shared_ptr<DeviceEvent>> DeviceRuntime::Ready(const Device& device, void* stream,
                                                          const std::string& name) {
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

Result<std::shared_ptr<DeviceCollectives>> DeviceRuntime::CollectivesFor(ProcessSet& set, int ordinal,
                                                                         Status* agreed) {
  auto it = collectives_.find({set.id, ordinal});
  if (it != collectives_.end()) return it->second;

  // 1. Every rank of the set reports its GPU. A rank that cannot name its
  //    device still takes part (with the reason), so nobody waits for it.
  Result<std::string> identity = api_->DeviceIdentity(ordinal);
  std::string mine = identity.ok() ? HostName() + " " + *identity : "? " + identity.status().message();
  mine.resize(kIdentityBytes, '\0');
  std::vector<char> all(kIdentityBytes * static_cast<size_t>(set.size()));
  std::memcpy(all.data() + kIdentityBytes * static_cast<size_t>(set.set_rank), mine.data(), kIdentityBytes);
  ACCORD_RETURN_IF_ERROR(set.backend->Allgatherv(
      all.data(), std::vector<int64_t>(set.size(), static_cast<int64_t>(kIdentityBytes)), DataType::kUInt8));
  std::vector<std::string> gpus;
  for (int q = 0; q < set.size(); ++q) gpus.emplace_back(all.data() + kIdentityBytes * q, strnlen(all.data() + kIdentityBytes * q, kIdentityBytes));
  for (int q = 0; q < set.size(); ++q) {
    if (gpus[q].rfind("? ", 0) == 0) {
      *agreed = Status::Internal("rank " + std::to_string(set.ranks[q]) + " cannot use its GPU: " + gpus[q].substr(2));
      return std::shared_ptr<DeviceCollectives>();
    }
  }
  // 2. Two ranks on one GPU rule NCCL out ("Duplicate GPU detected").
  std::string shared;
  for (int a = 0; a < set.size() && shared.empty(); ++a) {
    for (int b = a + 1; b < set.size() && shared.empty(); ++b) {
      if (gpus[a] == gpus[b]) {
        shared = "ranks " + std::to_string(set.ranks[a]) + " and " + std::to_string(set.ranks[b]) +
                 " both use the GPU " + gpus[a];
      }
    }
  }
  const DeviceSupport support = GetDeviceSupport();
  const bool real_gpu = std::string(api_->name()) == "cuda";
  std::string no_nccl;
  if (!support.nccl_built) {
    no_nccl = "this build of accord has no NCCL";
  } else if (!real_gpu) {
    no_nccl = std::string("CUDA tensors are served by the ") + api_->name() + " (ACCORD_CUDA_HOST_EMULATION)";
  } else if (!shared.empty()) {
    no_nccl = shared + " (NCCL cannot run two ranks of one communicator on one GPU)";
  }
  const GpuOperations mode = config_.gpu_operations;
  if (mode == GpuOperations::kNccl && !no_nccl.empty()) {
    *agreed = Status::Internal(
        "ACCORD_GPU_OPERATIONS=nccl, but NCCL cannot run for process set " + std::to_string(set.id) + ": " + no_nccl +
        (shared.empty() ? "" : ". Give each rank its own GPU (e.g. torch.cuda.set_device(hvd.local_rank())), or set "
                               "ACCORD_GPU_OPERATIONS=mpi to go through host memory"));
    return std::shared_ptr<DeviceCollectives>();
  }
  auto staged = std::make_unique<StagedCollectives>(set.backend.get(), api_, ordinal, set.set_rank,
                                                    config_.collective_timeout_seconds);
  std::shared_ptr<DeviceCollectives> made;
  if (mode == GpuOperations::kMpi || !no_nccl.empty()) {
    if (mode == GpuOperations::kAuto && set.set_rank == 0 && real_gpu) {
      ACCORD_LOG(kInfo) << "process set " << set.id << ": CUDA tensors go through MPI and host memory, not NCCL: "
                        << no_nccl;
    }
    made = std::move(staged);
  } else {
    ACCORD_ASSIGN_OR_RETURN(made, MakeNccl(set, ordinal, std::move(staged), agreed));
    if (!made) return made;
  }
  collectives_[{set.id, ordinal}] = made;
  return made;
}

Result<std::shared_ptr<DeviceCollectives>> DeviceRuntime::MakeNccl(ProcessSet& set, int ordinal,
                                                                   std::unique_ptr<DeviceCollectives> staged,
                                                                   Status* agreed) {
  // 3. The set's rank 0 makes NCCL's unique id and sends it, behind a flag
  //    byte that says whether it could (the others must not wait for an id
  //    that never comes).
  constexpr size_t kIdBytes = 128;  // NCCL_UNIQUE_ID_BYTES
  std::vector<char> message(1 + kIdBytes, '\0');
  if (set.set_rank == 0) {
    Result<std::string> id = NewNcclUniqueId();
    const std::string& body = id.ok() ? *id : id.status().message();
    message[0] = id.ok() ? 1 : 0;
    std::memcpy(message.data() + 1, body.data(), std::min(body.size(), kIdBytes));
  }
  ACCORD_RETURN_IF_ERROR(set.backend->Broadcast(message.data(), static_cast<int64_t>(message.size()),
                                                DataType::kUInt8, 0));
  if (message[0] != 1) {
    *agreed = Status::Internal("process set " + std::to_string(set.id) + ": rank " + std::to_string(set.ranks[0]) +
                               " could not make an NCCL unique id: " +
                               std::string(message.data() + 1, strnlen(message.data() + 1, kIdBytes)));
    return std::shared_ptr<DeviceCollectives>();
  }
  NcclSetup setup;
  setup.set_rank = set.set_rank;
  setup.set_size = set.size();
  setup.ordinal = ordinal;
  setup.unique_id.assign(message.data() + 1, kIdBytes);
  setup.timeout_seconds = config_.collective_timeout_seconds;
  setup.fallback = std::move(staged);
  // A failure here is this rank's own: the others may have succeeded and
  // wait for it, so it is fatal.
  ACCORD_ASSIGN_OR_RETURN(std::unique_ptr<DeviceCollectives> nccl, CreateNcclCollectives(std::move(setup)));
  return std::shared_ptr<DeviceCollectives>(std::move(nccl));
}

Status DeviceRuntime::Execute(ProcessSet& set, const std::vector<OpItem>& items,
                              std::vector<TensorQueue::Taken>* entries, Status* agreed, PhaseTimes* phases) {
  ACCORD_ASSIGN_OR_RETURN(const int ordinal, OrdinalOf(items));
  ACCORD_ASSIGN_OR_RETURN(PerDevice* device, DeviceFor(ordinal));
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
  const DeviceOpContext ctx{collectives.get(), &stream, device->buffer.get(), api_, set.set_rank, set.size(),
                            phases, outputs_allocated};
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
