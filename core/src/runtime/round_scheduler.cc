#include "runtime/round_scheduler.h"

#include <sched.h>

#include <algorithm>
#include <thread>

#include "runtime/fast_path.h"
#include "runtime/round_start.h"
#include "runtime/thread_slice.h"

namespace accord {

RoundScheduler::RoundScheduler(const Config& config, const ProcessSetRegistry& sets, const FailureProtocol& failures,
                               Waiters& waiters, Machine machine)
    : config_(config),
      sets_(sets),
      failures_(failures),
      waiters_(waiters),
      signal_(waiters.coordinator()),
      machine_(machine) {}

PollPolicy RoundScheduler::poll_policy() {
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
  if (!machine_.oversubscribed) policy.waited_spin = std::chrono::microseconds(config_.poll_waited_spin_us);
  policy.waited_on = [&waiters = waiters_] { return waiters.count() > 0; };
  policy.owner_waits = [] { return FastPath::ThisThreadDrives(); };
  // The coordinator's short time slice (thread_slice.h), only once a round
  // has to wait: the two system calls cost more than a round whose peers
  // are already there (W1 took 13 µs longer with them around every round).
  policy.on_wait = [this] {
    if (round_slice_ != nullptr) round_slice_->UseShort();
  };
  // On one core, once a wait has lasted 1 ms with no thread waiting, the
  // others are late and the training thread owns the core: sleep the
  // longest back-off at once (an enqueue or a thread starting to wait ends
  // it early).
  // So does a rank in a round in which it holds nothing up (RoundWaits):
  // nothing the round can agree waits for it.
  // Until it enqueues: its new tensors wait for the next round, which waits
  // for this one, and the thread that then starts to wait does not wake the
  // coordinator (on more than one core). A long sleep begun between the
  // enqueue and that wait cost the step the whole back-off (10 ms): after 3
  // of 60 enqueues in a 2x1 probe at 10 Gbit/s (docs/benchmarks.md).
  policy.unwaited_sleep = std::chrono::microseconds(config_.idle_backoff_max_us);
  if (!machine_.shared_core) {
    policy.unwaited_if = [this] { return round_holds_nothing_up_ && signal_.generation() == round_generation_; };
  }
  policy.deadline = failures_.deadline();
  return policy;
}

void RoundScheduler::Start() {
  last_round_ = Clock::now();
  // A new runtime has done nothing yet: start quiet. A rank with new work
  // starts a round at once regardless.
  last_progress_ = last_round_ - 8 * std::chrono::microseconds(config_.idle_backoff_max_us);
  seen_ = signal_.generation();
  polls_seen_ = waiters_.polls();
  just_executed_ = false;
  was_awaiting_ = false;
}

// A round starts as soon as there is new work here, or after the idle wait
// (the other ranks may be waiting for this one to take part). While the job
// makes progress, a rank that announced tensors the others have not yet
// matched goes straight on: the others are about to start the round that
// matches them (how long they have been late counts from the round in which
// this rank announced, not from the last progress before it: a rank whose
// gradient came first after a quiet forward pass would otherwise sleep a
// long back-off while the others, a moment behind, wait for it). So does
// such a rank right after it ran a collective: the others have had that long
// to catch up, and one that did is already waiting in the next round (a
// collective of tens of milliseconds on a network counts as no progress of
// the rounds, and an idle wait here cost every such step up to the back-off
// cap). When a rank is late for longer, it waits like an idle rank, so
// waiting for it costs few wake-ups.
//
// On one core, while no thread of this process waits for a result, the
// training thread owns the core: the idle wait is the longest back-off at
// once (an enqueue, or a thread starting to wait, ends it early). So it is
// for a rank that holds nothing up: one that announced nothing the others
// have yet to match, in a job with only the global set (RoundWaits).
RoundScheduler::Clock::time_point RoundScheduler::WaitForRound(std::chrono::microseconds device_spin,
                                                               double cycle_time_ms) {
  while (true) {
    const auto now = Clock::now();
    const auto quiet = awaiting_others_ ? std::min(now - last_progress_, now - awaiting_since_) : now - last_progress_;
    const bool keep_going =
        awaiting_others_ && (just_executed_ || quiet < 2 * std::chrono::microseconds(config_.idle_timeout_us));
    auto idle = IdleWait(config_, quiet);
    if ((machine_.shared_core && waiters_.count() == 0) || (!awaiting_others_ && sets_.OnlyGlobal())) {
      idle = std::max(idle, std::chrono::microseconds(config_.idle_backoff_max_us));
    }
    if (failures_.stop_requested() || keep_going) break;
    // GPU work comes in quick succession: poll for the next before
    // sleeping (a wake-up from another core costs about as much again).
    const auto spin_until = Clock::now() + device_spin;
    while (signal_.generation() == seen_ && Clock::now() < spin_until) sched_yield();
    // While parked, a waiting thread may run iterations (Driven) and update
    // what this wait reads: read it before, and again after.
    const uint64_t seen = seen_;
    const uint64_t driven = driven_;
    if (parking_) parking_(true);
    signal_.WaitFor(seen, idle);
    if (parking_ && !parking_(false)) return Clock::now();
    // A waiting thread took this rank's part in the rounds meanwhile and
    // left nothing new: the idle wait starts again from its last round.
    if (driven_ == driven || signal_.generation() != seen_) break;
  }
  const uint64_t now_seen = signal_.generation();
  seen_ = now_seen == seen_ ? seen_
                            : LetBurstFinish(waiters_, signal_, now_seen, machine_.shared_core, polls_seen_,
                                             device_spin, [this] { return sets_.NewBytes(); });
  polls_seen_ = waiters_.polls();
  // The cycle time may change under ACCORD_AUTOTUNE.
  const auto cycle =
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double, std::milli>(cycle_time_ms));
  if (cycle.count() > 0) std::this_thread::sleep_until(last_round_ + cycle);
  last_round_ = Clock::now();
  return last_round_;
}

void RoundScheduler::Driven(Clock::time_point now) {
  ++driven_;
  seen_ = signal_.generation();
  polls_seen_ = waiters_.polls();
  last_round_ = now;
}

Status RoundScheduler::RunRounds(const RoundFn& round, bool* stop) {
  ACCORD_RETURN_IF_ERROR(round(*sets_.global(), stop));
  if (*stop) return Status::OK();
  for (auto& set : sets_.MemberSetsAfterGlobal()) ACCORD_RETURN_IF_ERROR(round(*set, nullptr));
  return Status::OK();
}

void RoundScheduler::EndIteration() {
  just_executed_ = executed_;
  if (awaiting_others_ && !was_awaiting_) awaiting_since_ = last_round_;
  was_awaiting_ = awaiting_others_;
}

std::vector<Request> RoundScheduler::TakeRequests(ProcessSet& set) {
  round_generation_ = signal_.generation();
  poll_seen_ = round_generation_;
  return set.queue->TakeNewRequests();
}

void RoundScheduler::RoundWaits(bool announces_nothing) {
  round_holds_nothing_up_ = announces_nothing && sets_.OnlyGlobal();
}

void RoundScheduler::GlobalRoundEnded(bool any_progress, Clock::time_point now) {
  executed_ = false;
  if (any_progress) last_progress_ = now;
}

void RoundScheduler::Agreed(const RoundResult& result, const ProcessSet& set) {
  if (!result.ready.empty()) executed_ = true;
  if (set.controller->num_pending() > 0) awaiting_others_ = true;
}

}  // namespace accord
