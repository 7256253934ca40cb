#include "plan.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstring>
#include <optional>
#include <set>

#include "binding.h"
#include "config/config.h"

namespace accord::launcher {
namespace {

// Variables forwarded by name to ranks on other hosts (ranks on this host
// inherit accordrun's whole environment anyway), besides every ACCORD_* and
// HOROVOD_* variable that is set.
const char* const kForwardedToRemoteHosts[] = {"PATH", "LD_LIBRARY_PATH", "PYTHONPATH", "VIRTUAL_ENV",
                                               "OMP_NUM_THREADS"};

std::string Lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

std::string OptionName(const std::string& token) { return token.substr(0, token.find('=')); }

// The value of the option at args[i]: after '=' or the next word.
std::string OptionValue(const std::vector<std::string>& args, size_t i) {
  size_t eq = args[i].find('=');
  if (eq != std::string::npos) return args[i].substr(eq + 1);
  return i + 1 < args.size() ? args[i + 1] : "";
}

bool IsAny(const std::string& name, std::initializer_list<const char*> names) {
  for (const char* candidate : names) {
    if (name == candidate) return true;
  }
  return false;
}

// Whether the user's mpirun arguments (or Open MPI's environment) already
// choose how ranks are bound to cores.
bool UserChoosesBinding(const std::vector<std::string>& args, const std::map<std::string, std::string>& env) {
  if (env.count("OMPI_MCA_hwloc_base_binding_policy") != 0) return true;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string name = OptionName(args[i]);
    if (IsAny(name,
              {"--bind-to", "-bind-to", "--bind-to-core", "-bind-to-core", "--bind-to-socket", "-bind-to-socket",
               "--bind-to-none", "-bind-to-none", "--cpu-set", "-cpu-set", "--cpu-list", "-cpu-list", "--rankfile",
               "-rankfile", "-rf", "--cpus-per-proc", "-cpus-per-proc", "--cpus-per-rank", "-cpus-per-rank"})) {
      return true;
    }
    if (IsAny(name, {"--map-by", "-map-by"}) && Lower(OptionValue(args, i)).find("pe=") != std::string::npos) {
      return true;
    }
  }
  return SetsMcaParameter(args, "hwloc_base_binding_policy");
}

bool UserGives(const std::vector<std::string>& args, std::initializer_list<const char*> names) {
  for (const std::string& arg : args) {
    if (IsAny(OptionName(arg), names)) return true;
  }
  return false;
}

bool UserOversubscribes(const std::vector<std::string>& args) {
  if (UserGives(args, {"--oversubscribe", "-oversubscribe"})) return true;
  for (size_t i = 0; i < args.size(); ++i) {
    if (IsAny(OptionName(args[i]), {"--map-by", "-map-by"}) &&
        Lower(OptionValue(args, i)).find("oversubscribe") != std::string::npos) {
      return true;
    }
  }
  return false;
}

std::optional<std::string> Lookup(const std::map<std::string, std::string>& env, const std::string& name) {
  auto it = env.find(name);
  if (it == env.end()) return std::nullopt;
  return it->second;
}

// Whether mpirun may find hosts that -H/--hostfile do not name: hosts given to
// it in --mpi-args, a default hostfile, or a batch system's allocation.
bool HostsFromElsewhere(const std::vector<std::string>& mpi_args, const std::map<std::string, std::string>& env) {
  if (UserGives(mpi_args, {"-H", "--host", "-host", "--hostfile", "-hostfile", "--machinefile", "-machinefile",
                           "--default-hostfile", "-default-hostfile"}) ||
      SetsMcaParameter(mpi_args, "orte_default_hostfile")) {
    return true;
  }
  for (const char* variable : {"OMPI_MCA_orte_default_hostfile", "SLURM_JOB_ID", "PBS_JOBID", "LSB_JOBID"}) {
    if (env.count(variable) != 0) return true;
  }
  return false;
}

// --ssh-identity-file must name a file here (a leading ~/ is the home
// directory, as ssh reads it); --rsh-agent a program that can run. Then the
// mpirun arguments of the remote options (remote.h).
Result<std::vector<std::string>> PlanRemote(const LaunchOptions& options, const SystemInfo& system) {
  RemoteOptions remote = options.remote;
  const std::string key = remote.ssh_identity_file;
  if (!key.empty()) {
    std::string home = Lookup(system.env, "HOME").value_or("");
    if ((key == "~" || key.rfind("~/", 0) == 0) && !home.empty()) remote.ssh_identity_file = home + key.substr(1);
    ACCORD_RETURN_IF_ERROR(CheckRshWord("--ssh-identity-file", remote.ssh_identity_file));
    switch (system.file_kind(remote.ssh_identity_file)) {
      case FileKind::kMissing: return Status::InvalidArgument("--ssh-identity-file " + key + ": no such file");
      case FileKind::kDirectory:
        return Status::InvalidArgument("--ssh-identity-file " + key + " is a directory, not a key file");
      default: break;
    }
  }
  if (!remote.rsh_agent.empty()) {
    Result<std::string> agent = FindProgram(remote.rsh_agent, system);
    if (!agent.ok())
      return Status::InvalidArgument("--rsh-agent " + remote.rsh_agent + ": " + agent.status().message());
  }
  return RemoteMpirunArgs(remote, options.mpi_args, system.env);
}

// Ranks go to the hosts in order, each filled to its slots (mpirun's default
// mapping).
std::vector<HostPlacement> Place(const LaunchOptions& options, int np, const std::string& hostname) {
  std::vector<HostPlacement> placement;
  if (options.hosts.empty()) {
    placement.push_back({hostname, np, true});
    return placement;
  }
  int left = np;
  for (const HostSlots& host : options.hosts) {
    if (left == 0) break;
    int ranks = std::min(left, host.slots);
    placement.push_back({host.name, ranks, IsLocalHost(host.name, hostname)});
    left -= ranks;
  }
  return placement;
}

// The binding notes and --dry-run's lines (binding.h): this host's plan as
// it will be, other hosts' as if they had this host's cores and GPUs.
void PlanBindingNotes(LaunchPlan& plan, const SystemInfo& system, bool agents_bind,
                      const std::vector<EnvVar>& set_vars) {
  std::optional<std::string> threads = Lookup(system.env, "OMP_NUM_THREADS");
  for (const EnvVar& var : set_vars) {
    if (var.name == "OMP_NUM_THREADS") threads = var.value;
  }
  const HostTopology& topology = system.topology;
  for (const HostPlacement& host : plan.placement) {
    HostBinding binding = PlanHostBinding(topology, host.ranks);
    std::string summary = SummarizeHostBinding(topology, binding, host.name);
    if (!agents_bind) {
      plan.binding.push_back(host.name + ": bound as --mpi-args or Open MPI's environment say; OMP_NUM_THREADS " +
                             (threads ? "= " + *threads + ", as set" : "= the rank's cores, at most an equal share"));
      continue;
    }
    std::string omp =
        threads ? "OMP_NUM_THREADS=" + *threads + " (as set)" : "OMP_NUM_THREADS=" + std::to_string(binding.threads);
    plan.binding.push_back(summary + ", " + omp + (host.local ? "" : " (if " + host.name + " is like this host)"));
    for (int i = 0; i < host.ranks; ++i) {
      plan.binding.push_back(host.name + " " + DescribeRankShare(topology, binding, i, omp));
    }
    // A crowded host's local rank 0 says itself that its ranks are not bound.
    if (host.local && binding.bound) {
      plan.notes.push_back("binding: " + summary + ", " + omp +
                           (threads ? "" : "; set OMP_NUM_THREADS to choose another value"));
    }
  }
  if (agents_bind && plan.remote) {
    plan.notes.push_back("binding: every other host binds its ranks the same way on its own cores");
  }
}

// ---- Step 1: what must hold before anything is planned.

// What checking the input found out, for the later steps.
struct CheckedInput {
  std::string mpirun;                    // its full path
  std::vector<std::string> remote_args;  // mpirun's arguments for reaching other hosts (remote.h)
};

// mpirun and the program must be found, --output-filename must not name a
// file, and the remote options must be usable.
Result<CheckedInput> CheckInput(const LaunchOptions& options, const SystemInfo& system) {
  CheckedInput input;
  Result<std::string> mpirun = FindProgram("mpirun", system);
  if (!mpirun.ok()) {
    return Status::InvalidArgument(
        "mpirun is not in PATH: accordrun runs jobs with Open MPI's mpirun (Debian: apt-get install "
        "openmpi-bin)");
  }
  input.mpirun = *mpirun;
  if (options.command.empty()) return Status::InvalidArgument("no program to run");
  ACCORD_RETURN_IF_ERROR(FindProgram(options.command.front(), system).status());
  if (!options.output_dir.empty()) {
    FileKind kind = system.file_kind(options.output_dir);
    if (kind == FileKind::kExecutable || kind == FileKind::kNotExecutable) {
      return Status::InvalidArgument("--output-filename " + options.output_dir + " is a file, not a directory");
    }
  }
  ACCORD_ASSIGN_OR_RETURN(input.remote_args, PlanRemote(options, system));
  return input;
}

// Fills the plan's rank count, placement and whether any rank may run on
// another host; notes remote options that cannot matter.
void PlaceRanks(const LaunchOptions& options, const SystemInfo& system, LaunchPlan& plan) {
  plan.network_interfaces = options.remote.network_interfaces;
  plan.np = options.np.value_or(TotalSlots(options.hosts));
  plan.placement = Place(options, plan.np, system.hostname);
  for (const HostPlacement& host : plan.placement) {
    if (!host.local) plan.remote = true;
  }
  if (HostsFromElsewhere(options.mpi_args, system.env)) plan.remote = true;
  const RemoteOptions& remote = options.remote;
  if (!plan.remote && (remote.ssh_port || !remote.ssh_identity_file.empty() || !remote.rsh_agent.empty())) {
    plan.notes.push_back(
        std::string(remote.rsh_agent.empty() ? "--ssh-port and --ssh-identity-file have" : "--rsh-agent has") +
        " no effect: every rank runs on this host, which mpirun reaches without ssh");
  }
}

// ---- Step 2: every rank's environment.

struct RankEnvironment {
  std::vector<EnvVar> set;             // tuning flags, then -x NAME=VALUE, each variable once
  std::vector<std::string> forwarded;  // -x NAME and, for other hosts, by name from here
  bool agents_bind = true;             // the agents bind (binding.h); false: the user's mpirun arguments do
};

// One -x argument: NAME=VALUE sets, NAME forwards accordrun's value (or
// notes that there is none). `setter` maps each variable to what sets it.
Status AddEnvArg(const std::string& arg, const SystemInfo& system, std::map<std::string, std::string>& setter,
                 RankEnvironment& env, LaunchPlan& plan) {
  size_t eq = arg.find('=');
  std::string name = arg.substr(0, eq);
  auto [it, inserted] = setter.emplace(name, "-x " + arg);
  if (!inserted) return Status::InvalidArgument("-x " + arg + ": " + name + " is already set by " + it->second);
  if (eq != std::string::npos) {
    env.set.push_back({name, arg.substr(eq + 1)});
  } else if (system.env.count(name) != 0) {
    env.forwarded.push_back(name);
  } else {
    plan.notes.push_back("-x " + name + ": " + name + " is not set here, so the ranks do not get it");
  }
  return Status::OK();
}

// Ranks on other hosts get by name what they need from here: every ACCORD_*
// and HOROVOD_* variable and those of kForwardedToRemoteHosts that are set
// and not set otherwise, in the order of their names.
void ForwardToRemoteHosts(const SystemInfo& system, const std::map<std::string, std::string>& setter,
                          std::vector<std::string>& forwarded) {
  std::set<std::string> names;
  for (const auto& [name, value] : system.env) {
    bool knob = name.rfind("ACCORD_", 0) == 0 || name.rfind("HOROVOD_", 0) == 0;
    bool listed = std::find(std::begin(kForwardedToRemoteHosts), std::end(kForwardedToRemoteHosts), name) !=
                      std::end(kForwardedToRemoteHosts) ||
                  std::find(std::begin(kTorchVariables), std::end(kTorchVariables), name) != std::end(kTorchVariables);
    if ((knob || listed) && setter.count(name) == 0) names.insert(name);
  }
  forwarded.insert(forwarded.end(), names.begin(), names.end());
}

// Every rank reads its configuration at init and fails on a bad value;
// refuse such an environment now, once, instead.
Status CheckRankConfig(const SystemInfo& system, const std::vector<EnvVar>& set_vars) {
  std::map<std::string, std::string> rank_env = system.env;
  for (const EnvVar& var : set_vars) rank_env[var.name] = var.value;
  Result<Config> config = Config::FromLookup([&](const char* name) { return Lookup(rank_env, name); });
  if (!config.ok()) {
    return Status::InvalidArgument(config.status().message() + " (every rank would fail at init)");
  }
  return Status::OK();
}

// "0" or "0-3".
std::string Span(int first, int count) {
  return count == 1 ? std::to_string(first) : std::to_string(first) + "-" + std::to_string(first + count - 1);
}

// torchrun's variables (kTorchVariables): what the runner is to do for
// MASTER_ADDR and MASTER_PORT, forwarding them to other hosts, and
// --dry-run's lines. MASTER_ADDR is 127.0.0.1 for a job on this host only;
// else rank 0's host as -H names it, or its address that
// --network-interfaces prefers when given (or when -H calls it localhost).
// With hosts that mpirun finds elsewhere, rank 0's host is unknown: the
// user sets both.
void PlanTorch(const LaunchOptions& options, const SystemInfo& system, RankEnvironment& env, LaunchPlan& plan) {
  auto value_given = [&](const std::string& name) -> std::optional<std::string> {
    for (const EnvVar& var : env.set) {
      if (var.name == name) return var.value;
    }
    return Lookup(system.env, name);  // inherited, or forwarded with -x NAME
  };
  const HostPlacement& first = plan.placement.front();
  const bool hosts_known = !HostsFromElsewhere(options.mpi_args, system.env);
  TorchMaster& master = plan.torch;
  master.host = first.name;
  master.set_addr = hosts_known && !value_given("MASTER_ADDR");
  master.set_port = hosts_known && !value_given("MASTER_PORT");
  std::string lower = Lower(first.name);
  if (!plan.remote) {
    master.addr = "127.0.0.1";
  } else if (options.remote.network_interfaces.empty() && lower != "localhost" && lower.rfind("127.", 0) != 0) {
    master.addr = first.name;
  }
  if (plan.remote) {
    if (master.set_addr) env.forwarded.push_back("MASTER_ADDR");
    if (master.set_port) env.forwarded.push_back("MASTER_PORT");
  }
  if (!hosts_known && (!value_given("MASTER_ADDR") || !value_given("MASTER_PORT"))) {
    plan.notes.push_back(
        "MASTER_ADDR and MASTER_PORT are not set for torch.distributed: mpirun chooses the hosts (--mpi-args or a "
        "batch system), so rank 0's host is not known here; set them yourself");
  }

  auto shown = [&](const char* name, bool set, const std::string& ours) {
    std::optional<std::string> given = value_given(name);
    if (given) return std::string(name) + "=" + *given + " (as set)";
    return std::string(name) + "=" + (set ? ours : "(not set)");
  };
  std::string addr =
      master.addr.empty() ? "<" + first.name + "'s address on --network-interfaces, found at launch>" : master.addr;
  plan.torch_lines.push_back(
      shown("MASTER_ADDR", master.set_addr, addr) + " " +
      shown("MASTER_PORT", master.set_port, "<a free port of " + first.name + ", chosen at launch>") + " " +
      shown("WORLD_SIZE", true, std::to_string(plan.np)));
  if (!hosts_known) return;
  int rank = 0;
  for (size_t i = 0; i < plan.placement.size(); ++i) {
    const HostPlacement& host = plan.placement[i];
    std::string line = host.name + ":";
    const std::pair<const char*, std::string> values[] = {{"RANK", Span(rank, host.ranks)},
                                                          {"LOCAL_RANK", Span(0, host.ranks)},
                                                          {"LOCAL_WORLD_SIZE", std::to_string(host.ranks)},
                                                          {"GROUP_RANK", std::to_string(i)}};
    for (const auto& [name, value] : values) line += " " + shown(name, true, value);
    plan.torch_lines.push_back(line);
    rank += host.ranks;
  }
}

// The variables of every rank, with the binding notes and the tuning flags'
// notes added to the plan. A variable may be set once.
Result<RankEnvironment> PlanEnvironment(const LaunchOptions& options, const SystemInfo& system, LaunchPlan& plan) {
  RankEnvironment env;
  env.set = options.tuning.env;
  std::map<std::string, std::string> setter;  // variable -> what sets it, for messages
  for (size_t i = 0; i < env.set.size(); ++i) setter[env.set[i].name] = options.tuning.sources[i];
  for (const std::string& arg : options.env_args) {
    ACCORD_RETURN_IF_ERROR(AddEnvArg(arg, system, setter, env, plan));
  }
  env.agents_bind = !UserChoosesBinding(options.mpi_args, system.env);
  PlanBindingNotes(plan, system, env.agents_bind, env.set);
  PlanTorch(options, system, env, plan);
  if (plan.remote) ForwardToRemoteHosts(system, setter, env.forwarded);
  ACCORD_RETURN_IF_ERROR(CheckRankConfig(system, env.set));
  for (const std::string& note : options.tuning.notes) plan.notes.push_back(note);
  return env;
}

// ---- Step 3: the mpirun command.

// -H with the hosts that get ranks, --allow-run-as-root, and
// --oversubscribe (with its note) when this host has more ranks than cores.
void AddPlacementArgs(const LaunchOptions& options, const SystemInfo& system, LaunchPlan& plan) {
  std::vector<std::string>& argv = plan.argv;
  if (!options.hosts.empty()) {
    std::vector<HostSlots> used;
    for (const HostPlacement& host : plan.placement) {
      auto it = std::find_if(options.hosts.begin(), options.hosts.end(),
                             [&](const HostSlots& h) { return h.name == host.name; });
      used.push_back(*it);
    }
    argv.insert(argv.end(), {"-H", FormatHostList(used)});
  }
  if (system.is_root && !UserGives(options.mpi_args, {"--allow-run-as-root", "-allow-run-as-root"})) {
    argv.push_back("--allow-run-as-root");
  }
  const int cores = static_cast<int>(system.topology.cores.size());
  auto crowded = std::find_if(plan.placement.begin(), plan.placement.end(),
                              [&](const HostPlacement& host) { return host.local && host.ranks > cores; });
  if (crowded != plan.placement.end()) {
    if (!UserOversubscribes(options.mpi_args)) argv.push_back("--oversubscribe");
    plan.notes.push_back(std::to_string(crowded->ranks) + " ranks on the " + std::to_string(cores) +
                         (cores == 1 ? " core" : " cores") + " of " + crowded->name + ": adding --oversubscribe");
  }
}

// -x for every variable: those set, those forwarded, and the agent's own
// (agent_env.h); `host_ranks` is kHostRanksVariable's value, or empty.
void AddVariableArgs(const LaunchOptions& options, const RankEnvironment& env, bool remote,
                     const std::string& host_ranks, std::vector<std::string>& argv) {
  for (const EnvVar& var : env.set) argv.insert(argv.end(), {"-x", var.name + "=" + var.value});
  for (const std::string& name : env.forwarded) argv.insert(argv.end(), {"-x", name});
  argv.insert(argv.end(), {"-x", std::string(kBindVariable) + (env.agents_bind ? "=share" : "=user")});
  if (!host_ranks.empty()) argv.insert(argv.end(), {"-x", std::string(kHostRanksVariable) + "=" + host_ranks});
  if (options.report_bindings) argv.insert(argv.end(), {"-x", std::string(kReportBindingsVariable) + "=1"});
  if (remote) argv.insert(argv.end(), {"-x", kReportVariable});
}

// When rank 0 runs on another host and accordrun is to choose MASTER_PORT
// (or find MASTER_ADDR) there: one process, `accordrun --free-port`, started
// on that host the way the ranks will be (the same remote options and
// --mpi-args), which prints "PORT [ADDRESS]" (runner.h, ParsePortProbe).
void PlanPortProbe(const LaunchOptions& options, const SystemInfo& system, const CheckedInput& input,
                   LaunchPlan& plan) {
  const TorchMaster& master = plan.torch;
  if (plan.placement.front().local || !(master.set_port || (master.set_addr && master.addr.empty()))) return;
  std::vector<std::string>& argv = plan.torch.probe_argv;
  argv = {input.mpirun, "-np", "1", "-H", master.host};
  if (system.is_root && !UserGives(options.mpi_args, {"--allow-run-as-root", "-allow-run-as-root"})) {
    argv.push_back("--allow-run-as-root");
  }
  argv.insert(argv.end(), input.remote_args.begin(), input.remote_args.end());
  argv.insert(argv.end(), options.mpi_args.begin(), options.mpi_args.end());
  argv.insert(argv.end(), {system.self_exe, "--free-port"});
  std::string interfaces;
  for (const std::string& entry : options.remote.network_interfaces) {
    interfaces += (interfaces.empty() ? "" : ",") + entry;
  }
  if (!interfaces.empty()) argv.insert(argv.end(), {"--network-interfaces", interfaces});
}

// The plan's argv: mpirun, its options, then the rank agent wrapping the
// user's command.
void PlanArgv(const LaunchOptions& options, const SystemInfo& system, const CheckedInput& input,
              const RankEnvironment& env, LaunchPlan& plan) {
  std::vector<std::string>& argv = plan.argv;
  argv = {input.mpirun, "-np", std::to_string(plan.np)};
  AddPlacementArgs(options, system, plan);
  // Each agent binds its rank on its own host, where the cores are known
  // (binding.h); mpirun binds nothing.
  if (env.agents_bind) argv.insert(argv.end(), {"--bind-to", "none"});
  // With the user's binding, mpirun made it and can report it too.
  if (options.report_bindings && !env.agents_bind &&
      !UserGives(options.mpi_args, {"--report-bindings", "-report-bindings"})) {
    argv.push_back("--report-bindings");
  }
  argv.insert(argv.end(), input.remote_args.begin(), input.remote_args.end());
  if (!options.output_dir.empty()) argv.insert(argv.end(), {"--output-filename", options.output_dir});
  // Ranks on several hosts find their host's index from how many ranks each has.
  std::string host_ranks;
  if (plan.remote && !HostsFromElsewhere(options.mpi_args, system.env)) {
    for (const HostPlacement& host : plan.placement) {
      host_ranks += (host_ranks.empty() ? "" : ",") + std::to_string(host.ranks);
    }
  }
  AddVariableArgs(options, env, plan.remote, host_ranks, argv);
  argv.insert(argv.end(), options.mpi_args.begin(), options.mpi_args.end());
  argv.insert(argv.end(), {system.self_exe, "--rank-agent"});
  argv.insert(argv.end(), options.command.begin(), options.command.end());
  PlanPortProbe(options, system, input, plan);
}

}  // namespace

