// Runtime: everything accord holds between Init and Shutdown.
//
// Owns the MPI world, the process sets (ProcessSetRegistry), the fusion
// buffer, the coordinator thread, how the job stops (FailureProtocol), and
// the GPU path (runtime/device_runtime.h) once a CUDA tensor needs it.
// User threads call Submit/FindSet/queries (thread-safe); the coordinator
// thread runs Loop(): the RoundScheduler says when to run a round and in
// which order the process sets take theirs (round_scheduler.h), and the
// runtime runs each round and executes what it agreed. A fatal error of the
// coordinator goes through the failure protocol (failure_protocol.h: the
// first error becomes every rank's request to stop). The coordinator is the
// only thread that calls MPI between Create and Shutdown, save a thread that
// waits for an operation while the coordinator is parked: it runs the
// coordinator's iterations itself, holding the coordinator's token, so one
// thread at a time does (fast_path.h). "Coordinator thread" below means the
// token's holder.
//
// The timeline and the metrics are handed in by the public API, which keeps
// them for the whole process (they outlive a runtime: GetMetrics reads the
// counters after Shutdown). The coordinator's wake-up signal belongs to the
// process-wide Waiters (waiters.h): user threads waiting on a handle, which
// may outlive the runtime, notify it.
#pragma once

#include <atomic>
#include <chrono>
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
#include "metrics/metrics.h"
#include "ops/collective_ops.h"
#include "runtime/autotuner.h"
#include "runtime/collective_watchdog.h"
#include "runtime/device_runtime.h"
#include "runtime/failure_protocol.h"
#include "runtime/fast_path.h"
#include "runtime/process_set.h"
#include "runtime/process_set_registry.h"
#include "runtime/round_scheduler.h"
#include "runtime/waiters.h"
#include "runtime/work_signal.h"
#include "timeline/timeline.h"

namespace accord {

class ThreadSlice;

class Runtime : private Driver {
 public:
  // `timeline` and `metrics` must outlive the runtime.
  static Result<std::unique_ptr<Runtime>> Create(const InitOptions& options, Timeline* timeline,
                                                 MetricsRecorder* metrics);
  ~Runtime();

  const MpiWorld& world() const { return *world_; }
  const Config& config() const { return config_; }
  // MPI's process-wide state (thread level); outlives every Runtime.
  const MpiEnvironment& mpi() const { return *mpi_; }

  // The set, if it exists and this rank is a member (kPreconditionFailed
  // otherwise, kInvalidArgument if there is no such set).
  Result<std::shared_ptr<ProcessSet>> FindMemberSet(ProcessSetId id) const;
  // The global set (every rank is a member; it lives as long as the runtime).
  const std::shared_ptr<ProcessSet>& global_set() const { return sets_.global(); }
  Result<std::shared_ptr<ProcessSet>> FindSet(ProcessSetId id) const { return sets_.Find(id); }
  std::vector<ProcessSetId> SetIds() const { return sets_.Ids(); }
  // Hands entries (already validated and named) to the set's queue.
  Result<Handle> Submit(ProcessSet& set, std::vector<TensorEntry> entries, std::shared_ptr<HandleState> state);
  Result<Handle> Submit(ProcessSet& set, TensorEntry&& entry, std::shared_ptr<HandleState> state);

  // The GPU path, made on first use (any thread); the error says why CUDA
  // tensors cannot be used (not built, no GPU, ...).
  Result<DeviceRuntime*> Devices();

  bool running() const { return failures_.running(); }
  // Why the coordinator stopped (kShutDown, or the fatal error).
  Status stop_status() const { return failures_.stop_status(); }
  // Asks every rank to stop, waits for this rank's coordinator to finish.
  void Shutdown();

 private:
  Runtime() = default;
  // Whether an enqueue for `state` wakes the coordinator (fast_path.h).
  bool WakeFor(const HandleState* state) const;
  // Checks that every rank was started with the same settings (collective).
  Status CheckSameEverywhere(const InitOptions& options) const;
  // A set's communicators (collective over every rank), controller and queue.
  Result<std::shared_ptr<ProcessSet>> MakeSet(ProcessSetId id, std::vector<int> ranks);
  // Decides how lone allreduces larger than the window run, for every set
  // (ACCORD_LONE_ALLREDUCE; auto: a probe on `global`, collective).
  Status ChooseLoneAllreduce(const ProcessSet& global);

