// The coordinator thread's side of Runtime: the loop (paced by the
// RoundScheduler), the rounds, and the execution of what the rounds agreed.

#include <signal.h>

#include <cstring>
#include <optional>

#if defined(__linux__)
#include <sys/prctl.h>
#endif

#include "backends/mpi/mpi_environment.h"
#include "common/dtype_kernels.h"
#include "common/logging.h"
#include "fusion/fusion_planner.h"
#include "metrics/metrics.h"
#include "ops/collective_ops.h"
#include "runtime/fast_path.h"
#include "runtime/fault_injection.h"
#include "runtime/runtime.h"
#include "runtime/thread_slice.h"
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
  // The token: this thread does the coordinator's work only while it holds
  // it, and lets it go while it sleeps idle (fast_path.h).
  FastPath& fast = FastPath::Get();
  std::unique_lock<std::mutex> token(fast.token());
  slice_ = &slice;
  if (config_.fast_path) fast.Attach(this, std::chrono::microseconds(config_.poll_waited_spin_us));
  scheduler_->set_parking([&](bool parked) {
    if (parked) {
      slice_ = nullptr;  // a driving thread keeps its own slice
      if (config_.fast_path) fast.set_parked(true);
      token.unlock();
      return true;
    }
    fast.set_parked(false);
    token.lock();
    slice_ = &slice;
    return !loop_ended_;
  });
  scheduler_->Start();
  while (!loop_ended_) {
    const Clock::time_point started = scheduler_->WaitForRound(DeviceSpin(), autotuner_->cycle_time_ms());
    if (loop_ended_) break;
    Iterate(started);
  }
  fast.Detach();
  scheduler_->set_parking(nullptr);
  slice_ = nullptr;
}

void Runtime::Iterate(Clock::time_point started) {
  bool stop = false;
  Status status = RunIteration(&stop);
  scheduler_->EndIteration();
  const bool executed = scheduler_->executed();
  if (executed) timeline_->RecordCycle(started);
  autotuner_->EndIteration(executed, started, Clock::now());
  NotifyCompleted();
  if (!status.ok()) failures_.Abandon(status, *world_);
  if (!stop) return;
  // An error ended the job: this process must not wait for the other
  // ranks in MPI_Finalize when it exits (mpi_environment.h).
  if (failures_.ended_by_error()) MpiEnvironment::MarkJobFailed();
  // This rank's own operations fail with its own fatal error, if any.
  Stop(failures_.FinalStatus());
  loop_ended_ = true;
}

