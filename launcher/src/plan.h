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

// torchrun's variables for torch.distributed's env:// (docs/launcher.md),
// which accordrun gives every rank unless the user set them: the agents set
// the per-rank ones (TorchRankVariables), the runner the job-wide
// MASTER_ADDR and MASTER_PORT in mpirun's environment just before each
// generation starts (runner.h), forwarded by name to other hosts.
inline constexpr const char* kTorchVariables[] = {"RANK",       "WORLD_SIZE",  "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                                                  "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT"};

// What the runner does for MASTER_ADDR and MASTER_PORT.
struct TorchMaster {
  bool set_addr = false;  // accordrun sets MASTER_ADDR (the user did not, and rank 0's host is known)
  bool set_port = false;  // accordrun sets MASTER_PORT: a free port of rank 0's host, chosen at launch
  // MASTER_ADDR when known from the plan; empty: the address of rank 0's
  // host that --network-interfaces prefers, found at launch.
  std::string addr;
  std::string host;  // rank 0's host
  // Runs `accordrun --free-port` on rank 0's host through mpirun, as the
  // job's ranks are started there; empty when that host is this one.
  std::vector<std::string> probe_argv;
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
  TorchMaster torch;
  // torchrun's variables as each rank will see them, for --dry-run: the
  // job-wide ones, then one line per host.
  std::vector<std::string> torch_lines;
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

// The per-rank variables of kTorchVariables that the rank agent sets, from
// Open MPI's variables and kHostRanksVariable as `get_env` reads them:
// RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, and GROUP_RANK (its host's
// index: 0 when every rank shares one host; else only when the ranks fill
// the hosts in order, as accordrun places them). A variable already set
// (by the user) is left out.
std::vector<EnvVar> TorchRankVariables(const GetEnvFn& get_env);

// Whether `name` (from -H or a hostfile) is this host.
bool IsLocalHost(const std::string& name, const std::string& hostname);

}  // namespace accord::launcher
