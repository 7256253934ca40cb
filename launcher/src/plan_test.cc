// Tests for PlanLaunch: the exact mpirun command and the notes for every
// flag and every machine fact that changes them, and the errors that need
// the machine (no mpirun, a program that cannot run, a bad environment).
#include "plan.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <map>

namespace accord::launcher {
namespace {

using Args = std::vector<std::string>;

const char* const kSelf = "/opt/accord/bin/accordrun";

// A machine of `cores` cores on one NUMA node, no GPU.
HostTopology Cores(int cores) {
  HostTopology topology;
  for (int cpu = 0; cpu < cores; ++cpu) topology.cores.push_back({{cpu}, 0, 0});
  return topology;
}

// A made-up 4-core machine named node0 with mpirun and python3 in /usr/bin.
SystemInfo FakeSystem(std::map<std::string, FileKind> files = {}) {
  SystemInfo system;
  system.hostname = "node0";
  system.topology = Cores(4);
  system.self_exe = kSelf;
  system.env = {{"PATH", "/usr/local/bin:/usr/bin"}, {"HOME", "/home/me"}};
  files.emplace("/usr/bin/mpirun", FileKind::kExecutable);
  files.emplace("/usr/bin/python3", FileKind::kExecutable);
  files.emplace("/usr/bin", FileKind::kDirectory);
  system.file_kind = [files](const std::string& path) {
    auto it = files.find(path);
    return it == files.end() ? FileKind::kMissing : it->second;
  };
  return system;
}

LaunchOptions Options(int np, Args command = {"python3", "train.py"}) {
  LaunchOptions options;
  options.np = np;
  options.command = std::move(command);
  return options;
}

LaunchPlan MustPlan(const LaunchOptions& options, const SystemInfo& system) {
  Result<LaunchPlan> plan = PlanLaunch(options, system);
  INFO("PlanLaunch failed: " << plan.status());
  REQUIRE(plan.ok());
  return *plan;
}

std::string PlanError(const LaunchOptions& options, const SystemInfo& system) {
  Result<LaunchPlan> plan = PlanLaunch(options, system);
  REQUIRE_FALSE(plan.ok());
  CHECK(plan.status().code() == StatusCode::kInvalidArgument);
  return plan.status().message();
}

bool Contains(const Args& argv, const Args& run) {
  return std::search(argv.begin(), argv.end(), run.begin(), run.end()) != argv.end();
}

bool HasNote(const LaunchPlan& plan, const std::string& part) {
  return std::any_of(plan.notes.begin(), plan.notes.end(),
                     [&](const std::string& note) { return note.find(part) != std::string::npos; });
}

TEST_CASE("Two ranks on a 4-core host: each bound by its agent to 2 cores, with 2 OpenMP threads") {
  LaunchPlan plan = MustPlan(Options(2), FakeSystem());
  CHECK(plan.argv == Args{"/usr/bin/mpirun", "-np", "2", "--bind-to", "none", "-x", "ACCORDRUN_BIND=share", kSelf,
                          "--rank-agent", "python3", "train.py"});
  CHECK(plan.np == 2);
  CHECK_FALSE(plan.remote);
  REQUIRE(plan.placement.size() == 1);
  CHECK(plan.placement[0].name == "node0");
  CHECK(plan.placement[0].ranks == 2);
  CHECK(plan.placement[0].local);
  REQUIRE(plan.notes.size() == 1);
  CHECK(plan.notes[0] ==
        "binding: 2 ranks on the 4 cores of node0: 2 cores each, OMP_NUM_THREADS=2; set OMP_NUM_THREADS to choose "
        "another value");
  CHECK(plan.binding == Args{"2 ranks on the 4 cores of node0: 2 cores each, OMP_NUM_THREADS=2",
                             "node0 local rank 0: cores 0-1 on NUMA node 0, OMP_NUM_THREADS=2",
                             "node0 local rank 1: cores 2-3 on NUMA node 0, OMP_NUM_THREADS=2"});
}

TEST_CASE("One rank gets every core of its host") {
  LaunchPlan plan = MustPlan(Options(1), FakeSystem());
  CHECK(plan.argv == Args{"/usr/bin/mpirun", "-np", "1", "--bind-to", "none", "-x", "ACCORDRUN_BIND=share", kSelf,
                          "--rank-agent", "python3", "train.py"});
  CHECK(plan.notes == Args{"binding: 1 rank on the 4 cores of node0: bound to 4 cores, OMP_NUM_THREADS=4; set "
                           "OMP_NUM_THREADS to choose another value"});
}

TEST_CASE("OMP_NUM_THREADS set by the user is left alone") {
  SystemInfo system = FakeSystem();
  system.env["OMP_NUM_THREADS"] = "3";
  LaunchPlan inherited = MustPlan(Options(2), system);
  CHECK_FALSE(Contains(inherited.argv, {"-x", "OMP_NUM_THREADS=2"}));
  CHECK(inherited.notes == Args{"binding: 2 ranks on the 4 cores of node0: 2 cores each, OMP_NUM_THREADS=3 (as set)"});
  CHECK(inherited.binding.back() == "node0 local rank 1: cores 2-3 on NUMA node 0, OMP_NUM_THREADS=3 (as set)");

  LaunchOptions options = Options(2);
  options.env_args = {"OMP_NUM_THREADS=5"};
  LaunchPlan given = MustPlan(options, FakeSystem());
  CHECK(Contains(given.argv, {"-x", "OMP_NUM_THREADS=5"}));
  CHECK(given.notes == Args{"binding: 2 ranks on the 4 cores of node0: 2 cores each, OMP_NUM_THREADS=5 (as set)"});
}

TEST_CASE("Root adds --allow-run-as-root unless the user passed it") {
  SystemInfo system = FakeSystem();
  system.is_root = true;
  LaunchPlan plan = MustPlan(Options(1), system);
  CHECK(plan.argv == Args{"/usr/bin/mpirun", "-np", "1", "--allow-run-as-root", "--bind-to", "none", "-x",
                          "ACCORDRUN_BIND=share", kSelf, "--rank-agent", "python3", "train.py"});
  LaunchOptions options = Options(1);
  options.mpi_args = {"--allow-run-as-root"};
  LaunchPlan given = MustPlan(options, system);
  CHECK(std::count(given.argv.begin(), given.argv.end(), "--allow-run-as-root") == 1);
  LaunchPlan not_root = MustPlan(Options(1), FakeSystem());
  CHECK(std::count(not_root.argv.begin(), not_root.argv.end(), "--allow-run-as-root") == 0);
}

TEST_CASE("More ranks than cores: --oversubscribe and a note (the agents then leave the ranks unbound)") {
  LaunchPlan plan = MustPlan(Options(6), FakeSystem());
  CHECK(plan.argv == Args{"/usr/bin/mpirun", "-np", "6", "--oversubscribe", "--bind-to", "none", "-x",
                          "ACCORDRUN_BIND=share", kSelf, "--rank-agent", "python3", "train.py"});
  CHECK(HasNote(plan, "6 ranks on the 4 cores of node0: adding --oversubscribe"));
  CHECK_FALSE(HasNote(plan, "binding:"));  // the host's local rank 0 says it is not bound
  CHECK(plan.binding.back() == "node0 local rank 5: not bound, OMP_NUM_THREADS=1");

  SystemInfo one_core = FakeSystem();
  one_core.topology = Cores(1);
  CHECK(HasNote(MustPlan(Options(2), one_core), "2 ranks on the 1 core of node0"));

  // As many ranks as cores: no --oversubscribe.
  LaunchPlan fits = MustPlan(Options(4), FakeSystem());
  CHECK(Contains(fits.argv, {"-x", "ACCORDRUN_BIND=share"}));
  CHECK(std::count(fits.argv.begin(), fits.argv.end(), "--oversubscribe") == 0);

  LaunchOptions options = Options(6);
  options.mpi_args = {"--oversubscribe"};
  LaunchPlan given = MustPlan(options, FakeSystem());
  CHECK(std::count(given.argv.begin(), given.argv.end(), "--oversubscribe") == 1);
}

TEST_CASE("Binding chosen in --mpi-args or Open MPI's environment wins") {
  for (const Args& mpi_args : std::vector<Args>{{"--bind-to", "socket"},
                                                {"--bind-to=none"},
                                                {"-bind-to", "hwthread"},
                                                {"--map-by", "ppr:2:socket:PE=2"},
                                                {"--cpu-list", "0,2"},
                                                {"--rankfile", "ranks.txt"},
                                                {"--mca", "hwloc_base_binding_policy", "none"}}) {
    LaunchOptions options = Options(2);
    options.mpi_args = mpi_args;
    LaunchPlan plan = MustPlan(options, FakeSystem());
    INFO(plan.argv.size());
    CHECK_FALSE(Contains(plan.argv, {"--bind-to", "none"}));
    CHECK(Contains(plan.argv, {"-x", "ACCORDRUN_BIND=user"}));
    CHECK(Contains(plan.argv, mpi_args));
  }
  SystemInfo system = FakeSystem();
  system.env["OMPI_MCA_hwloc_base_binding_policy"] = "none";
  CHECK(Contains(MustPlan(Options(2), system).argv, {"-x", "ACCORDRUN_BIND=user"}));

  // Oversubscribed with the user's binding: --oversubscribe only.
  LaunchOptions options = Options(6);
  options.mpi_args = {"--bind-to", "hwthread"};
  LaunchPlan plan = MustPlan(options, FakeSystem());
  CHECK_FALSE(Contains(plan.argv, {"--bind-to", "none"}));
  CHECK(HasNote(plan, "6 ranks on the 4 cores of node0: adding --oversubscribe"));
  CHECK(Contains(plan.argv, {"-x", "ACCORDRUN_BIND=user"}));
  CHECK(plan.binding == Args{"node0: bound as --mpi-args or Open MPI's environment say; OMP_NUM_THREADS = the "
                             "rank's cores, at most an equal share"});
  CHECK_FALSE(HasNote(plan, "binding:"));
}

TEST_CASE("--report-bindings: every agent reports; mpirun too where it made the binding") {
  LaunchOptions options = Options(2);
  options.report_bindings = true;
  LaunchPlan plan = MustPlan(options, FakeSystem());
  CHECK(plan.argv == Args{"/usr/bin/mpirun", "-np", "2", "--bind-to", "none", "-x", "ACCORDRUN_BIND=share", "-x",
                          "ACCORDRUN_REPORT_BINDINGS=1", kSelf, "--rank-agent", "python3", "train.py"});
  options.mpi_args = {"--bind-to", "core"};
  LaunchPlan user = MustPlan(options, FakeSystem());
  CHECK(Contains(user.argv, {"--report-bindings", "-x", "ACCORDRUN_BIND=user", "-x", "ACCORDRUN_REPORT_BINDINGS=1"}));
  options.mpi_args = {"--bind-to", "core", "--report-bindings"};
  LaunchPlan twice = MustPlan(options, FakeSystem());
  CHECK(std::count(twice.argv.begin(), twice.argv.end(), "--report-bindings") == 1);
}

TEST_CASE("--mpi-args go after accordrun's own settings, verbatim") {
  LaunchOptions options = Options(2);
  options.mpi_args = {"--mca", "btl", "self,tcp", "--report-bindings"};
  LaunchPlan plan = MustPlan(options, FakeSystem());
  CHECK(plan.argv == Args{"/usr/bin/mpirun", "-np", "2", "--bind-to", "none", "-x", "ACCORDRUN_BIND=share", "--mca",
                          "btl", "self,tcp", "--report-bindings", kSelf, "--rank-agent", "python3", "train.py"});
}

TEST_CASE("Tuning flags and -x become -x NAME=VALUE; -x NAME forwards a set variable") {
  LaunchOptions options = Options(1);
  options.tuning.env = {{"ACCORD_FUSION_THRESHOLD", "33554432"}, {"ACCORD_CYCLE_TIME_MS", "5"}};
  options.tuning.sources = {"--fusion-threshold-mb", "--cycle-time-ms"};
  options.tuning.notes = {"this build of accord has no timeline yet: ..."};
  options.env_args = {"MY_FLAG=a b", "HOME", "NOT_SET_HERE"};
  LaunchPlan plan = MustPlan(options, FakeSystem());
  CHECK(plan.argv == Args{"/usr/bin/mpirun", "-np", "1", "--bind-to", "none", "-x", "ACCORD_FUSION_THRESHOLD=33554432",
                          "-x", "ACCORD_CYCLE_TIME_MS=5", "-x", "MY_FLAG=a b", "-x", "HOME", "-x",
                          "ACCORDRUN_BIND=share", kSelf, "--rank-agent", "python3", "train.py"});
  CHECK(HasNote(plan, "-x NOT_SET_HERE: NOT_SET_HERE is not set here, so the ranks do not get it"));
  CHECK(HasNote(plan, "no timeline yet"));
}

TEST_CASE("A variable set twice is refused") {
  LaunchOptions options = Options(1);
  options.tuning.env = {{"ACCORD_CYCLE_TIME_MS", "5"}};
  options.tuning.sources = {"--cycle-time-ms"};
  options.env_args = {"ACCORD_CYCLE_TIME_MS=3"};
  CHECK(PlanError(options, FakeSystem()) ==
        "-x ACCORD_CYCLE_TIME_MS=3: ACCORD_CYCLE_TIME_MS is already set by --cycle-time-ms");
  LaunchOptions twice = Options(1);
  twice.env_args = {"A=1", "A=2"};
  CHECK(PlanError(twice, FakeSystem()) == "-x A=2: A is already set by -x A=1");
}

TEST_CASE("An environment every rank would reject at init is refused up front") {
  SystemInfo system = FakeSystem();
  system.env["ACCORD_FUSION_THRESHOLD"] = "64MB";
  std::string error = PlanError(Options(2), system);
  CHECK(error.rfind("ACCORD_FUSION_THRESHOLD=\"64MB\" is not valid", 0) == 0);
  CHECK(error.find("(every rank would fail at init)") != std::string::npos);

  LaunchOptions options = Options(2);
  options.env_args = {"ACCORD_CACHE_CAPACITY=-1"};
  CHECK(PlanError(options, FakeSystem()).find("ACCORD_CACHE_CAPACITY=\"-1\" is out of range") == 0);

  // A flag overrides a bad inherited value.
  LaunchOptions fixed = Options(2);
  fixed.tuning.env = {{"ACCORD_FUSION_THRESHOLD", "0"}};
  fixed.tuning.sources = {"--fusion-threshold-mb"};
  CHECK(PlanLaunch(fixed, system).ok());
}

TEST_CASE("-H on this host only is a local job") {
  LaunchOptions options = Options(2);
  options.hosts = {{"localhost", 2}};
  LaunchPlan plan = MustPlan(options, FakeSystem());
  CHECK(plan.argv == Args{"/usr/bin/mpirun", "-np", "2", "-H", "localhost:2", "--bind-to", "none", "-x",
                          "ACCORDRUN_BIND=share", kSelf, "--rank-agent", "python3", "train.py"});
  CHECK_FALSE(plan.remote);

  // More slots than cores on this host still oversubscribes.
  LaunchOptions crowded = Options(8);
  crowded.hosts = {{"node0", 8}};
  LaunchPlan crowded_plan = MustPlan(crowded, FakeSystem());
  CHECK(Contains(crowded_plan.argv, {"--oversubscribe", "--bind-to", "none"}));
  CHECK(HasNote(crowded_plan, "8 ranks on the 4 cores of node0: adding --oversubscribe"));
}

TEST_CASE("Other hosts: ranks fill hosts in order, knobs and paths are forwarded by name") {
  SystemInfo system = FakeSystem();
  system.env["ACCORD_LOG_LEVEL"] = "info";
  system.env["HOROVOD_CYCLE_TIME"] = "1";
  system.env["PYTHONPATH"] = "/src";
  system.env["UNRELATED"] = "x";
  LaunchOptions options = Options(6);
  options.hosts = {{"node1", 4}, {"node2", 4}, {"node3", 4}};
  options.tuning.env = {{"ACCORD_LOG_LEVEL", "debug"}};
  options.tuning.sources = {"--log-level"};
  LaunchPlan plan = MustPlan(options, system);
  CHECK(plan.remote);
  REQUIRE(plan.placement.size() == 2);
  CHECK(plan.placement[0].ranks == 4);
  CHECK(plan.placement[1].ranks == 2);
  CHECK(plan.argv == Args{"/usr/bin/mpirun",
                          "-np",
                          "6",
                          "-H",
                          "node1:4,node2:4",
                          "--bind-to",
                          "none",
                          "-x",
                          "ACCORD_LOG_LEVEL=debug",
                          "-x",
                          "MASTER_ADDR",
                          "-x",
                          "MASTER_PORT",
                          "-x",
                          "HOROVOD_CYCLE_TIME",
                          "-x",
                          "PATH",
                          "-x",
                          "PYTHONPATH",
                          "-x",
                          "ACCORDRUN_BIND=share",
                          "-x",
                          "ACCORDRUN_HOST_RANKS=4,2",
                          "-x",
                          kReportVariable,
                          kSelf,
                          "--rank-agent",
                          "python3",
                          "train.py"});
}

TEST_CASE("Other hosts with more slots than this host has cores: no --oversubscribe, each host binds its own") {
  // node1 and node2 may have 8 cores each; only their agents know. accordrun
  // neither oversubscribes nor unbinds for them.
  LaunchOptions options = Options(16);
  options.hosts = {{"node1", 8}, {"node2", 8}};
  LaunchPlan plan = MustPlan(options, FakeSystem());
  CHECK(std::count(plan.argv.begin(), plan.argv.end(), "--oversubscribe") == 0);
  CHECK(Contains(plan.argv, {"--bind-to", "none"}));
  CHECK(Contains(plan.argv, {"-x", "ACCORDRUN_BIND=share"}));
  CHECK(plan.notes == Args{"binding: every other host binds its ranks the same way on its own cores"});
  // --dry-run's lines for them assume this host's cores.
  CHECK(plan.binding.front() ==
        "8 ranks on the 4 cores of node1: not bound, OMP_NUM_THREADS=1 (if node1 is like "
        "this host)");

  // This host in the list is judged by its own cores; the others are not.
  LaunchOptions mixed = Options(12);
  mixed.hosts = {{"node0", 6}, {"node1", 6}};
  LaunchPlan mixed_plan = MustPlan(mixed, FakeSystem());
  CHECK(HasNote(mixed_plan, "6 ranks on the 4 cores of node0: adding --oversubscribe"));
  CHECK_FALSE(HasNote(mixed_plan, "node1"));
}

TEST_CASE("Every variable accordrun sets reaches other hosts with -x, by value or by name") {
  SystemInfo system = FakeSystem();
  system.env["ACCORD_CYCLE_TIME_MS"] = "2";  // inherited here, forwarded by name
  LaunchOptions options = Options(2);
  options.hosts = {{"h1", 1}, {"h2", 1}};
  options.tuning.env = {{"ACCORD_FUSION_THRESHOLD", "0"}};
  options.tuning.sources = {"--fusion-threshold-mb"};
  options.env_args = {"MY_SETTING=x", "HOME"};
  LaunchPlan plan = MustPlan(options, system);
  for (const Args& pair : std::vector<Args>{{"-x", "ACCORD_FUSION_THRESHOLD=0"},
                                            {"-x", "MY_SETTING=x"},
                                            {"-x", "HOME"},
                                            {"-x", "ACCORD_CYCLE_TIME_MS"},
                                            {"-x", "PATH"},
                                            {"-x", "ACCORDRUN_BIND=share"},
                                            {"-x", kReportVariable}}) {
    INFO(pair[1]);
    CHECK(Contains(plan.argv, pair));
  }
}

TEST_CASE("Hosts given to mpirun directly, or by a batch system, count as other hosts") {
  for (const Args& mpi_args : std::vector<Args>{{"--hostfile", "hosts"},
                                                {"-H", "a,b"},
                                                {"--host=a,b"},
                                                {"-machinefile", "m"},
                                                {"--mca", "orte_default_hostfile", "f"}}) {
    LaunchOptions options = Options(2);
    options.mpi_args = mpi_args;
    INFO(mpi_args[0]);
    LaunchPlan plan = MustPlan(options, FakeSystem());
    CHECK(plan.remote);
    CHECK(Contains(plan.argv, {"-x", kReportVariable}));
  }
  SystemInfo slurm = FakeSystem();
  slurm.env["SLURM_JOB_ID"] = "42";
  CHECK(MustPlan(Options(2), slurm).remote);
  CHECK_FALSE(MustPlan(Options(2), FakeSystem()).remote);
}

TEST_CASE("Remote options: mpirun's MCA parameters, after the binding and before the variables") {
  SystemInfo system =
      FakeSystem({{"/home/me/.ssh/cluster", FileKind::kNotExecutable}, {"/opt/bed/netns-rsh", FileKind::kExecutable}});
  LaunchOptions options = Options(2);
  options.hosts = {{"h1", 1}, {"h2", 1}};
  options.remote.network_interfaces = {"10.77.0.0/24"};
  options.remote.ssh_port = 2222;
  options.remote.ssh_identity_file = "~/.ssh/cluster";
  options.remote.rsh_agent = "/opt/bed/netns-rsh";
  LaunchPlan plan = MustPlan(options, system);
  CHECK(Contains(plan.argv, {"--bind-to", "none", "--mca", "plm_rsh_agent", "/opt/bed/netns-rsh", "--mca",
                             "plm_rsh_args", "-p 2222 -i /home/me/.ssh/cluster", "--mca", "btl_tcp_if_include",
                             "10.77.0.0/24", "--mca", "oob_tcp_if_include", "10.77.0.0/24", "-x"}));
  CHECK(plan.network_interfaces == Args{"10.77.0.0/24"});
  CHECK(plan.notes == Args{"binding: every other host binds its ranks the same way on its own cores"});
}

TEST_CASE("Remote options that cannot work are refused") {
  LaunchOptions key = Options(2);
  key.hosts = {{"h1", 2}};
  key.remote.ssh_identity_file = "~/.ssh/missing";
  CHECK(PlanError(key, FakeSystem()) == "--ssh-identity-file ~/.ssh/missing: no such file");
  key.remote.ssh_identity_file = "/usr/bin";
  CHECK(PlanError(key, FakeSystem()) == "--ssh-identity-file /usr/bin is a directory, not a key file");

  LaunchOptions agent = Options(2);
  agent.hosts = {{"h1", 2}};
  agent.remote.rsh_agent = "./netns-rsh";
  CHECK(PlanError(agent, FakeSystem()) == "--rsh-agent ./netns-rsh: cannot run \"./netns-rsh\": no such file");
  agent.remote.rsh_agent = "ssh";
  CHECK(PlanError(agent, FakeSystem()) == "--rsh-agent ssh: cannot run \"ssh\": no such program in PATH");
  CHECK(PlanLaunch(agent, FakeSystem({{"/usr/bin/ssh", FileKind::kExecutable}})).ok());

  LaunchOptions twice = Options(2);
  twice.hosts = {{"h1", 2}};
  twice.remote.network_interfaces = {"eth0"};
  twice.mpi_args = {"--mca", "btl_tcp_if_include", "eth1"};
  CHECK(PlanError(twice, FakeSystem()) ==
        "--network-interfaces and --mpi-args both set btl_tcp_if_include; give one of them");
}

TEST_CASE("ssh options for a job on this host only are noted as having no effect") {
  LaunchOptions options = Options(2);
  options.remote.ssh_port = 2222;
  CHECK(HasNote(MustPlan(options, FakeSystem()),
                "--ssh-port and --ssh-identity-file have no effect: every rank runs on this host"));
  options.remote = {};
  options.remote.rsh_agent = "/usr/bin/python3";
  CHECK(HasNote(MustPlan(options, FakeSystem()), "--rsh-agent has no effect"));
}

TEST_CASE("-np defaults to every slot; this host in a host list is recognised") {
  LaunchOptions options;
  options.command = {"python3", "x.py"};
  options.hosts = {{"node0", 2}, {"node1", 2}};
  LaunchPlan plan = MustPlan(options, FakeSystem());
  CHECK(plan.np == 4);
  CHECK(Contains(plan.argv, {"-np", "4", "-H", "node0:2,node1:2"}));
  REQUIRE(plan.placement.size() == 2);
  CHECK(plan.placement[0].local);
  CHECK_FALSE(plan.placement[1].local);
}

TEST_CASE("--output-filename is passed to mpirun; a file there is refused") {
  LaunchOptions options = Options(1);
  options.output_dir = "logs";
  CHECK(Contains(MustPlan(options, FakeSystem()).argv, {"--output-filename", "logs"}));
  CHECK(Contains(MustPlan(options, FakeSystem({{"logs", FileKind::kDirectory}})).argv, {"--output-filename", "logs"}));
  CHECK(PlanError(options, FakeSystem({{"logs", FileKind::kNotExecutable}})) ==
        "--output-filename logs is a file, not a directory");
}

TEST_CASE("mpirun missing from PATH is refused with what to install") {
  SystemInfo system = FakeSystem();
  system.env["PATH"] = "/nowhere";
  LaunchOptions options = Options(2, {"/usr/bin/python3"});
  CHECK(PlanError(options, system) ==
        "mpirun is not in PATH: accordrun runs jobs with Open MPI's mpirun (Debian: apt-get install openmpi-bin)");
}

TEST_CASE("A program that cannot run is refused") {
  CHECK(PlanError(Options(2, {"pythn", "x.py"}), FakeSystem()) == "cannot run \"pythn\": no such program in PATH");
  CHECK(PlanError(Options(2, {"./train.py"}), FakeSystem()) == "cannot run \"./train.py\": no such file");
  CHECK(PlanError(Options(2, {"./train.py"}), FakeSystem({{"./train.py", FileKind::kNotExecutable}})) ==
        "cannot run \"./train.py\": it is not executable (chmod +x it, or name its interpreter first)");
  CHECK(PlanError(Options(2, {"/usr/bin"}), FakeSystem()) == "cannot run \"/usr/bin\": it is a directory");
  CHECK(PlanError(Options(2, {"tool"}), FakeSystem({{"/usr/local/bin/tool", FileKind::kNotExecutable}})) ==
        "cannot run \"tool\": it is in PATH but not executable");
  CHECK(PlanLaunch(Options(2, {"./run.sh"}), FakeSystem({{"./run.sh", FileKind::kExecutable}})).ok());
}

TEST_CASE("FindProgram searches PATH in order like execvp") {
  SystemInfo system = FakeSystem({{"/usr/local/bin/python3", FileKind::kExecutable}});
  Result<std::string> found = FindProgram("python3", system);
  REQUIRE(found.ok());
  CHECK(*found == "/usr/local/bin/python3");
  system.env["PATH"] = "/usr/bin::/x";
  CHECK(FindProgram("python3", system).value() == "/usr/bin/python3");
  CHECK(FindProgram("/usr/bin/mpirun", system).value() == "/usr/bin/mpirun");
}

TEST_CASE("IsLocalHost knows this host's names") {
  CHECK(IsLocalHost("localhost", "node0"));
  CHECK(IsLocalHost("127.0.0.1", "node0"));
  CHECK(IsLocalHost("node0", "node0"));
  CHECK(IsLocalHost("NODE0", "node0"));
  CHECK(IsLocalHost("node0", "node0.cluster.org"));
  CHECK(IsLocalHost("node0.cluster.org", "node0"));
  CHECK_FALSE(IsLocalHost("node01", "node0"));
  CHECK_FALSE(IsLocalHost("node1", "node0"));
  CHECK_FALSE(IsLocalHost("node0.a", "node0.b"));
  CHECK_FALSE(IsLocalHost("node1", ""));
}

// ---- torchrun's variables (TorchMaster, torch_lines, TorchRankVariables).

TEST_CASE("torch.distributed on this host only: MASTER_ADDR 127.0.0.1, a port chosen here, one host") {
  LaunchPlan plan = MustPlan(Options(2), FakeSystem());
  CHECK(plan.torch.set_addr);
  CHECK(plan.torch.set_port);
  CHECK(plan.torch.addr == "127.0.0.1");
  CHECK(plan.torch.probe_argv.empty());
  // Ranks here inherit mpirun's environment: nothing on the command line.
  CHECK(std::count(plan.argv.begin(), plan.argv.end(), "MASTER_PORT") == 0);
  CHECK(plan.torch_lines == Args{"MASTER_ADDR=127.0.0.1 MASTER_PORT=<a free port of node0, chosen at launch> "
                                 "WORLD_SIZE=2",
                                 "node0: RANK=0-1 LOCAL_RANK=0-1 LOCAL_WORLD_SIZE=2 GROUP_RANK=0"});
}

TEST_CASE("torch.distributed: the user's MASTER_ADDR and MASTER_PORT win, from the environment or -x") {
  SystemInfo system = FakeSystem();
  system.env["MASTER_PORT"] = "29500";
  LaunchOptions options = Options(3);
  options.hosts = {{"node1", 2}, {"node2", 2}};
  options.env_args = {"MASTER_ADDR=10.0.0.9"};
  LaunchPlan plan = MustPlan(options, system);
  CHECK_FALSE(plan.torch.set_addr);
  CHECK_FALSE(plan.torch.set_port);
  CHECK(plan.torch.probe_argv.empty());
  CHECK(Contains(plan.argv, {"-x", "MASTER_ADDR=10.0.0.9"}));
  CHECK(Contains(plan.argv, {"-x", "MASTER_PORT"}));  // the user's, forwarded to the other hosts
  CHECK(std::count(plan.argv.begin(), plan.argv.end(), "MASTER_PORT") == 1);
  CHECK(plan.torch_lines == Args{"MASTER_ADDR=10.0.0.9 (as set) MASTER_PORT=29500 (as set) WORLD_SIZE=3",
                                 "node1: RANK=0-1 LOCAL_RANK=0-1 LOCAL_WORLD_SIZE=2 GROUP_RANK=0",
                                 "node2: RANK=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 GROUP_RANK=1"});
}

TEST_CASE("torch.distributed on other hosts: rank 0's host as -H names it, its port chosen there") {
  SystemInfo system = FakeSystem();
  system.is_root = true;
  LaunchOptions options = Options(3);
  options.hosts = {{"node1", 2}, {"node2", 2}};
  options.remote.rsh_agent = "/usr/bin/python3";
  options.mpi_args = {"--mca", "btl", "tcp,self"};
  LaunchPlan plan = MustPlan(options, system);
  CHECK(plan.torch.addr == "node1");
  CHECK(plan.torch.host == "node1");
  CHECK(Contains(plan.argv, {"-x", "MASTER_ADDR", "-x", "MASTER_PORT"}));
  CHECK(Contains(plan.argv, {"-x", "ACCORDRUN_HOST_RANKS=2,1"}));
  CHECK(plan.torch.probe_argv == Args{"/usr/bin/mpirun", "-np", "1", "-H", "node1", "--allow-run-as-root", "--mca",
                                      "plm_rsh_agent", "/usr/bin/python3", "--mca", "btl", "tcp,self", kSelf,
                                      "--free-port"});

  // With --network-interfaces, the address of rank 0's host on them, found there.
  options.remote.network_interfaces = {"10.1.0.0/16"};
  LaunchPlan on_subnet = MustPlan(options, system);
  CHECK(on_subnet.torch.addr.empty());
  REQUIRE(on_subnet.torch.probe_argv.size() > 2);
  CHECK(Args(on_subnet.torch.probe_argv.end() - 3, on_subnet.torch.probe_argv.end()) ==
        Args{"--free-port", "--network-interfaces", "10.1.0.0/16"});
  CHECK(on_subnet.torch_lines.front() ==
        "MASTER_ADDR=<node1's address on --network-interfaces, found at launch> MASTER_PORT=<a free port of node1, "
        "chosen at launch> WORLD_SIZE=3");

  // Rank 0 on this host, named localhost: its address, found at launch; no probe.
  options.remote.network_interfaces.clear();
  options.hosts = {{"localhost", 1}, {"node2", 2}};
  LaunchPlan here_first = MustPlan(options, system);
  CHECK(here_first.torch.addr.empty());
  CHECK(here_first.torch.probe_argv.empty());
}

TEST_CASE("torch.distributed with hosts that mpirun finds itself: MASTER_ADDR and MASTER_PORT left to the user") {
  LaunchOptions options = Options(4);
  options.mpi_args = {"--hostfile", "hosts"};
  LaunchPlan plan = MustPlan(options, FakeSystem());
  CHECK_FALSE(plan.torch.set_addr);
  CHECK_FALSE(plan.torch.set_port);
  CHECK(HasNote(plan, "MASTER_ADDR and MASTER_PORT are not set for torch.distributed"));
  CHECK(std::count(plan.argv.begin(), plan.argv.end(), "MASTER_ADDR") == 0);
  CHECK(std::none_of(plan.argv.begin(), plan.argv.end(),
                     [](const std::string& arg) { return arg.rfind("ACCORDRUN_HOST_RANKS", 0) == 0; }));
  CHECK(plan.torch_lines == Args{"MASTER_ADDR=(not set) MASTER_PORT=(not set) WORLD_SIZE=4"});
}

// The agent's view: Open MPI's variables and kHostRanksVariable.
GetEnvFn FakeRankEnv(const std::map<std::string, std::string>& env) {
  return [env](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  };
}

std::map<std::string, std::string> RankEnv(int rank, int size, int local_rank, int local_size) {
  return {{"OMPI_COMM_WORLD_RANK", std::to_string(rank)},
          {"OMPI_COMM_WORLD_SIZE", std::to_string(size)},
          {"OMPI_COMM_WORLD_LOCAL_RANK", std::to_string(local_rank)},
          {"OMPI_COMM_WORLD_LOCAL_SIZE", std::to_string(local_size)}};
}

TEST_CASE("TorchRankVariables: every rank on one host is in group 0") {
  for (int rank = 0; rank < 3; ++rank) {
    INFO("rank " << rank);
    CHECK(TorchRankVariables(FakeRankEnv(RankEnv(rank, 3, rank, 3))) ==
          std::vector<EnvVar>{{"RANK", std::to_string(rank)},
                              {"WORLD_SIZE", "3"},
                              {"LOCAL_RANK", std::to_string(rank)},
                              {"LOCAL_WORLD_SIZE", "3"},
                              {"GROUP_RANK", "0"}});
  }
}

TEST_CASE("TorchRankVariables: the host's index from the ranks per host, when Open MPI placed them so") {
  // -H a:2,b:2,c:1 with 5 ranks: rank -> (local rank, local size, host).
  const int layout[5][3] = {{0, 2, 0}, {1, 2, 0}, {0, 2, 1}, {1, 2, 1}, {0, 1, 2}};
  for (int rank = 0; rank < 5; ++rank) {
    INFO("rank " << rank);
    std::map<std::string, std::string> env = RankEnv(rank, 5, layout[rank][0], layout[rank][1]);
    env[kHostRanksVariable] = "2,2,1";
    std::vector<EnvVar> vars = TorchRankVariables(FakeRankEnv(env));
    REQUIRE(vars.size() == 5);
    CHECK(vars[4] == EnvVar{"GROUP_RANK", std::to_string(layout[rank][2])});
  }
  // Placed otherwise (--map-by node in --mpi-args): rank 1 is local rank 0
  // of host b, not in host a's block: no GROUP_RANK rather than a wrong one.
  std::map<std::string, std::string> by_node = RankEnv(1, 4, 0, 2);
  by_node[kHostRanksVariable] = "2,2";
  std::vector<EnvVar> vars = TorchRankVariables(FakeRankEnv(by_node));
  CHECK(vars.size() == 4);
  by_node[kHostRanksVariable] = "2,x";
  CHECK(TorchRankVariables(FakeRankEnv(by_node)).size() == 4);
}

TEST_CASE("TorchRankVariables: the user's values win; without Open MPI's variables, nothing") {
  std::map<std::string, std::string> env = RankEnv(1, 2, 1, 2);
  env["RANK"] = "7";
  env["LOCAL_RANK"] = "";
  CHECK(TorchRankVariables(FakeRankEnv(env)) ==
        std::vector<EnvVar>{{"WORLD_SIZE", "2"}, {"LOCAL_WORLD_SIZE", "2"}, {"GROUP_RANK", "0"}});
  CHECK(TorchRankVariables(FakeRankEnv({})).empty());
}

}  // namespace
}  // namespace accord::launcher
