// The public API: lifecycle, queries, and the enqueue functions, which check
// their arguments, build queue entries and hand them to the Runtime.
#include "accord/accord.h"

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <optional>

#include "backends/device_selection.h"
#include "common/logging.h"
#include "metrics/metrics.h"
#include "runtime/handle_state.h"
#include "runtime/runtime.h"
#include "runtime/validate.h"
#include "timeline/timeline.h"

namespace accord {

namespace {

// The one Runtime of the process, and what outlives it: the metrics, read
// after Shutdown, and the timeline, which goes on until StopTimeline or
// Shutdown (also into the next runtime, when another rank's shutdown or an
// error stopped this one and Init is called again). Deliberately leaked: it
// must outlive the atexit handler that shuts it down, which runs before
// MPI_Finalize.
struct RuntimeSlot {
  std::mutex mutex;
  std::shared_ptr<Runtime> runtime;
  bool shut_down = false;  // Shutdown() ran and Init() has not been called since
  bool atexit_registered = false;
  Timeline timeline;        // any thread (its own locks)
  MetricsRecorder metrics;  // any thread (atomics)
};

RuntimeSlot& Slot() {
  static RuntimeSlot* slot = new RuntimeSlot();
  return *slot;
}

std::shared_ptr<Runtime> Current() {
  std::lock_guard<std::mutex> lock(Slot().mutex);
  return Slot().runtime;
}

Result<std::shared_ptr<Runtime>> Running() {
  std::shared_ptr<Runtime> rt;
  bool shut_down;
  {
    std::lock_guard<std::mutex> lock(Slot().mutex);
    rt = Slot().runtime;
    shut_down = Slot().shut_down;
  }
  if (!rt && shut_down) return Status::ShutDown("accord has been shut down; call accord::Init() to use it again");
  if (!rt) return Status::PreconditionFailed("accord is not initialised: call accord::Init() first");
  if (!rt->running()) return rt->stop_status();
  return rt;
}

void ShutdownAtExit() { (void)Shutdown(); }

// Everything an enqueue function needs before it can build entries.
struct Target {
  std::shared_ptr<Runtime> runtime;
  std::shared_ptr<ProcessSet> set;
};

Result<Target> Resolve(ProcessSetId id) {
  ACCORD_ASSIGN_OR_RETURN(auto rt, Running());
  if (id == kGlobalProcessSet) return Target{rt, rt->global_set()};  // no lock: the common case
  ACCORD_ASSIGN_OR_RETURN(auto set, rt->FindMemberSet(id));
  return Target{std::move(rt), std::move(set)};
}

Request BaseRequest(OpType type, const std::string& name, const TensorView& t) {
  Request r;
  r.type = type;
  r.name = name;
  r.dtype = t.dtype;
  r.shape = t.shape;
  r.device = t.device;
  return r;
}

TensorEntry MakeEntry(Request request, const TensorView& in, const TensorView& out, const Allocator& allocator,
                      const std::shared_ptr<HandleState>& state, int part) {
  TensorEntry e;
  e.request = std::move(request);
  e.input = in;
  if (e.request.type == OpType::kAllreduce && out.data == in.data) {
    e.output_is_input = true;  // same layout (checked): no second copy of the shape
  } else {
    e.output = out;
  }
  const bool allocates = e.request.type == OpType::kAllgather || e.request.type == OpType::kAlltoall ||
                         e.request.type == OpType::kReducescatter;
  if (allocates) e.allocator = allocator ? allocator : HeapAllocator(state->keep_alive());
  e.handle = state;
  e.part = part;
  return e;
}

// CUDA tensors: the GPU path checks each tensor's device (one GPU per rank)
// and records, on the producer's stream, the event the communication stream
// waits for before reading the inputs; outputs the core allocates come from
// device memory unless the caller gave an allocator. A call's tensors are
// all on the CPU or all on the GPU.
Status AttachDevice(const Target& target, TensorEntry* entries, size_t count, void* stream, bool allocator_given) {
  const bool cuda = entries[0].input.device.type == DeviceType::kCUDA;
  for (size_t i = 1; i < count; ++i) {
    if ((entries[i].input.device.type == DeviceType::kCUDA) != cuda) {
      return Status::InvalidArgument(
          "the tensors of one grouped operation must all be on the CPU or all on the GPU: '" + entries[0].request.name +
          "' is on " + entries[0].input.device.ToString() + ", '" + entries[i].request.name + "' on " +
          entries[i].input.device.ToString());
    }
  }
  if (!cuda) return Status::OK();
  ACCORD_ASSIGN_OR_RETURN(DeviceRuntime * devices, target.runtime->Devices());
  entries[0].handle->SpinBeforeWaiting(std::chrono::microseconds(target.runtime->config().device_spin_us));
  std::shared_ptr<DeviceEvent> ready;
  for (size_t i = 0; i < count; ++i) {
    TensorEntry& e = entries[i];
    if (!ready) {
      ACCORD_ASSIGN_OR_RETURN(ready, devices->Ready(e.input.device, stream, e.request.name));
    } else if (e.input.device != entries[0].input.device) {
      return Status::InvalidArgument("tensor '" + e.request.name + "' is on " + e.input.device.ToString() + ", '" +
                                     entries[0].request.name + "' on " + entries[0].input.device.ToString() +
                                     ": accord uses one GPU per rank");
    }
    e.ready = ready;
    e.stream = stream;
    if (e.allocator && !allocator_given) e.allocator = DeviceMemoryAllocator(e.handle->keep_alive(), devices->api());
  }
  return Status::OK();
}

// The names of an op's tensors: the op's own name (or an auto-name) for a
// single op, "<group>.<i>" for the members of a group. A single op's name is
// not copied here: the request makes the one copy it needs. An auto-name's
// number is used up only by Submitted() (ProcessSet::AutoNamer).
class OpNames {
 public:
  OpNames(ProcessSet& set, const std::string& name, const char* op, size_t count, bool grouped) {
    if (!grouped) {
      if (name.empty()) auto_.emplace(set, op);
      single_ = name.empty() ? &auto_->name() : &name;
      return;
    }
    if (name.empty()) auto_.emplace(set, grouped_op_.assign("grouped_").append(op).c_str());
    group_ = name.empty() ? auto_->name() : name;
    members_.reserve(count);
    for (size_t i = 0; i < count; ++i) members_.push_back(group_ + "." + std::to_string(i));
  }
  const std::string& operator[](size_t i) const { return single_ ? *single_ : members_[i]; }
  // The group's name (grouped ops only).
  const std::string& group() const { return group_; }
  // Passes `handle` through; an enqueued op uses up its auto-name's number.
  Result<Handle> Submitted(Result<Handle> handle) {
    if (handle.ok() && auto_) auto_->Commit();
    return handle;
  }

