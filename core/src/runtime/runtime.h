// Runtime: everything accord holds between Init and Shutdown.
//
// Owns the MPI world, the process sets, the fusion buffer, the coordinator
// thread, and the GPU path (runtime/device_runtime.h) once a CUDA tensor
// needs it. User threads call Submit/FindSet/queries (thread-safe);
// the coordinator thread runs Loop(): wait for work or the idle timeout, run
// one negotiation round per process set this rank belongs to (the global set
// first, then the others by ascending id, the same order on every rank, so
// rounds of different sets cannot deadlock), and execute what was agreed.
// The coordinator is the only thread that calls MPI between Create and
// Shutdown.
//
// A fatal error of this rank's coordinator (a non-OK Status from a round or
// an execution: a broken invariant, a failed MPI call) must reach every
// rank, or the others would wait for this one forever:
//   1. The first such error is kept (failure_) and becomes this rank's
//      request to stop, marked "failed", with "rank R's coordinator failed:
//      <error>" as the reason.
//   2. The coordinator goes on with the rounds the other ranks are about to
//      run: the rest of this iteration's process-set rounds, then the next
//      round of the global set. In each it asks to stop; nothing those rounds
//      agree is executed on any rank (RoundResult::failed), and every rank
//      stops after the global one with "accord stopped: rank R's coordinator
//      failed: <error>". This rank's own operations fail with its error.
//   3. These rounds wait for the others at most the stall shutdown time,
//      capped at 30 s, plus two cycle times, in all (FailureWait in
//      coordinator.cc, enforced by PollPolicy::deadline). A rank blocked
//      inside a data collective with this one never arrives; if the time
//      passes, or the rounds fail too, this rank logs why and ends the job
//      with MPI_Abort (Abandon): nothing else could end the others' wait.
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "accord/accord.h"
#include "backends/mpi/mpi_environment.h"
#include "backends/mpi/mpi_world.h"
#include "config/config.h"
#include "fusion/fusion_buffer.h"
#include "ops/collective_ops.h"
#include "runtime/autotuner.h"
#include "runtime/collective_watchdog.h"
#include "runtime/device_runtime.h"
#include "runtime/process_set.h"
#include "runtime/waiters.h"
#include "runtime/work_signal.h"

namespace accord {

class ThreadSlice;

class Runtime {
 public:
  static Result<std::unique_ptr<Runtime>> Create(const InitOptions& options);
  ~Runtime();

  const MpiWorld& world() const { return *world_; }
  const Config& config() const { return config_; }
  // MPI's process-wide state (thread level); outlives every Runtime.
  const MpiEnvironment& mpi() const { return *mpi_; }

  // The set, if it exists and this rank is a member (kPreconditionFailed
  // otherwise, kInvalidArgument if there is no such set).
  Result<std::shared_ptr<ProcessSet>> FindMemberSet(ProcessSetId id) const;
  // The global set (every rank is a member; it lives as long as the runtime).
  const std::shared_ptr<ProcessSet>& global_set() const { return global_set_; }
  Result<std::shared_ptr<ProcessSet>> FindSet(ProcessSetId id) const;
  std::vector<ProcessSetId> SetIds() const;
  // Hands entries (already validated and named) to the set's queue.
  Result<Handle> Submit(ProcessSet& set, std::vector<TensorEntry> entries, std::shared_ptr<HandleState> state);
  Result<Handle> Submit(ProcessSet& set, TensorEntry&& entry, std::shared_ptr<HandleState> state);

  // The GPU path, made on first use (any thread); the error says why CUDA
  // tensors cannot be used (not built, no GPU, ...).
  Result<DeviceRuntime*> Devices();

  bool running() const { return running_.load(); }
  // Why the coordinator stopped (kShutDown, or the fatal error).
  Status stop_status() const;
  // Asks every rank to stop, waits for this rank's coordinator to finish.
  void Shutdown();

