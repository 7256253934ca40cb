// Running a planned job: starts mpirun, listens for the rank agents'
// reports (report.h), enforces --start-timeout, forwards signals sent to
// accordrun, and turns the outcome into accordrun's exit status and a
// one-line explanation.
//
// The state is split in two, so that a driver can run one generation of
// ranks after another:
//   - a Job holds what lasts the whole run: the TCP port the agents report
//     to, and the signal handlers (SIGCHLD, SIGTERM, SIGINT, SIGHUP, SIGUSR1,
//     SIGUSR2, routed to a self-pipe: signal_pipe.h). Its destructor closes
//     the port and restores the handlers the process had before.
//   - each call of Job::RunGeneration starts one mpirun with a fresh token
//     for its agents, supervises it (its deadlines, its agents'
//     connections, what they reported: rank_monitor.h) until it has ended,
//     and explains how. Every way out of it collects mpirun and closes the
//     generation's connections.
// RunJob is the single-generation run that accordrun does today.
//
// Everything here runs on accordrun's main thread; signal handlers belong to
// the process, so at most one Job may exist at a time.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "accord/status.h"
#include "plan.h"
#include "rank_monitor.h"
#include "signal_pipe.h"
#include "unique_fd.h"

namespace accord::launcher {

struct RunSettings {
  double start_timeout_s = 30;
  bool verbose = false;
  std::string program;      // the rank's program, for messages
  bool explain_end = true;  // say how each generation ended (an elastic driver says it its own way)
};

// How one generation ended.
struct GenerationResult {
  int exit_status = 0;  // as RunJob's
  int stop_signal = 0;  // the signal that told accordrun to stop the job (SIGTERM, SIGINT, SIGHUP), or 0
  // Every rank that failed on its own or was lost (RankMonitor), and the
  // ranks that had not started when --start-timeout ended the generation.
  std::vector<RankMonitor::Outcome> failed_on_their_own;
  std::vector<int> not_started;
};

// What an elastic driver adds to a generation: the connections that the
// ranks' programs open to accordrun themselves (docs/elastic.md, "The
// driver's channel"), told apart from the agents' by their first line,
// "worker ...". Called on accordrun's main thread only.
class GenerationObserver {
 public:
  virtual ~GenerationObserver() = default;
  // A line from the program connected as `id`; false drops the connection.
  virtual bool OnWorkerLine(int id, const std::string& line) = 0;
  // The connection `id` is gone.
  virtual void OnWorkerClosed(int id) = 0;
  // Called at least once a second while mpirun runs. Lines put in
  // `broadcast` are sent to every program connected; a reason put in `stop`
  // ends the generation (mpirun is told to stop).
  virtual void OnTick(std::vector<std::string>* broadcast, std::string* stop) = 0;
};

class Job {
 public:
  // Opens the port for the agents' reports (on every interface when
  // `remote`, else on loopback) and installs the signal handlers; an error
  // (to print as it is) when either fails.
  static Result<std::unique_ptr<Job>> Open(bool remote, const std::vector<std::string>& network_interfaces,
                                           const RunSettings& settings);

  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;
  ~Job() = default;

  // Runs one generation of `plan`'s ranks, from starting mpirun to its end
  // and the last of its agents' reports, and says how it ended. May be
  // called again once it has returned, with another plan. `observer`, when
  // given, sees the programs' own connections.
  GenerationResult RunGeneration(const LaunchPlan& plan, GenerationObserver* observer = nullptr);

  // Between generations: waits up to `seconds` for a signal that tells
  // accordrun to stop (SIGTERM, SIGINT, SIGHUP) and returns it, or 0.
  int WaitForStopSignal(double seconds);

  // The port the agents (and programs) connect to, and the addresses by which
  // this host may be reached, in the order to try them.
  int port() const { return port_; }
  const std::vector<std::string>& addresses() const { return addresses_; }

 private:
  Job(const RunSettings& settings, UniqueFd listener, int port, std::vector<std::string> addresses,
      std::unique_ptr<SignalPipe> signals);

  const RunSettings settings_;
  UniqueFd listener_;                         // the agents connect here
  const int port_;                            // the listener's
  const std::vector<std::string> addresses_;  // by which the agents may reach this host
  std::unique_ptr<SignalPipe> signals_;
};

// Runs the job as one generation and returns accordrun's exit status: 0
// when every rank exited with 0; else the exit status of the first rank
// that failed (128 + N for a rank killed by signal N), or mpirun's own
// status when no rank reported a failure; 1 when the ranks did not all
// start in time or the job could not be set up; 127 when mpirun could not
// be run.
int RunJob(const LaunchPlan& plan, const RunSettings& settings);

// Addresses by which ranks on other hosts may reach this one: every IPv4
// address of an interface that is up, those `network_interfaces` select
// first, loopback last; only loopback when not `remote`.
std::vector<std::string> ReachableAddresses(bool remote, const std::vector<std::string>& network_interfaces);

// A TCP port that is free on this host now (bound on every interface, then
// released): MASTER_PORT for rank 0's host.
Result<int> FreeTcpPort();

// MASTER_PORT and MASTER_ADDR found on rank 0's host by `accordrun
// --free-port` (plan.h, TorchMaster::probe_argv): the last line of its
// output, "PORT [ADDRESS]".
struct PortProbe {
  int port = 0;
  std::string address;  // empty when it was not asked for
};
Result<PortProbe> ParsePortProbe(const std::string& output);

}  // namespace accord::launcher
