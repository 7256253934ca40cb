// CollectiveWatchdog: ends the job when the coordinator has been inside one
// blocking step longer than ACCORD_COLLECTIVE_TIMEOUT_SECONDS.
//
// The coordinator blocks in MPI in two places: a negotiation round (until
// every rank of the set takes part) and a collective on CPU tensors (until
// every rank has sent its share). A peer that died without its process
// ending, froze (SIGSTOP), or lost its network leaves this rank there for
// ever: TCP does not notice a silent peer for many minutes, and the
// coordinator cannot check anything while MPI holds it. The watchdog is a
// thread of its own that can. When a step outlives the timeout it logs what
// the step was (the tensors, the process set and its ranks, how long it has
// waited) and calls the timeout action, which ends the job (MPI_Abort with
// kCollectiveTimeoutExitCode): the launcher then reports the failure and
// stops every rank instead of hanging.
//
// The coordinator marks each step with a Scope: two uncontended mutex
// operations, no allocation. The description is built only on a timeout,
// while the coordinator is still blocked in the step (the mutex keeps the
// step's items alive until then).
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ops/collective_ops.h"

namespace accord {

struct ProcessSet;

// The exit status of a job ended by the watchdog (as timeout(1) uses).
inline constexpr int kCollectiveTimeoutExitCode = 124;

class CollectiveWatchdog {
 public:
  using Clock = std::chrono::steady_clock;
  // `timeout_seconds` <= 0: no thread, Scopes cost nothing but a branch.
  // `on_timeout` gets the message; it should end the process.
  CollectiveWatchdog(double timeout_seconds, std::function<void(const std::string&)> on_timeout);
  ~CollectiveWatchdog();
  CollectiveWatchdog(const CollectiveWatchdog&) = delete;
  CollectiveWatchdog& operator=(const CollectiveWatchdog&) = delete;

  // Marks one step for its lifetime. `items` (a collective's batch) or
  // nullptr (a negotiation round); both outlive the Scope.
  class Scope {
   public:
    // `started`: when the step began (a time the caller read anyway saves
    // reading the clock again).
    Scope(CollectiveWatchdog& dog, const ProcessSet& set, const std::vector<OpItem>* items,
          Clock::time_point started = Clock::now());
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    CollectiveWatchdog* dog_;
  };

  // What a step is, for the message: "allreduce of 2 tensors (a, b) on
  // process set 0 (ranks 0, 1, 2)".
  static std::string Describe(const ProcessSet& set, const std::vector<OpItem>* items);

 private:
  void Run();

  const Clock::duration timeout_;
  const std::function<void(const std::string&)> on_timeout_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  // The step in progress (GUARDED_BY(mutex_)); set == nullptr: none.
  const ProcessSet* set_ = nullptr;
  const std::vector<OpItem>* items_ = nullptr;
  Clock::time_point started_{};
  std::thread thread_;
};

}  // namespace accord
