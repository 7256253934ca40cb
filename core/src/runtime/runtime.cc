#include "runtime/runtime.h"

#include <sched.h>

#include <algorithm>
#include <functional>
#include <utility>

#include "backends/mpi/mpi_environment.h"
#include "device/device_factory.h"
#include "common/logging.h"
#include "runtime/validate.h"
#include "runtime/waiters.h"

namespace accord {

PollPolicy Runtime::poll_policy() {
  PollPolicy policy;
  policy.spin = std::chrono::microseconds(config_.poll_spin_us);
  policy.max_sleep = std::chrono::microseconds(config_.poll_max_sleep_us);
  policy.max_backoff = std::chrono::microseconds(config_.idle_backoff_max_us);
  // A sleep ends at once if anything was enqueued since the round took its
  // requests or since the sleep before: not only during the sleep. The
  // coordinator is often preempted between two tests while the training
  // thread has the core, and an enqueue that landed there used to be noticed
  // only when the sleep after it ended.
  policy.sleep = [this](std::chrono::microseconds d) {
    const uint64_t seen = poll_seen_;
    signal_.WaitFor(seen, d);
    poll_seen_ = signal_.generation();
    return poll_seen_ != seen;
  };
  // More ranks on this host than cores: a spinning rank would take time
  // from the ranks it waits for.
  if (!oversubscribed_) policy.waited_spin = std::chrono::microseconds(config_.poll_waited_spin_us);
  policy.waited_on = [] { return Waiters::Get().count() > 0; };
  // On one core, once a wait has lasted 1 ms with no thread waiting, the
  // others are late and the training thread owns the core: sleep the
  // longest back-off at once (an enqueue or a thread starting to wait ends
  // it early).
  // So does a rank in a round in which it holds nothing up
  // (runtime.h, OnlyGlobalSet): nothing the round can agree waits for it.
  // Until it enqueues: its new tensors wait for the next round, which waits
  // for this one, and the thread that then starts to wait does not wake the
  // coordinator (on more than one core). A long sleep begun between the
  // enqueue and that wait cost the step the whole back-off (10 ms): after 3
  // of 60 enqueues in a 2x1 probe at 10 Gbit/s (docs/benchmarks.md).
  policy.unwaited_sleep = std::chrono::microseconds(config_.idle_backoff_max_us);
  if (!shared_core_) {
    policy.unwaited_if = [this] {
      return round_holds_nothing_up_ && signal_.generation() == round_generation_;
    };
  }
  policy.deadline = &failure_deadline_;
  return policy;
}

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
  options.policy = poll_policy();
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
  }
  return set;
}

