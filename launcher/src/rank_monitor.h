// RankMonitor: what the rank agents of one generation reported (report.h),
// and how that generation ended. It counts the ranks that started (for
// --start-timeout), remembers the first rank that failed on its own and the
// first whose agent was lost, and, once mpirun has ended, turns all that
// into accordrun's exit status and a one-line explanation.
//
// No sockets and no processes: the runner (runner.h) feeds it the agents'
// lines and mpirun's wait status. Not synchronised; the runner calls it
// from accordrun's main thread.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "report.h"

namespace accord::launcher {

class RankMonitor {
 public:
  // Where the monitor's messages go, one line each (accordrun's stderr).
  using Say = std::function<void(const std::string& line)>;

  // `token` is the one the agents of this generation must say hello with;
  // `program` names the rank's program in messages; `verbose` adds a line
  // for each rank that starts.
  RankMonitor(int np, std::string token, std::string program, bool verbose, Say say);

  // One line from the agent on a connection whose state is `peer` (updated
  // here); false when the connection must be dropped (a bad line, a wrong
  // token, an exit before the hello).
  struct Peer {
    int rank = -1;  // known after its hello
    std::string host;
    bool exited = false;  // its exit report arrived
  };
  bool OnLine(Peer& peer, const std::string& line);

  // A connection is gone. One that started a rank and never said how it
  // ended lost its agent (killed, say by SIGKILL or the out-of-memory
  // killer) or its connection.
  void OnClosed(const Peer& peer);

  // The time from which "all N ranks started in S s" counts: when mpirun
  // has started (the monitor's construction until then).
  void MarkStart() { start_ = Clock::now(); }

  bool AllStarted() const { return StartedCount() == np_; }
  // Every rank has started and ended (reported how, or was lost).
  bool AllEnded() const { return static_cast<int>(ended_.size()) == np_; }
  int StartedCount() const { return static_cast<int>(started_.size()); }
  // The ranks that have not started, "0, 3, 5" (at most ten, then "...").
  std::string MissingRanks() const;

  // The first rank that failed or was lost, as "rank R (on HOST)"; empty
  // while none has.
  std::string FirstFailed() const;

  // Every rank that failed on its own (its exit was not caused by mpirun
  // stopping the job) or whose agent was lost, in the order accordrun learned
  // of them. An elastic driver blames their hosts.
  struct Outcome {
    int rank = -1;
    std::string host;
    RankExit exit;      // how it ended; for a lost rank, nothing is known
    bool lost = false;  // its agent ended without reporting how
  };
  const std::vector<Outcome>& FailedOnTheirOwn() const { return failed_on_their_own_; }
  // The ranks that have not said hello.
  std::vector<int> MissingRankList() const;

  // The exit status of the generation, with its explanation said: 0 when
  // every rank exited with 0; else the status of the first rank that failed
  // (128 + N for a rank killed by signal N), or mpirun's own status
  // (`mpirun_wait` is its wait status) when no rank reported a failure; 1
  // when the ranks did not all start in time; 128 + `stop_signal` when
  // accordrun was told to stop by that signal (0: it was not).
  // `explain` false: no explanation is said (an elastic driver gives its own).
  int Conclude(int mpirun_wait, bool start_timed_out, int stop_signal, bool explain = true) const;

 private:
  using Clock = std::chrono::steady_clock;
  struct Failure {
    int rank = -1;
    std::string host;
    RankExit exit;
    int order = 0;  // failures and lost ranks in the order accordrun learned of them
  };

  void OnHello(Peer& peer, const ReportMessage& hello);
  // Conclude's explanation when mpirun failed and no rank failed first.
  std::string DescribeMpirunFailure(int mpirun_wait) const;

  const int np_;
  const std::string token_;
  const std::string program_;
  const bool verbose_;
  const Say say_;
  Clock::time_point start_ = Clock::now();
  std::set<int> started_;
  std::set<int> ended_;
  std::optional<Failure> first_failure_;
  std::optional<Failure> any_failure_;
  std::optional<Failure> first_lost_;
  std::vector<Outcome> failed_on_their_own_;
  int events_ = 0;
};

// "mpirun exited with status 1", "mpirun was killed by signal 9".
std::string DescribeMpirunEnd(int wait_status);

}  // namespace accord::launcher
