// accordrun's elastic mode (docs/elastic.md): a driver that runs one mpirun
// job per generation of ranks, on the hosts a discovery script names.
//
// Each generation's ranks keep a connection of their own to accordrun (the
// driver's channel, below) besides their agents' reports. Through it they
// say where each commit lies on their host, and the driver tells them when
// the hosts change; at their next commit every rank raises
// HostsUpdatedInterrupt together and exits with kResetExitStatus. A rank
// that dies, is lost with its host, or goes silent ends the generation too:
// the others' collectives fail, they exit with kResetExitStatus, and mpirun
// ends the rest. The driver then blacklists the hosts to blame, waits (up to
// --elastic-timeout) for --min-np slots, and starts the next generation with
// rank 0 on a host that holds the newest commit, which it restores and
// broadcasts before the training function runs again.
//
// The driver's channel: one TCP connection per rank to accordrun's report
// port, text lines. From the rank:
//   worker <token> <rank> <host>       first; token from ACCORD_ELASTIC_DRIVER
//   beat <rank>                        every ACCORD_ELASTIC_HEARTBEAT_SECONDS
//   commit <rank> <n> <path>           commit n is in place at path on its host
//   ready <rank> <restore_s> <sync_s>  restored and synced; training starts
//   reset <rank> hosts                 exiting for HostsUpdatedInterrupt
//   reset <rank> failure <text>        exiting for HorovodInternalError
//   error <rank> <text>                the training function raised this
//   done <rank>                        the training function returned
// To the rank:
//   hosts <timestamp> <removed 0|1> <added 0|1>
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "accord/status.h"
#include "cli.h"
#include "runner.h"
#include "system_info.h"

namespace accord::launcher {

// The status with which a rank leaves a generation that must end for a reset.
inline constexpr int kResetExitStatus = 75;

// The variables each rank of a generation gets.
inline constexpr const char* kElasticDriverVariable = "ACCORD_ELASTIC_DRIVER";
inline constexpr const char* kElasticGenerationVariable = "ACCORD_ELASTIC_GENERATION";
inline constexpr const char* kElasticHostsVariable = "ACCORD_ELASTIC_HOSTS";
inline constexpr const char* kElasticSpillVariable = "ACCORD_ELASTIC_SPILL_DIR";
inline constexpr const char* kElasticRestoreVariable = "ACCORD_ELASTIC_RESTORE";
inline constexpr const char* kElasticHeartbeatVariable = "ACCORD_ELASTIC_HEARTBEAT_SECONDS";

struct WorkerLine {
  enum class Kind { kWorker, kBeat, kCommit, kReady, kReset, kError, kDone };
  Kind kind = Kind::kBeat;
  int rank = -1;
  std::string token;     // kWorker
  std::string host;      // kWorker
  long commit = -1;      // kCommit
  std::string path;      // kCommit
  double restore_s = 0;  // kReady
  double sync_s = 0;     // kReady
  bool hosts = false;    // kReset: for changed hosts (else for a failure)
  std::string text;      // kReset (failure), kError
};

// Decodes one line of the driver's channel (without its newline).
Result<WorkerLine> ParseWorkerLine(std::string_view line);

// The directory under which a job's spill goes when --elastic-spill-dir is
// not given: /dev/shm when it is a writable directory, else $TMPDIR, else /tmp.
std::string DefaultSpillRoot(const SystemInfo& system);

// Runs the job in elastic mode and returns accordrun's exit status: 0 when
// the training finished; else a line on stderr says why the driver gave up
// (the reset limit, too few slots for too long, a rank's program failing on
// its own, a signal) and the status is 1 or that of the failure.
int RunElasticJob(const LaunchOptions& options, const SystemInfo& system, const RunSettings& settings);

}  // namespace accord::launcher