Result<std::unique_ptr<Runtime>> Runtime::Create(const InitOptions& options) {
  std::unique_ptr<Runtime> rt(new Runtime());
  ACCORD_ASSIGN_OR_RETURN(rt->config_, Config::FromEnv());
  SetLogLevel(rt->config_.log_level);
  SetLogShowTime(!rt->config_.log_hide_time);
  ACCORD_ASSIGN_OR_RETURN(rt->mpi_, MpiEnvironment::Acquire());
  ACCORD_ASSIGN_OR_RETURN(rt->world_, MpiWorld::Create());
  const MpiWorld& world = *rt->world_;
  SetLogRank(world.rank());
  // Both before any set's poll policy is made.
  rt->shared_core_ = OnlyOneCore();
  const unsigned cores = std::thread::hardware_concurrency();
  rt->oversubscribed_ = cores > 0 && static_cast<unsigned>(world.local_size()) > cores;
  // Spinning for GPU work pays only with a core to spare: on one core the
  // woken thread runs as soon as the waker blocks, and with more ranks than
  // cores a spinning rank takes time from the others.
  if (rt->shared_core_ || rt->oversubscribed_) rt->config_.device_spin_us = 0;
  ACCORD_RETURN_IF_ERROR(world.CheckSameEverywhere("ACCORD_FUSION_THRESHOLD", rt->config_.fusion_threshold_bytes));
  ACCORD_RETURN_IF_ERROR(world.CheckSameEverywhere("ACCORD_STAGING_WINDOW_BYTES", rt->config_.staging_window_bytes));
  ACCORD_RETURN_IF_ERROR(world.CheckSameEverywhere("whether ACCORD_STAGING_WINDOW_BYTES is set (1) or not (0)",
                                                   rt->config_.staging_window_set ? 1 : 0));
  ACCORD_RETURN_IF_ERROR(
      world.CheckSameEverywhere("ACCORD_HIERARCHICAL_ALLREDUCE", rt->config_.hierarchical_allreduce ? 1 : 0));
  ACCORD_RETURN_IF_ERROR(world.CheckSameEverywhere("whether ACCORD_HIERARCHICAL_ALLREDUCE is set (1) or not (0)",
                                                   rt->config_.hierarchical_allreduce_set ? 1 : 0));
  ACCORD_RETURN_IF_ERROR(
      world.CheckSameEverywhere("ACCORD_HIERARCHICAL_ALLGATHER", rt->config_.hierarchical_allgather ? 1 : 0));
  ACCORD_RETURN_IF_ERROR(world.CheckSameEverywhere("ACCORD_MPI_MAX_COUNT", rt->config_.mpi_max_count));
  ACCORD_RETURN_IF_ERROR(world.CheckSameEverywhere("ACCORD_CACHE_CAPACITY", rt->config_.cache_capacity));
  ACCORD_RETURN_IF_ERROR(world.CheckSameEverywhere("ACCORD_GPU_OPERATIONS",
                                                   static_cast<int64_t>(rt->config_.gpu_operations)));
  ACCORD_RETURN_IF_ERROR(
      world.CheckSameEverywhere("ACCORD_CUDA_HOST_EMULATION", rt->config_.cuda_host_emulation ? 1 : 0));
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

  std::vector<std::vector<int>> all_sets;
  std::vector<int> everyone(world.size());
  for (int r = 0; r < world.size(); ++r) everyone[r] = r;
  all_sets.push_back(everyone);
  for (const auto& set : options.process_sets) all_sets.push_back(set);
  for (size_t i = 0; i < all_sets.size(); ++i) {
    ACCORD_ASSIGN_OR_RETURN(auto set, rt->MakeSet(static_cast<ProcessSetId>(i), all_sets[i]));
    rt->sets_[set->id] = set;
  }
  rt->global_set_ = rt->sets_.at(kGlobalProcessSet);
  rt->next_set_id_ = static_cast<ProcessSetId>(all_sets.size());
  ACCORD_RETURN_IF_ERROR(world.CheckSameEverywhere("ACCORD_AUTOTUNE", rt->config_.autotune ? 1 : 0));
  ACCORD_ASSIGN_OR_RETURN(rt->autotuner_, Autotuner::Create(rt->config_, world.rank() == 0));
  // Every rank came this far (the checks above are collective): after an
  // error that ended an earlier run, the job may finalize normally again.
  MpiEnvironment::ClearJobFailed();
  // On one core the coordinator holds rounds back until a thread waits: a
  // thread starting to wait must wake it.
  Waiters::Get().set_wake_on_wait(rt->shared_core_);
  ACCORD_LOG(kDebug) << "initialised: " << rt->config_.ToString()
                     << (rt->shared_core_ ? " (one core: collectives wait for a thread to wait)" : "");
  rt->watchdog_ = std::make_unique<CollectiveWatchdog>(
      rt->config_.collective_timeout_seconds, [w = rt->world_.get()](const std::string& message) {
        ACCORD_LOG(kFatal) << message;
        w->Abort(kCollectiveTimeoutExitCode);
      });
  rt->running_ = true;
  rt->thread_ = std::thread([r = rt.get()] { r->Loop(); });
  return rt;
}