std::vector<EnvVar> TorchRankVariables(const GetEnvFn& get_env) {
  auto number = [&](const char* name) -> std::optional<int> {
    const char* text = get_env(name);
    int value = 0;
    if (text == nullptr) return std::nullopt;
    auto [end, error] = std::from_chars(text, text + std::strlen(text), value);
    if (*text == '\0' || error != std::errc() || *end != '\0' || value < 0) return std::nullopt;
    return value;
  };
  std::optional<int> rank = number("OMPI_COMM_WORLD_RANK");
  if (!rank) rank = number("PMIX_RANK");
  const std::optional<int> size = number("OMPI_COMM_WORLD_SIZE");
  const std::optional<int> local_rank = number("OMPI_COMM_WORLD_LOCAL_RANK");
  const std::optional<int> local_size = number("OMPI_COMM_WORLD_LOCAL_SIZE");
  // The host's index: its block of ranks in kHostRanksVariable must be the
  // one Open MPI placed this rank in.
  std::optional<int> group_rank;
  if (rank && local_rank && local_size && size && *local_size == *size) {
    group_rank = 0;
  } else if (const char* hosts = get_env(kHostRanksVariable); rank && local_rank && local_size && hosts != nullptr) {
    int first = 0;
    int index = 0;
    for (const char* at = hosts; *at != '\0'; ++index) {
      int ranks = 0;
      auto [end, error] = std::from_chars(at, at + std::strlen(at), ranks);
      if (error != std::errc() || (*end != ',' && *end != '\0') || ranks <= 0) break;
      if (*rank < first + ranks) {
        if (first == *rank - *local_rank && ranks == *local_size) group_rank = index;
        break;
      }
      first += ranks;
      at = *end == ',' ? end + 1 : end;
    }
  }
  std::vector<EnvVar> vars;
  const std::pair<const char*, std::optional<int>> values[] = {{"RANK", rank},
                                                               {"WORLD_SIZE", size},
                                                               {"LOCAL_RANK", local_rank},
                                                               {"LOCAL_WORLD_SIZE", local_size},
                                                               {"GROUP_RANK", group_rank}};
  for (const auto& [name, value] : values) {
    if (value && get_env(name) == nullptr) vars.push_back({name, std::to_string(*value)});
  }
  return vars;
}

