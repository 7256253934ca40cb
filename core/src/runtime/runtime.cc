#include "runtime/runtime.h"

#include <sched.h>

#include <functional>
#include <utility>

#include "backends/mpi/mpi_environment.h"
#include "common/logging.h"
#include "device/device_factory.h"
#include "ops/lone_allreduce.h"
#include "runtime/validate.h"

namespace accord {

namespace {

// True if the process may run on a single core (e.g. mpirun --bind-to core):
// the coordinator then shares that core with the training thread.
bool OnlyOneCore() {
#if defined(__linux__)
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  if (sched_getaffinity(0, sizeof(cpus), &cpus) == 0) return CPU_COUNT(&cpus) == 1;
#endif
  return false;
}

}  // namespace

Result<std::shared_ptr<ProcessSet>> Runtime::MakeSet(ProcessSetId id, std::vector<int> ranks) {
  auto set = std::make_shared<ProcessSet>();
  set->id = id;
  set->ranks = std::move(ranks);
  SetCommOptions options;
  options.policy = scheduler_->poll_policy();
  options.max_count = config_.mpi_max_count;
  options.hierarchical = [this](const HostLayout& layout) {
    return HierarchicalOptions{
        config_.HierarchicalAllreduce(layout.hosts, layout.EvenHosts() ? layout.fewest_per_host : 0),
        config_.hierarchical_allgather};
  };
  ACCORD_ASSIGN_OR_RETURN(SetComms comms, world_->CreateSetComms(set->ranks, options));
  set->set_rank = comms.set_rank;
  if (set->member()) {
    set->hosts = comms.hosts;
    set->staging_window_bytes = config_.StagingWindowBytes(comms.hosts > 1);
    ACCORD_LOG(kDebug) << "process set " << id << ": " << comms.layout << ", backend " << comms.backend->name()
                       << " (allreduce " << (comms.two_level.allreduce ? "two-level" : "flat") << ", allgather "
                       << (comms.two_level.allgather ? "two-level" : "flat") << ")"
                       << ", staging window " << set->staging_window_bytes << " bytes";
    set->transport = std::move(comms.transport);
    set->backend = std::move(comms.backend);
    StallOptions stall;
    if (!config_.stall_check_disable) {
      stall.check_seconds = config_.stall_check_time_seconds;
      stall.shutdown_seconds = config_.stall_shutdown_time_seconds;
    }
    set->controller = std::make_unique<Controller>(set->transport.get(), config_.cache_capacity, stall);
    if (autotuner_) set->controller->SetCacheEnabled(autotuner_->cache_enabled());
    set->queue = std::make_unique<TensorQueue>(&signal_);
    if (config_.carry_small_allreduce) {
      // Host memory only: the coordinator reads the input while the user's
      // thread waits for it (controller.h, "Carried allreduce").
      TensorQueue* queue = set->queue.get();
      set->controller->SetCarrier([queue](const Request& request, std::string* data) {
        if (request.device.type != DeviceType::kCPU || request.op == ReduceOp::kAdasum) return false;
        return data->size() < ControlTransport::kCarryBytes &&
               queue->CopyInput(request.name, ControlTransport::kCarryBytes - data->size(), data);
      });
    }
  }
  return set;
}

Status Runtime::ChooseLoneAllreduce(const ProcessSet& global) {
  switch (config_.lone_allreduce) {
    case LoneAllreduce::kInPlace: lone_in_place_ = true; break;
    case LoneAllreduce::kStaged: lone_in_place_ = false; break;
    case LoneAllreduce::kAuto:
      if (global.size() == 1) {
        lone_in_place_ = true;  // no peer: in place copies nothing, staging copies twice
      } else if (global.hosts > 1 || global.staging_window_bytes == 0) {
        // Across hosts the probe would time the network, not the copies
        // it is about: sets that stage (one made later on one host, or any
        // with ACCORD_STAGING_WINDOW_BYTES given) keep the staged way.
        lone_in_place_ = false;
      } else {
        ACCORD_ASSIGN_OR_RETURN(const LoneProbe probe,
                                ProbeLoneAllreduce(*global.backend, fusion_buffer_, global.staging_window_bytes));
        lone_in_place_ = probe.in_place();
        ACCORD_LOG(kDebug) << "lone allreduces larger than the staging window: "
                           << (lone_in_place_ ? "in place" : "staged") << " (probe: " << probe.in_place_seconds * 1e6
                           << " us in place, " << probe.staged_seconds * 1e6 << " us staged)";
      }
      break;
  }
  return Status::OK();
}

Status Runtime::CheckSameEverywhere(const InitOptions& options) const {
  const MpiWorld& world = *world_;
  const Config& c = config_;
  ACCORD_RETURN_IF_ERROR(world.CheckSameEverywhere("ACCORD_FUSION_THRESHOLD", c.fusion_threshold_bytes));
  ACCORD_RETURN_IF_ERROR(world.CheckSameEverywhere("ACCORD_STAGING_WINDOW_BYTES", c.staging_window_bytes));
  ACCORD_RETURN_IF_ERROR(world.CheckSameEverywhere("whether ACCORD_STAGING_WINDOW_BYTES is set (1) or not (0)",
                                                   c.staging_window_set ? 1 : 0));
  ACCORD_RETURN_IF_ERROR(world.CheckSameEverywhere("ACCORD_HIERARCHICAL_ALLREDUCE", c.hierarchical_allreduce ? 1 : 0));
  ACCORD_RETURN_IF_ERROR(world.CheckSameEverywhere("whether ACCORD_HIERARCHICAL_ALLREDUCE is set (1) or not (0)",
                                                   c.hierarchical_allreduce_set ? 1 : 0));
  ACCORD_RETURN_IF_ERROR(world.CheckSameEverywhere("ACCORD_HIERARCHICAL_ALLGATHER", c.hierarchical_allgather ? 1 : 0));
  ACCORD_RETURN_IF_ERROR(world.CheckSameEverywhere("ACCORD_LONE_ALLREDUCE", static_cast<int64_t>(c.lone_allreduce)));
  ACCORD_RETURN_IF_ERROR(world.CheckSameEverywhere("ACCORD_MPI_MAX_COUNT", c.mpi_max_count));
  ACCORD_RETURN_IF_ERROR(world.CheckSameEverywhere("ACCORD_CACHE_CAPACITY", c.cache_capacity));
  ACCORD_RETURN_IF_ERROR(world.CheckSameEverywhere("ACCORD_GPU_OPERATIONS", static_cast<int64_t>(c.gpu_operations)));
  ACCORD_RETURN_IF_ERROR(world.CheckSameEverywhere("ACCORD_CUDA_HOST_EMULATION", c.cuda_host_emulation ? 1 : 0));
  // Agree first (collective), then validate (local): a rank that returned
  // early would leave the others waiting in the agreement check.
  std::string layout;
  for (const auto& set : options.process_sets) {
    for (int r : set) layout += std::to_string(r) + ",";
    layout += ";";
  }
  ACCORD_RETURN_IF_ERROR(world.CheckSameEverywhere("the process sets passed to Init (a hash of them)",
                                                   static_cast<int64_t>(std::hash<std::string>()(layout) >> 1)));
  for (const auto& set : options.process_sets) ACCORD_RETURN_IF_ERROR(CheckProcessSetRanks(set, world.size()));
  return Status::OK();
}

Result<std::unique_ptr<Runtime>> Runtime::Create(const InitOptions& options, Timeline* timeline,
                                                 MetricsRecorder* metrics) {
  std::unique_ptr<Runtime> rt(new Runtime());
  rt->timeline_ = timeline;
  rt->metrics_ = metrics;
  ACCORD_ASSIGN_OR_RETURN(rt->config_, Config::FromEnv());
  SetLogLevel(rt->config_.log_level);
  SetLogShowTime(!rt->config_.log_hide_time);
  ACCORD_ASSIGN_OR_RETURN(rt->mpi_, MpiEnvironment::Acquire());
  ACCORD_ASSIGN_OR_RETURN(rt->world_, MpiWorld::Create());
  const MpiWorld& world = *rt->world_;
  SetLogRank(world.rank());
  // Both before any set's poll policy is made.
  RoundScheduler::Machine machine;
  machine.shared_core = OnlyOneCore();
  const unsigned cores = std::thread::hardware_concurrency();
  machine.oversubscribed = cores > 0 && static_cast<unsigned>(world.local_size()) > cores;
  // Spinning for GPU work pays only with a core to spare: on one core the
  // woken thread runs as soon as the waker blocks, and with more ranks than
  // cores a spinning rank takes time from the others.
  if (machine.shared_core || machine.oversubscribed) rt->config_.device_spin_us = 0;
  rt->scheduler_.emplace(rt->config_, rt->sets_, rt->failures_, rt->waiters_, machine);
  ACCORD_RETURN_IF_ERROR(rt->CheckSameEverywhere(options));

  std::vector<std::vector<int>> all_sets;
  std::vector<int> everyone(world.size());
  for (int r = 0; r < world.size(); ++r) everyone[r] = r;
  all_sets.push_back(everyone);
  for (const auto& set : options.process_sets) all_sets.push_back(set);
  for (auto& ranks : all_sets) {
    ACCORD_ASSIGN_OR_RETURN(auto set, rt->MakeSet(rt->sets_.NextId(), std::move(ranks)));
    rt->sets_.Add(std::move(set));
  }
  // The global set decides for every set.
  ACCORD_RETURN_IF_ERROR(rt->ChooseLoneAllreduce(*rt->global_set()));
  ACCORD_RETURN_IF_ERROR(world.CheckSameEverywhere("ACCORD_AUTOTUNE", rt->config_.autotune ? 1 : 0));
  ACCORD_ASSIGN_OR_RETURN(rt->autotuner_, Autotuner::Create(rt->config_, world.rank() == 0, metrics));
  // Every rank came this far (the checks above are collective): after an
  // error that ended an earlier run, the job may finalize normally again.
  MpiEnvironment::ClearJobFailed();
  // On one core the coordinator holds rounds back until a thread waits: a
  // thread starting to wait must wake it.
  rt->waiters_.set_wake_on_wait(machine.shared_core);
  ACCORD_LOG(kDebug) << "initialised: " << rt->config_.ToString()
                     << (machine.shared_core ? " (one core: collectives wait for a thread to wait)" : "");
  rt->watchdog_ = std::make_unique<CollectiveWatchdog>(rt->config_.collective_timeout_seconds,
                                                       [w = rt->world_.get()](const std::string& message) {
                                                         ACCORD_LOG(kFatal) << message;
                                                         w->Abort(kCollectiveTimeoutExitCode);
                                                       });
  rt->failures_.set_running();
  rt->thread_ = std::thread([r = rt.get()] { r->Loop(); });
  return rt;
}

Runtime::~Runtime() {
  Shutdown();
  // The coordinator has stopped: freeing the communicators here is safe.
  sets_.Clear();
}

void Runtime::Shutdown() {
  failures_.RequestStop();
  signal_.Notify();
  if (thread_.joinable()) thread_.join();
  waiters_.set_wake_on_wait(false);
  // The coordinator has stopped: what it queued on the GPU completes (or
  // the watchdog fails it) before the communicators go.
  if (device_made_) device_->Shutdown();
}

Result<DeviceRuntime*> Runtime::Devices() {
  if (device_made_.load()) return device_.get();
  std::lock_guard<std::mutex> lock(device_mutex_);
  if (!device_) {
    ACCORD_ASSIGN_OR_RETURN(DeviceApi * api, ProcessDeviceApi(config_.cuda_host_emulation));
    // The GPU path's fatal error (the watchdog's), reported from its poller
    // thread: the coordinator takes it as its own (RunIteration).
    device_ = std::make_unique<DeviceRuntime>(config_, api, [this](const Status& s) {
      failures_.Report(s);
      signal_.Notify();
    });
    device_made_ = true;
  }
  return device_.get();
}

void Runtime::Stop(const Status& reason) {
  const Status first = failures_.MarkStopped(reason);
  sets_.ForEachMember([&first](ProcessSet& set) {
    for (auto& entry : set.queue->Close(first)) entry.handle->CompletePart(first);
  });
}

Result<std::shared_ptr<ProcessSet>> Runtime::FindMemberSet(ProcessSetId id) const {
  return sets_.FindMember(id, world_->rank());
}

bool Runtime::WakeFor(const HandleState* state) const {
  return !config_.fast_path || !FastPath::Get().DeferWake(state);
}

Result<Handle> Runtime::Submit(ProcessSet& set, std::vector<TensorEntry> entries, std::shared_ptr<HandleState> state) {
  ACCORD_RETURN_IF_ERROR(set.queue->Enqueue(std::move(entries), WakeFor(state.get())));
  return Handle(std::move(state));
}

Result<Handle> Runtime::Submit(ProcessSet& set, TensorEntry&& entry, std::shared_ptr<HandleState> state) {
  ACCORD_RETURN_IF_ERROR(set.queue->Enqueue(std::move(entry), WakeFor(state.get())));
  return Handle(std::move(state));
}

}  // namespace accord