  // The coordinator thread (coordinator.cc).
  void Loop();
  // One iteration of the loop after its wait (steps 2 and 3 of
  // round_scheduler.h), by whichever thread holds the token. Sets
  // loop_ended_ when the job stops.
  void Iterate(std::chrono::steady_clock::time_point started);
  // Driver (fast_path.h): a waiting thread runs iterations while the
  // coordinator is parked.
  bool Drive(const HandleState& awaited, std::chrono::microseconds budget) override;
  // ACCORD_DEVICE_SPIN_US while GPU work is in flight or just done, else 0:
  // how long the coordinator polls for its next step before it sleeps.
  std::chrono::microseconds DeviceSpin() const;
  Status RunIteration(bool* stop);
  // The failure protocol's step 1 for this rank (FailureProtocol::Absorb).
  Status Absorb(Status status);
  // The response cache of every set's controller (ACCORD_AUTOTUNE).
  void SetCacheEnabled(bool enabled);
  Status RunRound(ProcessSet& set, bool* stop);
  // What the round agreed that every rank acts on at once: a process set
  // stopping the job, a new autotuned setting, the global round's outcome
  // (`ended`: when the round returned).
  void AfterRound(ProcessSet& set, const RoundResult& result, bool* stop, std::chrono::steady_clock::time_point ended);
  Status Execute(ProcessSet& set, const std::vector<Response>& ready);
  // An allreduce whose every input came with its round (RoundResult::carried):
  // reduced here in rank order, no collective.
  // `start`: when the round that carried it returned.
  Status ExecuteCarried(ProcessSet& set, const Response& response, const std::vector<std::string>& carried,
                        std::chrono::steady_clock::time_point start);
  // One fused batch of a collective, on the CPU or a device. Fills
  // `*status` with an error every rank met alike (the batch fails, the job
  // goes on); returns a fatal error after failing the batch's handles.
  Status ExecuteCollective(ProcessSet& set, const OpContext& ctx, const std::vector<OpItem>& items,
                           std::vector<TensorQueue::Taken>* entries, Status* status, PhaseTimes* phases);
  // A batch of CUDA tensors (runtime/device_runtime.h Execute).
  Status ExecuteOnDevice(ProcessSet& set, const std::vector<OpItem>& items, std::vector<TensorQueue::Taken>* entries,
                         Status* agreed, PhaseTimes* phases);
  Status ApplyProcessSetChange(const Response& response, TensorEntry* entry);
  // Hands the finished entries' handles to NotifyCompleted.
  void Finish(std::vector<TensorQueue::Taken>* entries, OpType type, const Status& status);
  void Finish(TensorQueue::Taken* taken, OpType type, const Status& status);
  // Wakes the threads waiting on the handles this iteration completed. Done
  // once the iteration has freed its entries and responses: on a core shared
  // with a user thread, the woken thread takes the core at once, and work
  // left behind would delay the next round.
  void NotifyCompleted();
  // Fails every pending and future operation with `reason`; the first wins.
  void Stop(const Status& reason);

  Config config_;
  const MpiEnvironment* mpi_ = nullptr;
  std::unique_ptr<MpiWorld> world_;
  Timeline* timeline_ = nullptr;        // set by Create
  MetricsRecorder* metrics_ = nullptr;  // set by Create
  // Ends the job when a round or a CPU collective outlives
  // ACCORD_COLLECTIVE_TIMEOUT_SECONDS (set by Create; stopped before world_).
  std::unique_ptr<CollectiveWatchdog> watchdog_;
  ProcessSetRegistry sets_;
  FailureProtocol failures_;
  Waiters& waiters_ = Waiters::Get();                    // process-wide (waiters.h)
  WorkSignal& signal_ = waiters_.coordinator();          // wakes the coordinator
  std::optional<RoundScheduler> scheduler_;              // set by Create
  FusionBuffer fusion_buffer_;                           // coordinator thread
  bool lone_in_place_ = false;                           // set by Create (ChooseLoneAllreduce), for every set
  std::optional<Autotuner> autotuner_;                   // coordinator thread (set by Create): the setting in force
  std::vector<std::shared_ptr<HandleState>> completed_;  // coordinator: to notify (NotifyCompleted)
  // Coordinator, while Loop runs and it holds the token: its time slice
  // (thread_slice.h).
  ThreadSlice* slice_ = nullptr;
  // The token's holder (fast_path.h): the loop has run its stop.
  bool loop_ended_ = false;
  std::thread thread_;
  std::mutex device_mutex_;
  std::unique_ptr<DeviceRuntime> device_;  // GUARDED_BY(device_mutex_) while being made; then read-only
  std::atomic<bool> device_made_{false};
};

}  // namespace accord