Runtime::~Runtime() {
  Shutdown();
  // The coordinator has stopped: freeing the communicators here is safe.
  std::lock_guard<std::mutex> lock(sets_mutex_);
  sets_.clear();
  global_set_.reset();
}

void Runtime::Shutdown() {
  shutdown_requested_ = true;
  signal_.Notify();
  if (thread_.joinable()) thread_.join();
  Waiters::Get().set_wake_on_wait(false);
  // The coordinator has stopped: what it queued on the GPU completes (or
  // the watchdog fails it) before the communicators go.
  if (device_made_) device_->Shutdown();
}

Result<DeviceRuntime*> Runtime::Devices() {
  if (device_made_.load()) return device_.get();
  std::lock_guard<std::mutex> lock(device_mutex_);
  if (!device_) {
    ACCORD_ASSIGN_OR_RETURN(DeviceApi * api, ProcessDeviceApi(config_.cuda_host_emulation));
    device_ = std::make_unique<DeviceRuntime>(config_, api, [this](const Status& s) { RecordDeviceFailure(s); });
    device_made_ = true;
  }
  return device_.get();
}

void Runtime::RecordDeviceFailure(const Status& status) {
  {
    std::lock_guard<std::mutex> lock(device_mutex_);
    if (device_failure_.ok()) device_failure_ = status;
  }
  signal_.Notify();
}

Status Runtime::TakeDeviceFailure() {
  std::lock_guard<std::mutex> lock(device_mutex_);
  return std::exchange(device_failure_, Status::OK());
}

Status Runtime::stop_status() const {
  std::lock_guard<std::mutex> lock(stop_mutex_);
  return stop_status_;
}

void Runtime::Stop(const Status& reason) {
  {
    std::lock_guard<std::mutex> lock(stop_mutex_);
    if (stop_status_.ok()) stop_status_ = reason;
  }
  running_ = false;
  const Status first = stop_status();
  std::lock_guard<std::mutex> lock(sets_mutex_);
  for (auto& [id, set] : sets_) {
    if (!set->member()) continue;
    for (auto& entry : set->queue->Close(first)) entry.handle->CompletePart(first);
  }
}

Result<std::shared_ptr<ProcessSet>> Runtime::FindSet(ProcessSetId id) const {
  std::lock_guard<std::mutex> lock(sets_mutex_);
  auto it = sets_.find(id);
  if (it == sets_.end()) return Status::InvalidArgument("process set " + std::to_string(id) + " does not exist");
  return it->second;
}

Result<std::shared_ptr<ProcessSet>> Runtime::FindMemberSet(ProcessSetId id) const {
  ACCORD_ASSIGN_OR_RETURN(auto set, FindSet(id));
  if (!set->member()) {
    std::string ranks;
    for (int r : set->ranks) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
    return Status::PreconditionFailed("rank " + std::to_string(world_->rank()) + " is not a member of process set " +
                                      std::to_string(id) + " (ranks " + ranks + ")");
  }
  return set;
}

std::vector<ProcessSetId> Runtime::SetIds() const {
  std::lock_guard<std::mutex> lock(sets_mutex_);
  std::vector<ProcessSetId> ids;
  for (const auto& [id, set] : sets_) ids.push_back(id);
  return ids;
}

Result<Handle> Runtime::Submit(ProcessSet& set, std::vector<TensorEntry> entries,
                               std::shared_ptr<HandleState> state) {
  ACCORD_RETURN_IF_ERROR(set.queue->Enqueue(std::move(entries)));
  return Handle(std::move(state));
}

Result<Handle> Runtime::Submit(ProcessSet& set, TensorEntry&& entry, std::shared_ptr<HandleState> state) {
  ACCORD_RETURN_IF_ERROR(set.queue->Enqueue(std::move(entry)));
  return Handle(std::move(state));
}

}  // namespace accord
