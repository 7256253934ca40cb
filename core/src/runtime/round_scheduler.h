// RoundScheduler: when the coordinator runs its rounds, and in which order.
//
// Each iteration of the coordinator's loop:
//   1. WaitForRound (after Start, the first time): wait for work here or for the idle wait (a rank with
//      nothing new must still take part: the others may be waiting for it),
//      let a burst of enqueues finish (round_start.h), and keep the cycle
//      time if one is set.
//   2. RunRounds: one negotiation round per process set this rank belongs
//      to: the global set first, then the others by ascending id, the same
//      order on every rank, so rounds of different sets cannot deadlock.
//      The rounds after the global one are skipped when it stops the job.
//   3. EndIteration: note what the iteration did, for the next wait.
// Between them the runtime tells the scheduler what each round took and
// agreed (TakeRequests ... Agreed), which sets how long the next wait is and
// how the waits inside a round behave (poll_policy).
//
// Threads: the coordinator thread only, except poll_policy, which
// Runtime::Create also calls (before the coordinator starts) for the sets
// of Init. The functions of the policy it returns run on the coordinator
// thread, inside the waits of a round, and read this object's state.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <vector>

#include "backends/mpi/mpi_control_transport.h"
#include "config/config.h"
#include "negotiation/message.h"
#include "runtime/failure_protocol.h"
#include "runtime/process_set_registry.h"
#include "runtime/waiters.h"
#include "runtime/work_signal.h"

namespace accord {

class ThreadSlice;

class RoundScheduler {
 public:
  using Clock = std::chrono::steady_clock;

  // What the host offers this process.
  struct Machine {
    bool shared_core = false;     // the process may run on one core only
    bool oversubscribed = false;  // this host runs more ranks than it has cores
  };

  // `waiters` holds the coordinator's wake-up signal (waiters.h). Every
  // reference must outlive the scheduler.
  RoundScheduler(const Config& config, const ProcessSetRegistry& sets, const FailureProtocol& failures,
                 Waiters& waiters, Machine machine);

  // How a round's waits for the other ranks poll and sleep (PollPolicy).
  PollPolicy poll_policy();

  // When the loop begins: a new runtime has done nothing yet.
  void Start();
  // Around the idle sleep of step 1: called with true before it, false
  // after; returns false after the sleep when the loop has ended meanwhile
  // (a waiting thread drove it to its stop: fast_path.h).
  using Parking = std::function<bool(bool parked)>;
  void set_parking(Parking parking) { parking_ = std::move(parking); }
  // A waiting thread runs an iteration in place of the coordinator (steps 2
  // and 3, without step 1), starting now.
  void Driven(Clock::time_point now);
  // Step 1. `device_spin`
  // (Runtime::DeviceSpin) is how long to poll for new work before sleeping;
  // `cycle_time_ms` the cycle time in force. Returns when the iteration starts.
  Clock::time_point WaitForRound(std::chrono::microseconds device_spin, double cycle_time_ms);
  // Step 2. `round` runs one set's round; `stop` is non-null for the global
  // set's, and it sets *stop when the job stops. The first error is returned.
  using RoundFn = std::function<Status(ProcessSet& set, bool* stop)>;
  Status RunRounds(const RoundFn& round, bool* stop);
  // Step 3.
  void EndIteration();

  // Before the iteration's first step that may fail.
  void BeginIteration() { awaiting_others_ = false; }
  // A round of `set` begins: its new requests, taken after the enqueue
  // generation is noted (a later enqueue ends the round's sleeps).
  std::vector<Request> TakeRequests(ProcessSet& set);
  // The round is about to wait for the others; `announces_nothing`: it is
  // the global set's, does not ask to stop, announces nothing and leaves
  // nothing of this rank's unmatched before it. In a job with only the
  // global set, such a round holds nothing up and its waits sleep long.
  void RoundWaits(bool announces_nothing);
  // The round's waits are over.
  void RoundReturned() { round_holds_nothing_up_ = false; }
  // The time slice a round's waits shorten once they have to wait (null: a
  // thread driving the rounds keeps its own; Runtime::RunRound).
  void set_round_slice(ThreadSlice* slice) { round_slice_ = slice; }
  // A round of the global set ended at `now`; `any_progress` as agreed.
  void GlobalRoundEnded(bool any_progress, Clock::time_point now);
  // The round agreed `result`, which this rank executes.
  void Agreed(const RoundResult& result, const ProcessSet& set);
  // Something ran since the last global round.
  bool executed() const { return executed_; }

 private:
  const Config& config_;
  const ProcessSetRegistry& sets_;
  const FailureProtocol& failures_;
  Waiters& waiters_;
  WorkSignal& signal_;  // the coordinator's wake-up signal (waiters_.coordinator())
  const Machine machine_;

  bool executed_ = false;         // something ran since the last global round
  bool awaiting_others_ = false;  // announced tensors not yet matched everywhere
  ThreadSlice* round_slice_ = nullptr;
  // The round under way holds nothing up (RoundWaits).
  bool round_holds_nothing_up_ = false;
  // The enqueues (signal_'s generation) when the round under way took its
  // requests, and the last its waits have seen (poll_policy).
  uint64_t round_generation_ = 0;
  uint64_t poll_seen_ = 0;
  Clock::time_point last_progress_;  // last round any rank progressed

  // The loop's own (Start, WaitForRound, EndIteration).
  Parking parking_;
  uint64_t driven_ = 0;  // iterations run by waiting threads
  Clock::time_point last_round_;
  uint64_t seen_ = 0;           // signal_'s generation the last wait ended at
  uint64_t polls_seen_ = 0;     // waiters_' polls when the last round began
  bool just_executed_ = false;  // the last iteration ran a collective
  bool was_awaiting_ = false;
  Clock::time_point awaiting_since_;  // when this rank's oldest unmatched announcement was made
};

}  // namespace accord