 private:
  const std::string* single_ = nullptr;
  std::string grouped_op_;
  std::optional<ProcessSet::AutoNamer> auto_;
  std::string group_;
  std::vector<std::string> members_;
};

// `inputs` and `outputs` (allreduce only) point at `count` views.
Result<Handle> EnqueueReductions(OpType type, const TensorView* inputs, const TensorView* outputs, size_t count,
                                 const Allocator& allocator, ReduceOp op, double prescale, double postscale,
                                 const CollectiveOptions& options, bool grouped) {
  const char* op_name = type == OpType::kAllreduce ? "allreduce" : "reducescatter";
  if (count == 0) return Status::InvalidArgument(std::string("grouped_") + op_name + " needs at least one tensor");
  ACCORD_ASSIGN_OR_RETURN(Target target, Resolve(options.process_set));
  OpNames names(*target.set, options.name, op_name, count, grouped);
  // Every tensor is checked before any is submitted.
  for (size_t i = 0; i < count; ++i) {
    ACCORD_RETURN_IF_ERROR(CheckTensor(inputs[i], names[i]));
    ACCORD_RETURN_IF_ERROR(CheckReduction(inputs[i], op, prescale, postscale, names[i]));
    if (type == OpType::kAllreduce) {
      ACCORD_RETURN_IF_ERROR(CheckSameLayout(inputs[i], outputs[i], names[i]));
      if (op == ReduceOp::kAdasum) ACCORD_RETURN_IF_ERROR(CheckAdasum(inputs[i], target.set->size(), names[i]));
    } else {
      ACCORD_RETURN_IF_ERROR(CheckAtLeast1d(inputs[i], names[i], op_name));
      if (op != ReduceOp::kSum && op != ReduceOp::kAverage) {
        return Status::InvalidArgument("reducescatter of tensor '" + names[i] + "' supports Sum and Average, not " +
                                       ReduceOpName(op));
      }
    }
  }
  if (type == OpType::kAllreduce && count == 1) {
    ACCORD_RETURN_IF_ERROR(CheckOutputApart(inputs[0], outputs[0], names[0]));
  } else if (type == OpType::kAllreduce) {
    std::vector<const std::string*> all_names;
    all_names.reserve(count);
    for (size_t i = 0; i < count; ++i) all_names.push_back(&names[i]);
    ACCORD_RETURN_IF_ERROR(CheckOutputsApart(inputs, outputs, count, all_names));
  }
  auto state = std::make_shared<HandleState>(static_cast<int>(count));
  std::vector<TensorEntry> entries;
  if (grouped) entries.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    Request r = BaseRequest(type, names[i], inputs[i]);
    r.op = op;
    r.prescale_factor = prescale;
    r.postscale_factor = postscale;
    if (grouped) {
      r.group = names.group();
      r.group_size = static_cast<int32_t>(count);
    }
    TensorEntry entry = MakeEntry(std::move(r), inputs[i], type == OpType::kAllreduce ? outputs[i] : TensorView{},
                                  allocator, state, static_cast<int>(i));
    if (!grouped) {
      ACCORD_RETURN_IF_ERROR(AttachDevice(target, &entry, 1, options.stream, allocator != nullptr));
      return names.Submitted(target.runtime->Submit(*target.set, std::move(entry), std::move(state)));
    }
    entries.push_back(std::move(entry));
  }
  ACCORD_RETURN_IF_ERROR(AttachDevice(target, entries.data(), entries.size(), options.stream, allocator != nullptr));
  return names.Submitted(target.runtime->Submit(*target.set, std::move(entries), std::move(state)));
}

Result<Handle> EnqueueAllgathers(const std::vector<TensorView>& inputs, const Allocator& allocator,
                                 const CollectiveOptions& options, bool grouped) {
  if (inputs.empty()) return Status::InvalidArgument("grouped_allgather needs at least one tensor");
  ACCORD_ASSIGN_OR_RETURN(Target target, Resolve(options.process_set));
  OpNames names(*target.set, options.name, "allgather", inputs.size(), grouped);
  auto state = std::make_shared<HandleState>(static_cast<int>(inputs.size()));
  std::vector<TensorEntry> entries;
  for (size_t i = 0; i < inputs.size(); ++i) {
    ACCORD_RETURN_IF_ERROR(CheckTensor(inputs[i], names[i]));
    ACCORD_RETURN_IF_ERROR(CheckAtLeast1d(inputs[i], names[i], "allgather"));
    Request r = BaseRequest(OpType::kAllgather, names[i], inputs[i]);
    if (grouped) {
      r.group = names.group();
      r.group_size = static_cast<int32_t>(inputs.size());
    }
    entries.push_back(MakeEntry(std::move(r), inputs[i], TensorView{}, allocator, state, static_cast<int>(i)));
  }
  ACCORD_RETURN_IF_ERROR(AttachDevice(target, entries.data(), entries.size(), options.stream, allocator != nullptr));
  return names.Submitted(target.runtime->Submit(*target.set, std::move(entries), state));
}

// Barrier, join and process-set changes: one entry with no tensor.
Result<Handle> EnqueueControl(const Target& target, Request request) {
  auto state = std::make_shared<HandleState>(1);
  std::vector<TensorEntry> entries;
  entries.push_back(MakeEntry(std::move(request), TensorView{}, TensorView{}, nullptr, state, 0));
  return target.runtime->Submit(*target.set, std::move(entries), state);
}

}  // namespace