bool Runtime::Drive(const HandleState& awaited, std::chrono::microseconds budget) {
  // The cycle time spaces every round, and a stop is the coordinator's to
  // run: both leave the work to it.
  if (loop_ended_ || failures_.stop_requested() || failures_.failed() || autotuner_->cycle_time_ms() > 0) {
    return awaited.settled();
  }
  const auto until = Clock::now() + budget;
  do {
    const Clock::time_point started = Clock::now();
    scheduler_->Driven(started);
    metrics_->AddDriven();
    Iterate(started);
    // The coordinator, parked, finds the loop ended when it wakes.
    if (loop_ended_) {
      signal_.Notify();
      break;
    }
  } while (!awaited.settled() && Clock::now() < until && !failures_.stop_requested());
  return awaited.settled();
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

Status Runtime::Absorb(Status status) {
  return failures_.Absorb(std::move(status), world_->rank(), config_, autotuner_->cycle_time_ms());
}

void Runtime::SetCacheEnabled(bool enabled) {
  sets_.ForEachMember([enabled](ProcessSet& set) { set.controller->SetCacheEnabled(enabled); });
}

Status Runtime::RunIteration(bool* stop) {
  scheduler_->BeginIteration();
  // Every error below goes through Absorb (failure_protocol.h): the first
  // turns into the rounds that stop every rank.
  ACCORD_RETURN_IF_ERROR(Absorb(TakeInjectedFault(testing::FaultPoint::kIteration)));
  ACCORD_RETURN_IF_ERROR(Absorb(failures_.TakeReported()));
  return scheduler_->RunRounds(
      [this](ProcessSet& set, bool* stop) {
        if (stop == nullptr) ACCORD_RETURN_IF_ERROR(Absorb(TakeInjectedFault(testing::FaultPoint::kSetRound)));
        return Absorb(RunRound(set, stop));
      },
      stop);
}

Status Runtime::RunRound(ProcessSet& set, bool* stop) {
  std::vector<Request> requests = scheduler_->TakeRequests(set);
  const bool global = stop != nullptr;
  // A rank whose coordinator failed asks to stop in every round it still runs.
  const bool failed = failures_.failed();
  const bool want_stop = (global && failures_.stop_requested()) || failed;
  const uint64_t hits_before = set.controller->cache_hits();
  const uint64_t misses_before = set.controller->cache_misses();
  const auto round_start = Clock::now();
  timeline_->RecordAnnounced(requests, round_start);
  scheduler_->RoundWaits(global && !want_stop && requests.empty() && set.controller->num_pending() == 0);
  std::optional<CollectiveWatchdog::Scope> watched(std::in_place, *watchdog_, set, nullptr, round_start);
  // The short time slice while the round waits for the others
  // (thread_slice.h), from its first unsuccessful test.
  scheduler_->set_round_slice(slice_);
  Result<RoundResult> round = set.controller->RunRound(
      std::move(requests), want_stop, global && scheduler_->executed(), failures_.stop_reason(),
      global ? autotuner_->proposal() : std::optional<TuningChoice>(), failed);
  scheduler_->set_round_slice(nullptr);
  if (slice_ != nullptr) slice_->UseKernels();
  ACCORD_ASSIGN_OR_RETURN(RoundResult result, std::move(round));
  watched.reset();
  scheduler_->RoundReturned();
  const auto round_end = Clock::now();
  metrics_->AddRound(round_end - round_start, set.controller->cache_hits() - hits_before,
                     set.controller->cache_misses() - misses_before);
  timeline_->RecordAgreed(result.ready, round_end);
  AfterRound(set, result, stop, round_end);
  // A rank's coordinator failed: it will not take part in what this round
  // agreed, so no rank runs it; the entries stay queued and fail when the
  // job stops, after the next global round at the latest.
  if (result.failed) return Status::OK();
  scheduler_->Agreed(result, set);
  ACCORD_LOG(kTrace) << "round of set " << set.id << ": " << result.ready.size() << " ready";
  const Status executed = result.carried.empty() ? Execute(set, result.ready)
                                                 : ExecuteCarried(set, result.ready.front(), result.carried, round_end);
  set.controller->Recycle(std::move(result.ready));
  return executed;
}

void Runtime::AfterRound(ProcessSet& set, const RoundResult& result, bool* stop, Clock::time_point ended) {
  const bool global = stop != nullptr;
  // The stall inspector stopped this process set: stop the whole job in the
  // next round of the global set, with its report as the reason.
  if (result.shutdown && !global) failures_.StopForSet(set.id, result.stop_message);
  // Every rank switches to a new autotuned setting in the same round, before
  // planning what the round agreed (and before any set's next round).
  if (result.tuning) {
    autotuner_->Apply(*result.tuning);
    SetCacheEnabled(autotuner_->cache_enabled());
  }
  if (global) {
    *stop = result.shutdown;
    failures_.GlobalRoundEnded(result);
    scheduler_->GlobalRoundEnded(result.any_progress, ended);
  }
}

Status Runtime::Execute(ProcessSet& set, const std::vector<Response>& ready) {
  if (ready.empty()) return Status::OK();
  PhaseTimes phases;  // marked by the ops only while a timeline is active
  const OpContext ctx{
      set.backend.get(),        &fusion_buffer_, set.set_rank, set.size(), timeline_->active() ? &phases : nullptr,
      set.staging_window_bytes, lone_in_place_};
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
        case OpType::kBarrier: break;  // negotiation itself was the barrier
        case OpType::kJoin:
          if (items[0].entry) items[0].entry->handle->SetValue(first.last_joined_rank);
          break;
        case OpType::kAddProcessSet:
        case OpType::kRemoveProcessSet: status = ApplyProcessSetChange(first, items[0].entry); break;
        default: ACCORD_RETURN_IF_ERROR(ExecuteCollective(set, ctx, items, &entries, &status, &phases));
      }
    }
    // (A batch queued on a device has handed its entries to the completion
    // poller: `entries` is empty.)
    Finish(&entries, first.type, status);
    set.queue->Recycle(&entries);
  }
  return Status::OK();
}

