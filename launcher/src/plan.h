// Planning a launch: from the parsed command line and facts about this
// machine to the exact mpirun command, with no process started.
//
// The plan decides, in one place: the hosts and how many ranks each gets; the
// variables every rank receives (tuning flags, -x, and by name what ranks on
// other hosts need from here); Open MPI's settings for root,
// oversubscription, binding (done per host by the agents, with
// OMP_NUM_THREADS: binding.h) and reaching other hosts (remote.h); and the rank agent
// (accordrun --rank-agent) that wraps each rank's program so that accordrun
// learns which rank started, on which host, and which failed first and how.
//
// PlanLaunch is pure: everything it needs to know about the machine comes in
// SystemInfo, which system_info.h gathers for real and tests make up. Any
// thread may call it.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "accord/status.h"
#include "cli.h"
#include "topology.h"

namespace accord::launcher {

enum class FileKind { kMissing, kDirectory, kExecutable, kNotExecutable };

// What accordrun knows about the machine it runs on.
struct SystemInfo {
  bool is_root = false;
  std::string hostname;                    // this host's name
  HostTopology topology;                   // the cores this process may run on, and the GPUs
  std::string self_exe;                    // accordrun's absolute path (it is also the rank agent)
  std::map<std::string, std::string> env;  // accordrun's environment
  std::function<FileKind(const std::string& path)> file_kind;
};

struct HostPlacement {
  std::string name;
  int ranks = 0;
  bool local = false;  // this host (its cores are known)
};

struct LaunchPlan {
  std::vector<std::string> argv;       // the mpirun command; argv[0] is mpirun's full path
  std::vector<std::string> notes;      // one line each, printed before the job starts
  int np = 0;
  std::vector<HostPlacement> placement;
  bool remote = false;                 // some rank may run on another host
  std::vector<std::string> network_interfaces;  // --network-interfaces, for the agents' reports too
  // How each host's ranks are bound (binding.h), one line each, for
  // --dry-run: this host's as it will be; another host's as it would be if
  // it had this host's cores and GPUs (each host decides on its own).
  std::vector<std::string> binding;
};

// The variable through which each rank's agent finds accordrun (set in
// mpirun's environment by the runner, forwarded with -x to other hosts).
inline constexpr const char* kReportVariable = "ACCORDRUN_REPORT";
// Set for every rank: "share" when each agent is to bind its rank to its
// share of its host's cores, "user" when the user's mpirun arguments bind
// (the agent then only chooses OMP_NUM_THREADS); binding.h.
inline constexpr const char* kBindVariable = "ACCORDRUN_BIND";
// Set to 1 for every rank by --report-bindings: each agent says how its rank
// is bound before the program starts.
inline constexpr const char* kReportBindingsVariable = "ACCORDRUN_REPORT_BINDINGS";
// The Python interpreter that --check-build asks about numpy and torch.
inline constexpr const char* kPythonVariable = "ACCORDRUN_PYTHON";

// Plans the job, or returns an InvalidArgument error that says what is wrong
// (no mpirun, a program that cannot run, an environment every rank would
// reject at init, ...).
Result<LaunchPlan> PlanLaunch(const LaunchOptions& options, const SystemInfo& system);

// Looks a program up the way execvp does: a name with a '/' is used as it is,
// any other name is searched in PATH. Returns the path that would run.
Result<std::string> FindProgram(const std::string& name, const SystemInfo& system);

// Whether `name` (from -H or a hostfile) is this host.
bool IsLocalHost(const std::string& name, const std::string& hostname);

}  // namespace accord::launcher