 private:
  Runtime() = default;
  // A set's communicators (collective over every rank), controller and queue.
  Result<std::shared_ptr<ProcessSet>> MakeSet(ProcessSetId id, std::vector<int> ranks);
  void Loop();
  // ACCORD_DEVICE_SPIN_US while GPU work is in flight or just done, else 0:
  // how long the coordinator polls for its next step before it sleeps.
  std::chrono::microseconds DeviceSpin() const;
  // True if the job has no process set but the global one. There a rank
  // that announced nothing the others have yet to match holds nothing up:
  // whatever another rank announced completes only once this rank submits
  // it too, and that enqueue wakes the coordinator; so it waits the longest
  // idle back-off at once rather than joining a round every
  // ACCORD_IDLE_TIMEOUT_US, and sleeps as long between the MPI tests of a
  // round it joins with nothing (round_holds_nothing_up_): each round takes
  // the cores of both ranks from their computation. With more sets a round
  // of one set may wait for it while another set has work, so there it
  // keeps the idle timeout.
  bool OnlyGlobalSet() const;
  // Bytes enqueued on this rank, in every set it belongs to, that no round
  // has announced yet.
  uint64_t NewBytes() const;
  Status RunIteration(bool* stop);
  // Step 1 above for the first fatal error (returns OK: go on with the
  // rounds); a later error means those rounds failed and is returned.
  Status AbsorbFailure(Status status);
  // Step 3 above: logs and ends the job.
  [[noreturn]] void Abandon(const Status& why);
  // The response cache of every set's controller (ACCORD_AUTOTUNE).
  void SetCacheEnabled(bool enabled);
  Status RunRound(ProcessSet& set, bool* stop);
  Status Execute(ProcessSet& set, const std::vector<Response>& ready);
  // One fused batch of a collective, on the CPU or a device. Fills
  // `*status` with an error every rank met alike (the batch fails, the job
  // goes on); returns a fatal error after failing the batch's handles.
  Status ExecuteCollective(ProcessSet& set, const OpContext& ctx, const std::vector<OpItem>& items,
                           std::vector<TensorQueue::Taken>* entries, Status* status, PhaseTimes* phases);
  // A batch of CUDA tensors (runtime/device_runtime.h Execute).
  Status ExecuteOnDevice(ProcessSet& set, const std::vector<OpItem>& items, std::vector<TensorQueue::Taken>* entries,
                         Status* agreed, PhaseTimes* phases);
  Status ApplyProcessSetChange(const Response& response, TensorEntry* entry);
  // The GPU path's fatal error (the watchdog's), reported from its poller
  // thread; taken once by the coordinator, which treats it as its own.
  void RecordDeviceFailure(const Status& status);
  Status TakeDeviceFailure();
  // Wakes the threads waiting on the handles this iteration completed. Done
  // once the iteration has freed its entries and responses: on a core shared
  // with a user thread, the woken thread takes the core at once, and work
  // left behind would delay the next round.
  void NotifyCompleted();
  // Fails every pending and future operation with `reason`; the first wins.
  void Stop(const Status& reason);
  PollPolicy poll_policy();

  Config config_;
  const MpiEnvironment* mpi_ = nullptr;
  std::unique_ptr<MpiWorld> world_;
  // Ends the job when a round or a CPU collective outlives
  // ACCORD_COLLECTIVE_TIMEOUT_SECONDS (set by Create; stopped before world_).
  std::unique_ptr<CollectiveWatchdog> watchdog_;
  mutable std::mutex sets_mutex_;
  std::map<ProcessSetId, std::shared_ptr<ProcessSet>> sets_;
  std::shared_ptr<ProcessSet> global_set_;  // also in sets_; set once by Create
  ProcessSetId next_set_id_ = 1;  // coordinator thread (and Create)
  WorkSignal& signal_ = Waiters::Get().coordinator();  // process-wide (waiters.h)
  FusionBuffer fusion_buffer_;    // coordinator thread
  bool executed_ = false;         // coordinator: something ran since the last global round
  std::optional<Autotuner> autotuner_;  // coordinator thread (set by Create): the setting in force
  std::vector<std::shared_ptr<HandleState>> completed_;  // coordinator: to notify (NotifyCompleted)
  bool shared_core_ = false;      // the process may run on one core only (set by Create)
  bool oversubscribed_ = false;   // this host runs more ranks than it has cores (set by Create)
  bool awaiting_others_ = false;  // coordinator: announced tensors not yet matched everywhere
  // Coordinator: the round under way announces nothing and leaves nothing of
  // this rank's unmatched before it, in a job with only the global set.
  bool round_holds_nothing_up_ = false;
  // Coordinator: the enqueues (signal_'s generation) when the round under way
  // took its requests, and the last its waits have seen (poll_policy).
  uint64_t round_generation_ = 0;
  uint64_t poll_seen_ = 0;
  // Coordinator, while Loop runs: its time slice (thread_slice.h).
  ThreadSlice* slice_ = nullptr;
  std::chrono::steady_clock::time_point last_progress_;  // coordinator: last round any rank progressed
  std::atomic<bool> shutdown_requested_{false};
  Status failure_;                // coordinator: this rank's first fatal error, as reported
  // Coordinator: when the rounds after a fatal error give up (PollPolicy::deadline).
  std::chrono::steady_clock::time_point failure_deadline_ = std::chrono::steady_clock::time_point::max();
  std::string stop_reason_;       // coordinator: why this rank asks to stop, if not Shutdown()
  bool stopped_by_error_ = false;  // coordinator: the job stops because of an error (RoundResult)
  std::string stop_message_;      // coordinator: the agreed reason the job stops
  std::atomic<bool> running_{false};
  mutable std::mutex stop_mutex_;
  Status stop_status_;
  std::thread thread_;
  std::mutex device_mutex_;
  std::unique_ptr<DeviceRuntime> device_;  // GUARDED_BY(device_mutex_) while being made; then read-only
  std::atomic<bool> device_made_{false};
  Status device_failure_;                  // GUARDED_BY(device_mutex_)
};

}  // namespace accord