Status Runtime::ExecuteCarried(ProcessSet& set, const Response& r, const std::vector<std::string>& carried,
                               Clock::time_point start) {
  TensorQueue::Taken taken = set.queue->Remove(r.name);
  // This rank carried its input, so it holds the entry.
  if (!taken) return Status::Internal("carried allreduce '" + r.name + "' has no entry on this rank");
  const Status fatal = TakeInjectedFault(testing::FaultPoint::kCollective);
  if (!fatal.ok()) {
    Finish(&taken, r.type, fatal);
    return fatal;
  }
  TensorEntry& e = taken.mapped();
  const int64_t n = NumElements(r.shape);
  const size_t bytes = static_cast<size_t>(n) * DataTypeSize(r.dtype);
  void* out = e.output_is_input ? e.input.data : e.output.data;
  // Every rank sums the same inputs in the same order: the same result on
  // each. The inputs are copied to word-aligned memory for the kernels; a
  // carried input is at most kCarryBytes, so the stack holds it.
  uint64_t input[ControlTransport::kCarryBytes / sizeof(uint64_t)];
  if (bytes > sizeof(input)) {
    const Status bad = Status::Internal("carried allreduce '" + r.name + "' is over kCarryBytes");
    Finish(&taken, r.type, bad);
    return bad;
  }
  const ReduceOp op = BackendOp(r.op);
  for (size_t k = 0; k < carried.size() && n > 0; ++k) {
    std::memcpy(input, carried[k].data(), bytes);
    if (r.prescale_factor != 1.0) ScaleCopy(input, input, n, r.dtype, r.prescale_factor);
    if (k == 0) {
      std::memcpy(out, input, bytes);
    } else {
      ReduceInto(out, input, n, r.dtype, op);
    }
  }
  const int divisor = AverageDivisor(r.op, static_cast<int>(carried.size()));
  if (n > 0 && (r.postscale_factor != 1.0 || divisor != 1)) {
    ScaleDivideCopy(out, out, n, r.dtype, r.postscale_factor, divisor);
  }
  const auto end = Clock::now();
  metrics_->AddCarried();
  metrics_->AddCollective(1, bytes, end - start);
  autotuner_->AddBytes(bytes);
  if (timeline_->active()) timeline_->RecordCollective({&r}, bytes, start, {}, {}, end);
  Finish(&taken, r.type, Status::OK());
  set.queue->Recycle(&taken);
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
    CollectiveWatchdog::Scope watched(*watchdog_, set, &items, batch_start);
    if (!TakeInjectedFault(testing::FaultPoint::kFreezeInCollective).ok()) raise(SIGSTOP);
    fatal = ExecuteBatch(ctx, items);
  }
  if (!fatal.ok()) {
    Finish(entries, first.type, fatal);
    entries->clear();
    return fatal;
  }
  if (!status->ok()) return Status::OK();  // an error every rank of the set met alike: this batch fails
  const auto batch_end = Clock::now();
  metrics_->AddCollective(items.size(), bytes, batch_end - batch_start);
  autotuner_->AddBytes(bytes);
  if (timeline_->active()) {
    std::vector<const Response*> members;
    members.reserve(items.size());
    for (const auto& item : items) members.push_back(item.response);
    timeline_->RecordCollective(members, bytes, batch_start, phases->packed, phases->exchanged, batch_end);
  }
  return Status::OK();
}

void Runtime::Finish(std::vector<TensorQueue::Taken>* entries, OpType type, const Status& status) {
  for (auto& taken : *entries) Finish(&taken, type, status);
}

void Runtime::Finish(TensorQueue::Taken* taken, OpType type, const Status& status) {
  if (*taken && FinishEntry(taken->mapped(), type, status)) completed_.push_back(std::move(taken->mapped().handle));
}

Status Runtime::ExecuteOnDevice(ProcessSet& set, const std::vector<OpItem>& items,
                                std::vector<TensorQueue::Taken>* entries, Status* agreed, PhaseTimes* phases) {
  ACCORD_ASSIGN_OR_RETURN(DeviceRuntime * devices, Devices());
  return devices->Execute(set, items, entries, agreed, timeline_->active() ? phases : nullptr);
}

Status Runtime::ApplyProcessSetChange(const Response& response, TensorEntry* entry) {
  if (response.type == OpType::kAddProcessSet) {
    // Collective over every rank: all of them apply this response in the
    // same round of the global set.
    ACCORD_ASSIGN_OR_RETURN(auto set,
                            MakeSet(sets_.NextId(), std::vector<int>(response.ranks.begin(), response.ranks.end())));
    const ProcessSetId id = set->id;
    sets_.Add(std::move(set));
    if (entry) entry->handle->SetValue(id);
    return Status::OK();
  }
  ACCORD_ASSIGN_OR_RETURN(std::shared_ptr<ProcessSet> removed, sets_.Remove(response.target_set));
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