bool IsLocalHost(const std::string& name, const std::string& hostname) {
  std::string lower = Lower(name);
  if (lower == "localhost" || lower.rfind("127.", 0) == 0) return true;
  if (hostname.empty()) return false;
  std::string self = Lower(hostname);
  if (lower == self) return true;
  std::string short_self = self.substr(0, self.find('.'));
  std::string short_name = lower.substr(0, lower.find('.'));
  // "node1" and "node1.cluster" name the same host; two different domains do not.
  return (lower == short_self || self == short_name) && !short_self.empty();
}

Result<std::string> FindProgram(const std::string& name, const SystemInfo& system) {
  if (name.empty()) return Status::InvalidArgument("the program name is empty");
  if (name.find('/') != std::string::npos) {
    switch (system.file_kind(name)) {
      case FileKind::kExecutable: return name;
      case FileKind::kMissing: return Status::InvalidArgument("cannot run \"" + name + "\": no such file");
      case FileKind::kDirectory: return Status::InvalidArgument("cannot run \"" + name + "\": it is a directory");
      case FileKind::kNotExecutable:
        return Status::InvalidArgument("cannot run \"" + name +
                                       "\": it is not executable (chmod +x it, or name its interpreter first)");
    }
  }
  std::string path = Lookup(system.env, "PATH").value_or("");
  bool found_not_executable = false;
  size_t start = 0;
  while (start <= path.size()) {
    size_t colon = path.find(':', start);
    std::string dir = path.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
    start = colon == std::string::npos ? path.size() + 1 : colon + 1;
    std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    FileKind kind = system.file_kind(candidate);
    if (kind == FileKind::kExecutable) return candidate;
    if (kind == FileKind::kNotExecutable) found_not_executable = true;
  }
  if (found_not_executable) {
    return Status::InvalidArgument("cannot run \"" + name + "\": it is in PATH but not executable");
  }
  return Status::InvalidArgument("cannot run \"" + name + "\": no such program in PATH");
}

Result<LaunchPlan> PlanLaunch(const LaunchOptions& options, const SystemInfo& system) {
  Result<CheckedInput> input = CheckInput(options, system);
  if (!input.ok()) return input.status();
  LaunchPlan plan;
  PlaceRanks(options, system, plan);
  Result<RankEnvironment> env = PlanEnvironment(options, system, plan);
  if (!env.ok()) return env.status();
  PlanArgv(options, system, *input, *env, plan);
  return plan;
}

}  // namespace accord::launcher