Status Init(const InitOptions& options) {
  RuntimeSlot& slot = Slot();
  std::lock_guard<std::mutex> lock(slot.mutex);
  if (slot.runtime && slot.runtime->running()) return Status::OK();
  slot.runtime.reset();  // stopped by another rank's shutdown: finish tearing it down
  slot.metrics.Reset();
  ACCORD_ASSIGN_OR_RETURN(std::unique_ptr<Runtime> rt, Runtime::Create(options, &slot.timeline, &slot.metrics));
  if (!rt->config().timeline_path.empty() && rt->world().rank() == 0) {
    // A file rank 0 cannot write must not fail Init on rank 0 alone (the
    // others would wait for it): report it and run without a timeline.
    Status started = slot.timeline.Start(rt->config().timeline_path, rt->config().timeline_mark_cycles,
                                         int64_t{rt->config().timeline_max_mb} << 20);
    if (!started.ok()) {
      ACCORD_LOG(kError) << "ACCORD_TIMELINE: " << started.message();
    }
  }
  slot.runtime = std::move(rt);
  slot.shut_down = false;
  if (!slot.atexit_registered) {
    // Registered after MPI_Init's own atexit handler, so it runs before MPI_Finalize.
    std::atexit(ShutdownAtExit);
    slot.atexit_registered = true;
  }
  return Status::OK();
}

