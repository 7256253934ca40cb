// The coordinator thread's side of Runtime: the loop, the rounds, and the
// execution of what the rounds agreed.

#include <sched.h>
#include <signal.h>

#include <algorithm>
#include <optional>
#include <thread>

#if defined(__linux__)
#include <sys/prctl.h>
#endif

#include "backends/mpi/mpi_environment.h"
#include "common/logging.h"
#include "fusion/fusion_planner.h"
#include "metrics/metrics.h"
#include "ops/collective_ops.h"
#include "runtime/fault_injection.h"
#include "runtime/round_start.h"
#include "runtime/runtime.h"
#include "runtime/thread_slice.h"
#include "runtime/waiters.h"
#include "timeline/timeline.h"

namespace accord {

namespace {

using Clock = std::chrono::steady_clock;

// Short sleeps between MPI tests only help if the kernel honours them; the
// default 50 µs timer slack would round every one of them up.
void UseFineTimerSlack() {
#if defined(__linux__)
  prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
#endif
}

// How long the rounds after a fatal error may wait for the other ranks in
// all (runtime.h): the stall shutdown time, at most kFailureWaitMax (also
// when the stall inspector never stops the job), plus two cycle times. A
// healthy rank joins a round within its idle wait (milliseconds) plus the
// cycle time; one that has not joined by then is blocked in a collective
// with this rank and never will.
constexpr double kFailureWaitMax = 30.0;  // seconds

Clock::duration FailureWait(const Config& config, double cycle_time_ms) {
  double seconds = kFailureWaitMax;
  if (!config.stall_check_disable && config.stall_shutdown_time_seconds > 0) {
    seconds = std::min(seconds, config.stall_shutdown_time_seconds);
  }
  seconds += 2 * cycle_time_ms / 1000;
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

// Bytes of this rank's inputs to a batch (a rank that has joined
// contributes zeros of the agreed shape).
uint64_t InputBytes(const std::vector<OpItem>& items) {
  uint64_t bytes = 0;
  for (const auto& item : items) {
    bytes += item.entry ? item.entry->input.size_bytes()
                        : static_cast<uint64_t>(NumElements(item.response->shape)) * DataTypeSize(item.response->dtype);
  }
  return bytes;
}

}  // namespace

void Runtime::Loop() {
  UseFineTimerSlack();
  ThreadSlice slice(config_.coordinator_slice_us);
  slice.UseKernels();
  slice_ = &slice;
  auto last_round = Clock::now();
  // A new runtime has done nothing yet: start quiet. A rank with new work
  // starts a round at once regardless.
  last_progress_ = last_round - 8 * std::chrono::microseconds(config_.idle_backoff_max_us);
  uint64_t seen = signal_.generation();
  uint64_t polls_seen = Waiters::Get().polls();
  bool just_executed = false;  // the last iteration ran a collective
  bool was_awaiting = false;
  Clock::time_point awaiting_since;  // when this rank's oldest unmatched announcement was made
  while (true) {
    // A round starts as soon as there is new work here, or after the idle
    // wait (the other ranks may be waiting for this one to take part). While
    // the job makes progress, a rank that announced tensors the others have
    // not yet matched goes straight on: the others are about to start the
    // round that matches them (how long they have been late counts from
    // the round in which this rank announced, not from the last progress
    // before it: a rank whose gradient came first after a quiet forward
    // pass would otherwise sleep a long back-off while the others, a
    // moment behind, wait for it). So does such a rank right after it ran a
    // collective: the others have had that long to catch up, and one that
    // did is already waiting in the next round (a collective of tens of
    // milliseconds on a network counts as no progress of the rounds, and
    // an idle wait here cost every such step up to the back-off cap). When
    // a rank is late for longer, it waits like an idle rank, so waiting for
    // it costs few wake-ups.
    //
    // On one core, while no thread of this process waits for a result, the
    // training thread owns the core: the idle wait is the longest back-off
    // at once (an enqueue, or a thread starting to wait, ends it early).
    // So it is for a rank that holds nothing up: one that announced nothing
    // the others have yet to match, in a job with only the global set
    // (runtime.h, OnlyGlobalSet).
    const auto now = Clock::now();
    const auto quiet = awaiting_others_ ? std::min(now - last_progress_, now - awaiting_since) : now - last_progress_;
    const bool keep_going =
        awaiting_others_ && (just_executed || quiet < 2 * std::chrono::microseconds(config_.idle_timeout_us));
    auto idle = IdleWait(config_, quiet);
    if ((shared_core_ && Waiters::Get().count() == 0) || (!awaiting_others_ && OnlyGlobalSet())) {
      idle = std::max(idle, std::chrono::microseconds(config_.idle_backoff_max_us));
    }
    const auto device_spin = DeviceSpin();
    if (!shutdown_requested_ && !keep_going) {
      // GPU work comes in quick succession: poll for the next before
      // sleeping (a wake-up from another core costs about as much again).
      const auto spin_until = Clock::now() + device_spin;
      while (signal_.generation() == seen && Clock::now() < spin_until) sched_yield();
      signal_.WaitFor(seen, idle);
    }
    const uint64_t now_seen = signal_.generation();
    seen = now_seen == seen ? seen
                            : LetBurstFinish(signal_, now_seen, shared_core_, polls_seen, device_spin,
                                             [this] { return NewBytes(); });
    polls_seen = Waiters::Get().polls();
    // The cycle time may change under ACCORD_AUTOTUNE.
    const auto cycle = std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double, std::milli>(autotuner_->cycle_time_ms()));
    if (cycle.count() > 0) std::this_thread::sleep_until(last_round + cycle);
    last_round = Clock::now();
    bool stop = false;
    Status status = RunIteration(&stop);
    just_executed = executed_;
    if (awaiting_others_ && !was_awaiting) awaiting_since = last_round;
    was_awaiting = awaiting_others_;
    if (executed_) Timeline::Get().RecordCycle(last_round);
    autotuner_->EndIteration(executed_, last_round, Clock::now());
    NotifyCompleted();
    if (!status.ok()) Abandon(status);
    if (stop) {
      // An error ended the job: this process must not wait for the other
      // ranks in MPI_Finalize when it exits (mpi_environment.h).
      if (!failure_.ok() || stopped_by_error_) MpiEnvironment::MarkJobFailed();
      // This rank's own operations fail with its own fatal error, if any.
      Stop(failure_.ok() ? Status::ShutDown(stop_message_ + "; the operation cannot complete") : failure_);
      slice_ = nullptr;
      return;
    }
  }
}

bool Runtime::OnlyGlobalSet() const {
  std::lock_guard<std::mutex> lock(sets_mutex_);
  return sets_.size() == 1;
}

uint64_t Runtime::NewBytes() const {
  std::lock_guard<std::mutex> lock(sets_mutex_);
  uint64_t bytes = 0;
  for (const auto& [id, set] : sets_) {
    if (set->member()) bytes += set->queue->NewBytes();
  }
  return bytes;
}

std::chrono::microseconds Runtime::DeviceSpin() const {
  const auto spin = std::chrono::microseconds(config_.device_spin_us);
  if (spin.count() <= 0 || !device_made_.load() || !device_->ActiveWithin(spin)) return std::chrono::microseconds(0);
  return spin;
}

void Runtime::NotifyCompleted() {
  for (const auto& handle : completed_) handle->NotifyWaiters();
  completed_.clear();
}

Status Runtime::AbsorbFailure(Status status) {
  if (status.ok() || !failure_.ok()) return status;
  const std::string what =
      "rank " + std::to_string(world_->rank()) + "'s coordinator failed: " + status.ToString();
  failure_ = Status(status.code(), "accord stopped: " + what);
  stop_reason_ = what;
  shutdown_requested_ = true;
  const Clock::duration wait = FailureWait(config_, autotuner_->cycle_time_ms());
  failure_deadline_ = Clock::now() + wait;
  ACCORD_LOG(kError) << "coordinator failed: " << status << "; stopping every rank (waiting up to "
                     << std::chrono::duration<double>(wait).count() << " s for the others to take part)";
  return Status::OK();
}

void Runtime::Abandon(const Status& why) {
  ACCORD_LOG(kFatal) << failure_.message() << "; the other ranks could not be told (" << why
                     << "): they may be waiting inside a collective with this rank. Ending the job with MPI_Abort";
  world_->Abort(1);
}

void Runtime::SetCacheEnabled(bool enabled) {
  std::lock_guard<std::mutex> lock(sets_mutex_);
  for (auto& [id, set] : sets_) {
    if (set->member()) set->controller->SetCacheEnabled(enabled);
  }
}

Status Runtime::RunIteration(bool* stop) {
  awaiting_others_ = false;
  // Every error below goes through AbsorbFailure (runtime.h): the first
  // turns into the rounds that stop every rank.
  ACCORD_RETURN_IF_ERROR(AbsorbFailure(TakeInjectedFault(testing::FaultPoint::kIteration)));
  ACCORD_RETURN_IF_ERROR(AbsorbFailure(TakeDeviceFailure()));
  ACCORD_RETURN_IF_ERROR(AbsorbFailure(RunRound(*global_set_, stop)));
  if (*stop) return Status::OK();
  std::vector<std::shared_ptr<ProcessSet>> others;
  {
    std::lock_guard<std::mutex> lock(sets_mutex_);
    for (auto& [id, set] : sets_) {
      if (id != kGlobalProcessSet && set->member()) others.push_back(set);
    }
  }
  for (auto& set : others) {
    ACCORD_RETURN_IF_ERROR(AbsorbFailure(TakeInjectedFault(testing::FaultPoint::kSetRound)));
    ACCORD_RETURN_IF_ERROR(AbsorbFailure(RunRound(*set, nullptr)));
  }
  return Status::OK();
}

Status Runtime::RunRound(ProcessSet& set, bool* stop) {
  // Before the requests are taken: a later enqueue ends the round's sleeps.
  round_generation_ = signal_.generation();
  poll_seen_ = round_generation_;
  std::vector<Request> requests = set.queue->TakeNewRequests();
  const bool global = stop != nullptr;
  // A rank whose coordinator failed asks to stop in every round it still runs.
  const bool failed = !failure_.ok();
  const bool want_stop = (global && shutdown_requested_.load()) || failed;
  const uint64_t hits_before = set.controller->cache_hits();
  const uint64_t misses_before = set.controller->cache_misses();
  const auto round_start = Clock::now();
  Timeline::Get().RecordAnnounced(requests, round_start);
  round_holds_nothing_up_ =
      global && !want_stop && requests.empty() && set.controller->num_pending() == 0 && OnlyGlobalSet();
  std::optional<CollectiveWatchdog::Scope> watched(std::in_place, *watchdog_, set, nullptr);
  // The short time slice while the round waits for the others (thread_slice.h).
  if (slice_ != nullptr) slice_->UseShort();
  Result<RoundResult> round =
      set.controller->RunRound(std::move(requests), want_stop, global && executed_, stop_reason_,
                               global ? autotuner_->proposal() : std::optional<TuningChoice>(), failed);
  if (slice_ != nullptr) slice_->UseKernels();
  ACCORD_ASSIGN_OR_RETURN(RoundResult result, std::move(round));
  watched.reset();
  round_holds_nothing_up_ = false;
  const auto round_end = Clock::now();
  MetricsRecorder::Get().AddRound(round_end - round_start, set.controller->cache_hits() - hits_before,
                                  set.controller->cache_misses() - misses_before);
  Timeline::Get().RecordAgreed(result.ready, round_end);
  if (result.shutdown && !global) {
    // The stall inspector stopped this process set: stop the whole job in
    // the next round of the global set, with its report as the reason.
    if (stop_reason_.empty()) {
      const std::string& why = result.stop_message;
      const bool ours = why.rfind("accord ", 0) == 0;  // "accord was stopped by ..."
      stop_reason_ = "process set " + std::to_string(set.id) + (ours ? " " + why.substr(7) : ": " + why);
    }
    shutdown_requested_ = true;
  }
  // Every rank switches to a new autotuned setting in the same round, before
  // planning what the round agreed (and before any set's next round).
  if (result.tuning) {
    autotuner_->Apply(*result.tuning);
    SetCacheEnabled(autotuner_->cache_enabled());
  }
  if (global) {
    *stop = result.shutdown;
    if (result.shutdown) stop_message_ = result.stop_message;
    if (result.stopped_by_error) stopped_by_error_ = true;
    executed_ = false;
    if (result.any_progress) last_progress_ = Clock::now();
  }
  // A rank's coordinator failed: it will not take part in what this round
  // agreed, so no rank runs it; the entries stay queued and fail when the
  // job stops, after the next global round at the latest.
  if (result.failed) return Status::OK();
  if (!result.ready.empty()) executed_ = true;
  if (set.controller->num_pending() > 0) awaiting_others_ = true;
  ACCORD_LOG(kTrace) << "round of set " << set.id << ": " << result.ready.size() << " ready";
  return Execute(set, result.ready);
}

Status Runtime::Execute(ProcessSet& set, const std::vector<Response>& ready) {
  if (ready.empty()) return Status::OK();
  PhaseTimes phases;  // marked by the ops only while a timeline is active
  const OpContext ctx{set.backend.get(), &fusion_buffer_, set.set_rank, set.size(),
                      Timeline::Get().active() ? &phases : nullptr, set.staging_window_bytes};
  const bool large_in_place = set.staging_window_bytes == 0 && set.backend->FusesLargeInPlace();
  for (const FusedBatch& batch : PlanFusion(ready, autotuner_->fusion_threshold_bytes(), large_in_place)) {
    std::vector<const std::string*> names;
    names.reserve(batch.members.size());
    for (size_t index : batch.members) names.push_back(&ready[index].name);
    std::vector<TensorQueue::Taken> entries = set.queue->Remove(names);
    std::vector<OpItem> items;
    items.reserve(entries.size());
    for (size_t i = 0; i < entries.size(); ++i) {
      const Response& response = ready[batch.members[i]];
      items.push_back({&response, entries[i] ? &entries[i].mapped() : nullptr});
      // A joined rank has no entry for what the others submitted; it still
      // counts their unnamed ops (ProcessSet::CatchUpAutoName).
      if (!entries[i]) set.CatchUpAutoName(response.group.empty() ? response.name : response.group);
    }
    const Response& first = ready[batch.members.front()];
    Status status = first.ToStatus();
    if (first.ok()) {
      switch (first.type) {
        case OpType::kBarrier:
          break;  // negotiation itself was the barrier
        case OpType::kJoin:
          if (items[0].entry) items[0].entry->handle->SetValue(first.last_joined_rank);
          break;
        case OpType::kAddProcessSet:
        case OpType::kRemoveProcessSet:
          status = ApplyProcessSetChange(first, items[0].entry);
          break;
        default:
          ACCORD_RETURN_IF_ERROR(ExecuteCollective(set, ctx, items, &entries, &status, &phases));
      }
    }
    // (A batch queued on a device has handed its entries to the completion
    // poller: `entries` is empty.)
    for (auto& taken : entries) {
      if (taken && FinishEntry(taken.mapped(), first.type, status)) {
        completed_.push_back(std::move(taken.mapped().handle));
      }
    }
  }
  return Status::OK();
}

Status Runtime::ExecuteCollective(ProcessSet& set, const OpContext& ctx, const std::vector<OpItem>& items,
                                  std::vector<TensorQueue::Taken>* entries, Status* status, PhaseTimes* phases) {
  const Response& first = *items.front().response;
  for (const auto& item : items) {
    if (!item.entry && first.type != OpType::kAllreduce) {
      return Status::Internal("rank has no tensor '" + item.response->name + "' for an agreed " +
                              OpTypeName(first.type));
    }
  }
  // Counted before the entries may move to the completion poller.
  const uint64_t bytes = InputBytes(items);
  *phases = PhaseTimes{};
  const auto batch_start = Clock::now();
  // A failure here means the ranks may no longer be in step: fatal. The
  // batch's own handles fail with it.
  Status fatal = TakeInjectedFault(testing::FaultPoint::kCollective);
  if (fatal.ok() && first.device_type == DeviceType::kCUDA) {
    fatal = ExecuteOnDevice(set, items, entries, status, phases);
  } else if (fatal.ok()) {
    CollectiveWatchdog::Scope watched(*watchdog_, set, &items);
    if (!TakeInjectedFault(testing::FaultPoint::kFreezeInCollective).ok()) raise(SIGSTOP);
    fatal = ExecuteBatch(ctx, items);
  }
  if (!fatal.ok()) {
    for (auto& taken : *entries) {
      if (taken && FinishEntry(taken.mapped(), first.type, fatal)) {
        completed_.push_back(std::move(taken.mapped().handle));
      }
    }
    entries->clear();
    return fatal;
  }
  if (!status->ok()) return Status::OK();  // an error every rank of the set met alike: this batch fails
  const auto batch_end = Clock::now();
  MetricsRecorder::Get().AddCollective(items.size(), bytes, batch_end - batch_start);
  autotuner_->AddBytes(bytes);
  if (Timeline::Get().active()) {
    std::vector<const Response*> members;
    members.reserve(items.size());
    for (const auto& item : items) members.push_back(item.response);
    Timeline::Get().RecordCollective(members, bytes, batch_start, phases->packed, phases->exchanged, batch_end);
  }
  return Status::OK();
}

Status Runtime::ExecuteOnDevice(ProcessSet& set, const std::vector<OpItem>& items,
                                std::vector<TensorQueue::Taken>* entries, Status* agreed, PhaseTimes* phases) {
  ACCORD_ASSIGN_OR_RETURN(DeviceRuntime * devices, Devices());
  return devices->Execute(set, items, entries, agreed, Timeline::Get().active() ? phases : nullptr);
}

Status Runtime::ApplyProcessSetChange(const Response& response, TensorEntry* entry) {
  if (response.type == OpType::kAddProcessSet) {
    // Collective over every rank: all of them apply this response in the
    // same round of the global set.
    ACCORD_ASSIGN_OR_RETURN(auto set,
                            MakeSet(next_set_id_++, std::vector<int>(response.ranks.begin(), response.ranks.end())));
    {
      std::lock_guard<std::mutex> lock(sets_mutex_);
      sets_[set->id] = set;
    }
    if (entry) entry->handle->SetValue(set->id);
    return Status::OK();
  }
  std::shared_ptr<ProcessSet> removed;
  {
    std::lock_guard<std::mutex> lock(sets_mutex_);
    auto it = sets_.find(response.target_set);
    if (it == sets_.end() || response.target_set == kGlobalProcessSet) {
      return Status::InvalidArgument("process set " + std::to_string(response.target_set) +
                                     " does not exist or cannot be removed");
    }
    removed = it->second;
    sets_.erase(it);
  }
  if (device_made_) device_->ForgetSet(removed->id);
  if (removed->member()) {
    const Status reason =
        Status::Aborted("process set " + std::to_string(removed->id) + " was removed before the operation ran");
    for (auto& pending : removed->queue->Close(reason)) pending.handle->CompletePart(reason);
    // Free the communicators here, on the thread that owns MPI.
    removed->controller.reset();
    removed->backend.reset();
    removed->transport.reset();
  }
  return Status::OK();
}

}  // namespace accord
