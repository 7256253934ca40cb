// FailureProtocol: how the job stops, whoever asks.
//
// A job stops when a user thread calls Shutdown, when the stall inspector
// of a process set gives up, or when this rank's coordinator meets a fatal
// error. This class keeps what each of those leaves behind: the request to
// stop, the reason sent with it, the reason the ranks agreed, this rank's
// first fatal error, and the status every later operation fails with.
//
// A fatal error of this rank's coordinator (a non-OK Status from a round or
// an execution: a broken invariant, a failed MPI call) must reach every
// rank, or the others would wait for this one forever:
//   1. The first such error is kept (Absorb) and becomes this rank's
//      request to stop, marked "failed", with "rank R's coordinator failed:
//      <error>" as the reason.
//   2. The coordinator goes on with the rounds the other ranks are about to
//      run: the rest of this iteration's process-set rounds, then the next
//      round of the global set. In each it asks to stop; nothing those rounds
//      agree is executed on any rank (RoundResult::failed), and every rank
//      stops after the global one with "accord stopped: rank R's coordinator
//      failed: <error>". This rank's own operations fail with its error.
//   3. These rounds wait for the others at most FailureWait in all (the
//      stall shutdown time, capped at 30 s, plus two cycle times), enforced
//      through deadline() (PollPolicy::deadline). A rank blocked inside a
//      data collective with this one never arrives; if the time passes, or
//      the rounds fail too, this rank logs why and ends the job with
//      MPI_Abort (Abandon): nothing else could end the others' wait.
//
// Threads: RequestStop, stop_requested, Report, running, stop_status and
// MarkStopped from any thread; everything else from the coordinator thread
// only.
#pragma once

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>

#include "accord/accord.h"
#include "accord/status.h"
#include "backends/mpi/mpi_world.h"
#include "config/config.h"
#include "negotiation/controller.h"

namespace accord {

// How long the rounds after a fatal error may wait for the other ranks in
// all (step 3): the stall shutdown time, at most 30 s (also when the stall
// inspector never stops the job), plus two cycle times of `cycle_time_ms`.
std::chrono::steady_clock::duration FailureWait(const Config& config, double cycle_time_ms);

class FailureProtocol {
 public:
  using Clock = std::chrono::steady_clock;

  // Any thread: asks every rank to stop in the next round of the global set.
  void RequestStop() { stop_requested_ = true; }
  bool stop_requested() const { return stop_requested_.load(); }

  // Any thread: a fatal error met outside the coordinator (the GPU path's
  // watchdog, on its poller thread); the first wins. The caller wakes the
  // coordinator, which takes it (TakeReported) and treats it as its own.
  void Report(const Status& status);
  Status TakeReported();

  // Step 1 for the first fatal error of rank `rank` (returns OK: go on with
  // the rounds, which then wait at most FailureWait(config, cycle_time_ms));
  // a later error means those rounds failed and is returned. OK passes through.
  Status Absorb(Status status, int rank, const Config& config, double cycle_time_ms);
  // Step 3: logs and ends the job.
  [[noreturn]] void Abandon(const Status& why, const MpiWorld& world) const;
  // Step 2: this rank's coordinator failed, so it asks to stop in every round.
  bool failed() const { return !failure_.ok(); }
  // Where the rounds after a fatal error give up (the end of time before one).
  const Clock::time_point* deadline() const { return &deadline_; }

  // The reason this rank sends with its request to stop; empty for Shutdown.
  const std::string& stop_reason() const { return stop_reason_; }
  // A round of process set `set` ended with its stall inspector stopping it
  // (`why`, its report): the whole job stops in the next round of the
  // global set, with that report as the reason unless one is already set.
  void StopForSet(ProcessSetId set, const std::string& why);
  // A round of the global set ended: remembers why the job stops, if it does.
  void GlobalRoundEnded(const RoundResult& result);
  // The job stopped because of an error (this rank's or another's): the
  // process must not wait for the others in MPI_Finalize.
  bool ended_by_error() const { return failed() || stopped_by_error_; }
  // What this rank's own operations fail with once the job stopped: its own
  // fatal error, if any, else the agreed reason.
  Status FinalStatus() const;

  // Any thread. False once the runtime stopped.
  bool running() const { return running_.load(); }
  void set_running() { running_ = true; }
  // Why the runtime stopped (OK while it runs).
  Status stop_status() const;
  // Marks the runtime stopped with `reason` (the first wins) and returns
  // the reason that won.
  Status MarkStopped(const Status& reason);

 private:
  std::atomic<bool> stop_requested_{false};
  Status failure_;                                         // coordinator: this rank's first fatal error, as reported
  Clock::time_point deadline_ = Clock::time_point::max();  // coordinator (read by the rounds' waits)
  std::string stop_reason_;                                // coordinator: why this rank asks to stop, if not Shutdown()
  bool stopped_by_error_ = false;                          // coordinator: the job stops because of an error
  std::string stop_message_;                               // coordinator: the agreed reason the job stops
  std::mutex reported_mutex_;
  Status reported_;                        // GUARDED_BY(reported_mutex_)
  std::atomic<bool> has_reported_{false};  // reported_ holds an error not yet taken
  std::atomic<bool> running_{false};
  mutable std::mutex stop_mutex_;
  Status stop_status_;  // GUARDED_BY(stop_mutex_)
};

}  // namespace accord