Status Shutdown() {
  std::shared_ptr<Runtime> rt;
  {
    std::lock_guard<std::mutex> lock(Slot().mutex);
    rt = std::move(Slot().runtime);
    if (rt) Slot().shut_down = true;
  }
  if (rt) rt->Shutdown();
  Slot().timeline.Stop();
  return Status::OK();
}

bool IsInitialized() {
  auto rt = Current();
  return rt && rt->running();
}

#define ACCORD_WORLD_QUERY(fn, field)     \
  int fn() {                              \
    auto rt = Current();                  \
    return rt ? rt->world().field() : -1; \
  }
ACCORD_WORLD_QUERY(Rank, rank)
ACCORD_WORLD_QUERY(Size, size)
ACCORD_WORLD_QUERY(LocalRank, local_rank)
ACCORD_WORLD_QUERY(LocalSize, local_size)
ACCORD_WORLD_QUERY(CrossRank, cross_rank)
ACCORD_WORLD_QUERY(CrossSize, cross_size)
#undef ACCORD_WORLD_QUERY

int MpiThreadLevel() {
  auto rt = Current();
  return rt ? rt->mpi().thread_level() : -1;
}

bool MpiThreadsSupported() {
  auto rt = Current();
  return rt && rt->mpi().thread_multiple();
}

Metrics GetMetrics() { return Slot().metrics.Snapshot(); }

Status StartTimeline(const std::string& path, bool mark_cycles) {
  ACCORD_ASSIGN_OR_RETURN(auto rt, Running());
  if (path.empty()) return Status::InvalidArgument("StartTimeline needs a file path");
  if (rt->world().rank() != 0) return Status::OK();
  return Slot().timeline.Start(path, mark_cycles, int64_t{rt->config().timeline_max_mb} << 20);
}

Status StopTimeline() {
  Slot().timeline.Stop();
  return Status::OK();
}

BuildInfo GetBuildInfo() {
  const DeviceSupport support = GetDeviceSupport();
  BuildInfo info;
  info.cuda = support.cuda_built;
  info.nccl = support.nccl_built;
  info.cuda_version = support.cuda_version;
  info.nccl_version = support.nccl_version;
  return info;
}

