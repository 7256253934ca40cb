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

#include <string>
#include <vector>

#include "accord/status.h"
#include "agent_env.h"
#include "cli.h"
#include "system_info.h"

namespace accord::launcher {

struct HostPlacement {
  std::string name;
  int ranks = 0;
  bool local = false;  // this host (its cores are known)
};

struct LaunchPlan {
  std::vector<std::string> argv;   // the mpirun command; argv[0] is mpirun's full path
  std::vector<std::string> notes;  // one line each, printed before the job starts
  int np = 0;
  std::vector<HostPlacement> placement;
  bool remote = false;                          // some rank may run on another host
  std::vector<std::string> network_interfaces;  // --network-interfaces, for the agents' reports too
  // How each host's ranks are bound (binding.h), one line each, for
  // --dry-run: this host's as it will be; another host's as it would be if
  // it had this host's cores and GPUs (each host decides on its own).
  std::vector<std::string> binding;
};

// Plans the job, or returns an InvalidArgument error that says what is wrong
// (no mpirun, a program that cannot run, an environment every rank would
// reject at init, ...). The steps, each its own function in plan.cc:
//   1. check the input (mpirun, the program, --output-filename, the remote
//      options) and place the ranks on the hosts;
//   2. plan every rank's environment (tuning flags, -x, what other hosts
//      need from here) and refuse one the ranks' configuration would reject;
//   3. build mpirun's argv.
Result<LaunchPlan> PlanLaunch(const LaunchOptions& options, const SystemInfo& system);

// Looks a program up the way execvp does: a name with a '/' is used as it is,
// any other name is searched in PATH. Returns the path that would run.
Result<std::string> FindProgram(const std::string& name, const SystemInfo& system);

// Whether `name` (from -H or a hostfile) is this host.
bool IsLocalHost(const std::string& name, const std::string& hostname);

}  // namespace accord::launcher