namespace {

// The device API that device memory handed out came from: frees may come
// after Shutdown, and the API lives as long as the process.
std::atomic<DeviceApi*> g_output_api{nullptr};

}  // namespace

Result<void*> AllocateDeviceMemory(int ordinal, size_t bytes) {
  ACCORD_ASSIGN_OR_RETURN(auto rt, Running());
  ACCORD_ASSIGN_OR_RETURN(DeviceRuntime * devices, rt->Devices());
  g_output_api = devices->api();
  return devices->api()->AllocateDevice(ordinal, bytes);
}

void FreeDeviceMemory(int ordinal, void* data) {
  DeviceApi* api = g_output_api.load();
  if (api && data) api->FreeDevice(ordinal, data);
}

Result<ProcessSetId> AddProcessSet(const std::vector<int>& ranks) {
  ACCORD_ASSIGN_OR_RETURN(Target target, Resolve(kGlobalProcessSet));
  ACCORD_RETURN_IF_ERROR(CheckProcessSetRanks(ranks, target.runtime->world().size()));
  Request r;
  r.type = OpType::kAddProcessSet;
  r.name = target.set->AutoName("add_process_set");
  r.ranks.assign(ranks.begin(), ranks.end());
  ACCORD_ASSIGN_OR_RETURN(Handle handle, EnqueueControl(target, std::move(r)));
  ACCORD_RETURN_IF_ERROR(handle.Wait());
  return static_cast<ProcessSetId>(handle.last_joined_rank());
}

Status RemoveProcessSet(ProcessSetId id) {
  ACCORD_ASSIGN_OR_RETURN(Target target, Resolve(kGlobalProcessSet));
  if (id == kGlobalProcessSet) return Status::InvalidArgument("the global process set cannot be removed");
  ACCORD_RETURN_IF_ERROR(target.runtime->FindSet(id).status());
  Request r;
  r.type = OpType::kRemoveProcessSet;
  r.name = target.set->AutoName("remove_process_set");
  r.target_set = id;
  ACCORD_ASSIGN_OR_RETURN(Handle handle, EnqueueControl(target, std::move(r)));
  return handle.Wait();
}

Result<std::vector<int>> ProcessSetRanks(ProcessSetId id) {
  ACCORD_ASSIGN_OR_RETURN(auto rt, Running());
  ACCORD_ASSIGN_OR_RETURN(auto set, rt->FindSet(id));
  return set->ranks;
}

Result<int> ProcessSetRank(ProcessSetId id) {
  ACCORD_ASSIGN_OR_RETURN(auto rt, Running());
  ACCORD_ASSIGN_OR_RETURN(auto set, rt->FindSet(id));
  return set->set_rank;
}

std::vector<ProcessSetId> ProcessSetIds() {
  auto rt = Current();
  return rt ? rt->SetIds() : std::vector<ProcessSetId>{};
}

Result<Handle> Allreduce(const TensorView& input, const TensorView& output, const AllreduceOptions& options) {
  return EnqueueReductions(OpType::kAllreduce, &input, &output, 1, nullptr, options.op, options.prescale_factor,
                           options.postscale_factor, options, false);
}

Result<Handle> GroupedAllreduce(const std::vector<TensorView>& inputs, const std::vector<TensorView>& outputs,
                                const AllreduceOptions& options) {
  if (inputs.size() != outputs.size()) {
    return Status::InvalidArgument("grouped_allreduce: " + std::to_string(inputs.size()) + " inputs but " +
                                   std::to_string(outputs.size()) + " outputs");
  }
  return EnqueueReductions(OpType::kAllreduce, inputs.data(), outputs.data(), inputs.size(), nullptr, options.op,
                           options.prescale_factor, options.postscale_factor, options, true);
}

Result<Handle> Reducescatter(const TensorView& input, const Allocator& allocator, const ReducescatterOptions& options) {
  return EnqueueReductions(OpType::kReducescatter, &input, nullptr, 1, allocator, options.op, options.prescale_factor,
                           options.postscale_factor, options, false);
}

Result<Handle> GroupedReducescatter(const std::vector<TensorView>& inputs, const Allocator& allocator,
                                    const ReducescatterOptions& options) {
  return EnqueueReductions(OpType::kReducescatter, inputs.data(), nullptr, inputs.size(), allocator, options.op,
                           options.prescale_factor, options.postscale_factor, options, true);
}

Result<Handle> Allgather(const TensorView& input, const Allocator& allocator, const CollectiveOptions& options) {
  return EnqueueAllgathers({input}, allocator, options, false);
}

Result<Handle> GroupedAllgather(const std::vector<TensorView>& inputs, const Allocator& allocator,
                                const CollectiveOptions& options) {
  return EnqueueAllgathers(inputs, allocator, options, true);
}

Result<Handle> Broadcast(const TensorView& tensor, int root_rank, const CollectiveOptions& options) {
  ACCORD_ASSIGN_OR_RETURN(Target target, Resolve(options.process_set));
  OpNames names(*target.set, options.name, "broadcast", 1, false);
  const std::string& name = names[0];
  ACCORD_RETURN_IF_ERROR(CheckTensor(tensor, name));
  if (root_rank < 0 || root_rank >= target.set->size()) {
    return Status::InvalidArgument("broadcast of tensor '" + name + "': root rank " + std::to_string(root_rank) +
                                   " is not a rank of the process set (size " + std::to_string(target.set->size()) +
                                   ")");
  }
  Request r = BaseRequest(OpType::kBroadcast, name, tensor);
  r.root_rank = root_rank;
  auto state = std::make_shared<HandleState>(1);
  std::vector<TensorEntry> entries;
  entries.push_back(MakeEntry(std::move(r), tensor, tensor, nullptr, state, 0));
  ACCORD_RETURN_IF_ERROR(AttachDevice(target, entries.data(), 1, options.stream, false));
  return names.Submitted(target.runtime->Submit(*target.set, std::move(entries), state));
}

Result<Handle> Alltoall(const TensorView& input, const std::vector<int64_t>& splits, const Allocator& allocator,
                        const CollectiveOptions& options) {
  ACCORD_ASSIGN_OR_RETURN(Target target, Resolve(options.process_set));
  OpNames names(*target.set, options.name, "alltoall", 1, false);
  const std::string& name = names[0];
  ACCORD_RETURN_IF_ERROR(CheckTensor(input, name));
  ACCORD_RETURN_IF_ERROR(CheckAtLeast1d(input, name, "alltoall"));
  ACCORD_RETURN_IF_ERROR(CheckSplits(input, splits, target.set->size(), name));
  Request r = BaseRequest(OpType::kAlltoall, name, input);
  r.splits = splits;
  auto state = std::make_shared<HandleState>(1);
  std::vector<TensorEntry> entries;
  entries.push_back(MakeEntry(std::move(r), input, TensorView{}, allocator, state, 0));
  ACCORD_RETURN_IF_ERROR(AttachDevice(target, entries.data(), 1, options.stream, allocator != nullptr));
  return names.Submitted(target.runtime->Submit(*target.set, std::move(entries), state));
}

Result<Handle> Barrier(ProcessSetId process_set) {
  ACCORD_ASSIGN_OR_RETURN(Target target, Resolve(process_set));
  Request r;
  r.type = OpType::kBarrier;
  r.name = target.set->AutoName("barrier");
  return EnqueueControl(target, std::move(r));
}

Result<Handle> Join(ProcessSetId process_set) {
  ACCORD_ASSIGN_OR_RETURN(Target target, Resolve(process_set));
  Request r;
  r.type = OpType::kJoin;
  r.name = kJoinName;
  return EnqueueControl(target, std::move(r));
}

}  // namespace accord
