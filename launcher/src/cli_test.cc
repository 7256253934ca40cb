// Tests for ParseCommandLine: every flag, where the program starts, and every
// kind of bad input.
#include "cli.h"

#include <catch2/catch.hpp>

#include <map>

namespace accord::launcher {
namespace {

using Args = std::vector<std::string>;

std::map<std::string, std::string> g_files = {
    {"hosts.txt", "# two nodes\nnode1 slots=4\n\nnode2 slots=2 # small\n"},
    {"bad_hosts.txt", "node1 slots=4\nnode2 slots=two\n"},
};

Result<std::string> FakeRead(const std::string& path) {
  auto it = g_files.find(path);
  if (it == g_files.end()) return Status::InvalidArgument("No such file or directory");
  return it->second;
}

CommandLine MustParse(const Args& args) {
  Result<CommandLine> parsed = ParseCommandLine(args, FakeRead);
  INFO("ParseCommandLine failed: " << parsed.status());
  REQUIRE(parsed.ok());
  return *parsed;
}

LaunchOptions MustParseRun(const Args& args) {
  CommandLine parsed = MustParse(args);
  REQUIRE(parsed.action == Action::kRun);
  return parsed.options;
}

std::string ParseError(const Args& args) {
  Result<CommandLine> parsed = ParseCommandLine(args, FakeRead);
  REQUIRE_FALSE(parsed.ok());
  CHECK(parsed.status().code() == StatusCode::kInvalidArgument);
  return parsed.status().message();
}

TEST_CASE("-np N PROGRAM ARGS: options first, then the program") {
  LaunchOptions options = MustParseRun({"-np", "4", "python", "train.py"});
  CHECK(options.np == 4);
  CHECK(options.command == Args{"python", "train.py"});
  CHECK(options.hosts.empty());
  CHECK_FALSE(options.verbose);
  CHECK_FALSE(options.dry_run);
  CHECK(options.start_timeout_s == kDefaultStartTimeoutSeconds);
  CHECK(options.tuning.env.empty());

  CHECK(MustParseRun({"-np=3", "prog"}).np == 3);
  CHECK(MustParseRun({"--np", "5", "prog"}).np == 5);
  CHECK(MustParseRun({"--num-proc=6", "prog"}).np == 6);
}

TEST_CASE("The program's own arguments are never read, even when they look like accordrun's") {
  LaunchOptions options =
      MustParseRun({"-np", "2", "--verbose", "python", "-u", "train.py", "-np", "5", "-x", "A", "--dry-run"});
  CHECK(options.np == 2);
  CHECK(options.verbose);
  CHECK_FALSE(options.dry_run);
  CHECK(options.env_args.empty());
  CHECK(options.command == Args{"python", "-u", "train.py", "-np", "5", "-x", "A", "--dry-run"});

  LaunchOptions after_dashes = MustParseRun({"-np", "2", "--", "--odd-program", "x"});
  CHECK(after_dashes.command == Args{"--odd-program", "x"});
}

TEST_CASE("-H and --hostfile give hosts and slots; -np defaults to all slots") {
  LaunchOptions options = MustParseRun({"-np", "8", "-H", "host1:4,host2:4", "python", "train.py"});
  REQUIRE(options.hosts.size() == 2);
  CHECK(options.hosts[1].name == "host2");
  CHECK(options.hosts_origin == "-H");

  LaunchOptions all_slots = MustParseRun({"-H", "host1:4,host2:2", "prog"});
  CHECK_FALSE(all_slots.np.has_value());

  LaunchOptions from_file = MustParseRun({"--hostfile", "hosts.txt", "-np", "6", "prog"});
  REQUIRE(from_file.hosts.size() == 2);
  CHECK(from_file.hosts[0].slots == 4);
  CHECK(from_file.hosts[1].slots == 2);
  CHECK(from_file.hosts_origin == "--hostfile hosts.txt");
}

TEST_CASE("-x forwards or sets variables, repeatable, joined or separate") {
  LaunchOptions options = MustParseRun({"-np", "2", "-x", "A=1", "-x", "B", "-xC=x y", "--env", "D=", "prog"});
  CHECK(options.env_args == Args{"A=1", "B", "C=x y", "D="});
  CHECK(options.command == Args{"prog"});
}

TEST_CASE("--mpi-args is split like a shell would; repeated ones add up") {
  LaunchOptions options = MustParseRun({"-np", "2", "--mpi-args", "--mca plm_rsh_args '-p 2222' --bind-to none",
                                        "--mpi-args=--report-bindings", "prog"});
  CHECK(options.mpi_args == Args{"--mca", "plm_rsh_args", "-p 2222", "--bind-to", "none", "--report-bindings"});
}

TEST_CASE("--output-filename, --start-timeout, --verbose, --dry-run") {
  LaunchOptions options = MustParseRun(
      {"-np", "2", "--output-filename", "logs", "--start-timeout", "2.5", "--verbose", "--dry-run", "prog"});
  CHECK(options.output_dir == "logs");
  CHECK(options.start_timeout_s == 2.5);
  CHECK(options.verbose);
  CHECK(options.dry_run);
  CHECK_FALSE(options.report_bindings);
  CHECK(MustParseRun({"-np", "2", "--report-bindings", "prog"}).report_bindings);
}

TEST_CASE("Tuning flags become ACCORD_* variables; --mpi is accepted") {
  LaunchOptions options =
      MustParseRun({"-np", "2", "--mpi", "--fusion-threshold-mb", "32", "--cycle-time-ms=5", "--cache-capacity", "0",
                    "--log-level", "info", "--autotune", "--autotune-warmup-samples", "2", "prog"});
  std::vector<EnvVar> expected = {{"ACCORD_FUSION_THRESHOLD", "33554432"},
                                  {"ACCORD_CYCLE_TIME_MS", "5"},
                                  {"ACCORD_CACHE_CAPACITY", "0"},
                                  {"ACCORD_LOG_LEVEL", "info"},
                                  {"ACCORD_AUTOTUNE", "1"},
                                  {"ACCORD_AUTOTUNE_WARMUP_SAMPLES", "2"}};
  CHECK(options.tuning.env == expected);
  CHECK(options.tuning.notes.empty());  // autotuning is built: no note
}

TEST_CASE("--help, --version and --check-build need no program") {
  CommandLine help = MustParse({"--help"});
  CHECK(help.action == Action::kHelp);
  for (const TuningFlag& flag : TuningFlags()) {
    INFO(flag.flag);
    CHECK(help.text.find(flag.flag) != std::string::npos);
    CHECK(help.text.find(flag.variable) != std::string::npos);
  }
  for (const char* flag : {"--np", "-H", "--hostfile", "-x", "--mpi-args", "--output-filename", "--start-timeout",
                           "--verbose", "--dry-run", "--check-build", "--version", "--network-interfaces", "--ssh-port",
                           "--ssh-identity-file", "--rsh-agent"}) {
    INFO(flag);
    CHECK(help.text.find(flag) != std::string::npos);
  }
  CHECK(help.text.find("--gloo") == std::string::npos);  // refused flags stay out of the help
  CHECK(MustParse({"-h"}).action == Action::kHelp);
  CHECK(MustParse({"--version"}).action == Action::kVersion);
  CHECK(MustParse({"--check-build"}).action == Action::kCheckBuild);
}

TEST_CASE("Bad -np values are refused") {
  CHECK(ParseError({"-np", "0", "prog"}) == "-np must be at least 1 (got 0)");
  CHECK(ParseError({"-np", "-1", "prog"}) == "-np must be at least 1 (got -1)");
  CHECK(ParseError({"-np=-4", "prog"}) == "-np must be at least 1 (got -4)");
  CHECK(ParseError({"-np", "two", "prog"}) == "-np \"two\" is not a whole number");
  CHECK(ParseError({"-np", "2.5", "prog"}) == "-np \"2.5\" is not a whole number");
  CHECK(ParseError({"-np", "99999999999999", "prog"}) ==
        "-np 99999999999999 is more processes than accordrun will start");
  CHECK(ParseError({"-np", "99999999999999999999999", "prog"}) ==
        "-np \"99999999999999999999999\" is not a whole number");
  CHECK(ParseError({"-np"}) == "-np needs a value");
  CHECK(ParseError({"python", "train.py"}) ==
        "-np is required: the number of processes to start, e.g. accordrun -np 2 python train.py");
  CHECK(ParseError({"-np", "2", "-np", "3", "prog"}).find("--np") != std::string::npos);
}

TEST_CASE("-np larger than the slots of -H or the hostfile is refused") {
  CHECK(ParseError({"-np", "9", "-H", "host1:4,host2:4", "prog"}) ==
        "-np 9 is more than the 8 slots that -H offers (host1:4,host2:4); lower -np or add slots");
  CHECK(ParseError({"-np", "7", "--hostfile", "hosts.txt", "prog"}) ==
        "-np 7 is more than the 6 slots that --hostfile hosts.txt offers (node1:4,node2:2); lower -np or add slots");
}

TEST_CASE("Malformed -H and hostfiles are refused") {
  CHECK(ParseError({"-np", "2", "-H", "host1:4,,host2", "prog"}).find("an entry is empty") != std::string::npos);
  CHECK(ParseError({"-np", "2", "-H", "host1:zero", "prog"}).find("must be a whole number") != std::string::npos);
  CHECK(ParseError({"-np", "2", "-H", "", "prog"}) == "-H is given an empty value");
  CHECK(ParseError({"-np", "2", "-H", " ", "prog"}).find("-H is empty") == 0);
  CHECK(ParseError({"-np", "2", "--hostfile", "bad_hosts.txt", "prog"}) ==
        "hostfile bad_hosts.txt line 2 \"node2 slots=two\": slots must be a whole number from 1 to 1048576");
  CHECK(ParseError({"-np", "2", "--hostfile", "missing.txt", "prog"}) ==
        "cannot read hostfile missing.txt: No such file or directory");
  CHECK(ParseError({"-np", "2", "-H", "a:1,b:1", "--hostfile", "hosts.txt", "prog"}) ==
        "give -H or --hostfile, not both");
}

TEST_CASE("Unknown flags, refused horovodrun flags and bad values are refused") {
  CHECK(ParseError({"-np", "2", "--bogus", "prog"}) == "unknown option --bogus (accordrun --help lists the options)");
  CHECK(ParseError({"--fusion-threshold", "64", "-np", "2", "prog"}).find("unknown option --fusion-threshold") == 0);
  CHECK(ParseError({"-np", "2", "--gloo", "prog"}) ==
        "--gloo is not supported: accord runs on MPI only (Open MPI's mpirun); drop --gloo");
  CHECK(ParseError({"-np", "2", "--max-np", "4", "prog"}) ==
        "--max-np is for elastic mode: give --host-discovery-script or --min-np too");
  CHECK(ParseError({"-np", "2", "-x", "1A=2", "prog"}) ==
        "-x \"1A=2\": \"1A\" is not a valid environment variable name (letters, digits and _, not starting "
        "with a digit)");
  CHECK(ParseError({"-np", "2", "-x", "=v", "prog"}).find("is not a valid environment variable name") !=
        std::string::npos);
  CHECK(ParseError({"-np", "2", "-x", "A-B", "prog"}).find("\"A-B\" is not a valid") != std::string::npos);
  CHECK(ParseError({"-np", "2", "--mpi-args", "--mca x 'y", "prog"}) ==
        "--mpi-args \"--mca x 'y\": a ' quote is not closed");
  CHECK(ParseError({"-np", "2", "--start-timeout", "0", "prog"}).find("--start-timeout \"0\" is not valid") == 0);
  CHECK(ParseError({"-np", "2", "--start-timeout", "soon", "prog"}).find("is not valid") != std::string::npos);
  CHECK(ParseError({"-np", "2", "--output-filename", "", "prog"}) == "--output-filename is given an empty value");
  CHECK(ParseError({"-np", "2", "--output-filename=", "prog"}) == "--output-filename is given an empty value");
  CHECK(ParseError({"-np", "2", "-x", "", "prog"}) == "-x is given an empty value");
  CHECK(ParseError({"-np=", "2", "prog"}) == "-np is given an empty value");
  CHECK(ParseError({"-np", "2", "--fusion-threshold-mb", "-3", "prog"}).find("--fusion-threshold-mb \"-3\"") == 0);
  CHECK(ParseError({"-np", "2", "--autotune-log-file", "x", "prog"}) == "--autotune-log-file needs --autotune");
  CHECK(ParseError({"-np", "2", "--verbose=maybe", "prog"}).find("verbose") != std::string::npos);
}

TEST_CASE("Other hosts: --network-interfaces, --ssh-port, --ssh-identity-file, --rsh-agent") {
  LaunchOptions options =
      MustParseRun({"-H", "h1:2,h2:2", "--network-interfaces", "eth0,10.77.0.0/24", "--ssh-port", "2222",
                    "--ssh-identity-file", "~/.ssh/cluster", "--rsh-agent", "/opt/bed/netns-rsh", "prog"});
  CHECK(options.remote.network_interfaces == Args{"eth0", "10.77.0.0/24"});
  CHECK(options.remote.ssh_port == 2222);
  CHECK(options.remote.ssh_identity_file == "~/.ssh/cluster");
  CHECK(options.remote.rsh_agent == "/opt/bed/netns-rsh");

  // horovodrun's short forms and its singular --network-interface.
  LaunchOptions short_forms = MustParseRun({"-np", "2", "-p", "22", "-i", "key", "--network-interface=ib0", "prog"});
  CHECK(short_forms.remote.ssh_port == 22);
  CHECK(short_forms.remote.ssh_identity_file == "key");
  CHECK(short_forms.remote.network_interfaces == Args{"ib0"});
  CHECK(MustParseRun({"-np", "2", "-p2222", "prog"}).remote.ssh_port == 2222);

  CHECK(MustParseRun({"-np", "2", "prog"}).remote.empty());
}

TEST_CASE("Bad values for the other-host flags are refused") {
  CHECK(ParseError({"-np", "2", "--ssh-port", "ssh", "prog"}) ==
        "--ssh-port \"ssh\" is not valid: expected a port number from 1 to 65535");
  CHECK(ParseError({"-np", "2", "-p", "70000", "prog"}).find("--ssh-port \"70000\" is not valid") == 0);
  CHECK(ParseError({"-np", "2", "--ssh-port", "prog"}).find("--ssh-port \"prog\" is not valid") == 0);
  CHECK(ParseError({"-np", "2", "--network-interfaces", "10.0.0.1", "prog"}).find("is an address, not a subnet") !=
        std::string::npos);
  CHECK(ParseError({"-np", "2", "--network-interfaces", "eth0,", "prog"}).find("an entry is empty") !=
        std::string::npos);
  CHECK(ParseError({"-np", "2", "--ssh-identity-file", "my key", "prog"}).find("splits this setting at spaces") !=
        std::string::npos);
  CHECK(ParseError({"-np", "2", "--rsh-agent", "", "prog"}) == "--rsh-agent is given an empty value");
  CHECK(ParseError({"-np", "2", "--rsh-agent"}) == "--rsh-agent needs a value");
}

TEST_CASE("A run needs a program") {
  CHECK(ParseError({"-np", "2"}) ==
        "no program to run: give it after the options, e.g. accordrun -np 2 python train.py");
  CHECK(ParseError({"-np", "2", "--"}).find("no program to run") == 0);
}

TEST_CASE("Elastic mode: its flags, their defaults and their checks") {
  LaunchOptions plain = MustParseRun({"-np", "2", "prog"});
  CHECK_FALSE(plain.elastic);

  LaunchOptions options =
      MustParseRun({"--host-discovery-script", "./discover.sh", "--min-np", "2", "--max-np", "4", "--slots-per-host",
                    "2", "--elastic-timeout", "30", "--reset-limit", "3", "--blacklist-cooldown-range", "5", "60",
                    "--elastic-spill-dir", "/scratch", "python", "train.py"});
  REQUIRE(options.elastic);
  const ElasticOptions& e = *options.elastic;
  CHECK(e.discovery_script == "./discover.sh");
  CHECK(e.min_np == 2);
  CHECK(e.max_np == 4);
  CHECK(e.slots_per_host == 2);
  CHECK(e.timeout_s == 30);
  CHECK(e.reset_limit == 3);
  REQUIRE(e.cooldown_s);
  CHECK(e.cooldown_s->first == 5);
  CHECK(e.cooldown_s->second == 60);
  CHECK(e.spill_dir == "/scratch");
  CHECK_FALSE(options.np);
  CHECK(options.command == Args{"python", "train.py"});

  // --min-np alone is elastic mode over fixed hosts; -np gives --min-np's default.
  LaunchOptions fixed = MustParseRun({"-np", "3", "-H", "a:2,b:2", "--max-np", "4", "--slots", "2", "--min-np=2", "p"});
  REQUIRE(fixed.elastic);
  CHECK(fixed.elastic->min_np == 2);
  CHECK(fixed.elastic->discovery_script.empty());
  CHECK(MustParseRun({"-np", "3", "--host-discovery-script", "d", "p"}).elastic->min_np == 3);
  CHECK(MustParseRun({"--host-discovery-script", "d", "p"}).elastic->min_np == 1);
  // Neither -np nor hosts: the script names the hosts as the job runs (and
  // what follows the program is the program's, -np included).
  LaunchOptions scripted = MustParseRun({"--host-discovery-script", "d", "p", "-np", "3"});
  CHECK(!scripted.np);
  CHECK(scripted.hosts.empty());
  CHECK(scripted.command == std::vector<std::string>{"p", "-np", "3"});
  CHECK(MustParseRun({"--host-discovery-script", "d", "p"}).elastic->timeout_s == kDefaultElasticTimeoutSeconds);

  // The timeout's variables, the flag first.
  auto env = [](const char* name) -> const char* {
    return std::string(name) == "HOROVOD_ELASTIC_TIMEOUT" ? "45" : nullptr;
  };
  Result<CommandLine> from_env = ParseCommandLine({"--host-discovery-script", "d", "p"}, FakeRead, env);
  REQUIRE(from_env.ok());
  CHECK(from_env->options.elastic->timeout_s == 45);
  auto both = [](const char* name) -> const char* {
    return std::string(name) == "ACCORD_ELASTIC_TIMEOUT" ? "12" : "45";
  };
  CHECK(ParseCommandLine({"--host-discovery-script", "d", "p"}, FakeRead, both)->options.elastic->timeout_s == 12);
  CHECK(ParseCommandLine({"--host-discovery-script", "d", "--elastic-timeout", "7", "p"}, FakeRead, both)
            ->options.elastic->timeout_s == 7);

  CHECK(ParseError({"--host-discovery-script", "d", "-H", "a,b", "p"}) ==
        "give --host-discovery-script or -H, not both: in elastic mode the script says which hosts there are");
  CHECK(ParseError({"--min-np", "3", "--max-np", "2", "-H", "a:4", "p"}) == "--max-np 2 is below --min-np 3");
  CHECK(ParseError({"-np", "5", "--min-np", "2", "--max-np", "4", "-H", "a:8", "p"}) ==
        "-np 5 is outside --min-np 2 .. --max-np 4");
  CHECK(ParseError({"--min-np", "0", "p"}) == "--min-np \"0\" is not valid: expected a whole number of at least 1");
  CHECK(ParseError({"--min-np", "2", "--elastic-timeout", "0", "p"}).find("--elastic-timeout \"0\" is not valid") == 0);
  CHECK(ParseError({"--min-np", "2", "--blacklist-cooldown-range", "9", "3", "p"}) ==
        "--blacklist-cooldown-range: MAX 3 is below MIN 9");
  CHECK(ParseError({"--min-np", "2", "--blacklist-cooldown-range", "9", "p"}).find("--blacklist-cooldown-range") !=
        std::string::npos);
  CHECK(ParseError({"-np", "2", "--reset-limit", "3", "p"}) ==
        "--reset-limit is for elastic mode: give --host-discovery-script or --min-np too");
  auto bad_env = [](const char*) -> const char* { return "soon"; };
  Result<CommandLine> bad = ParseCommandLine({"--min-np", "1", "p"}, FakeRead, bad_env);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message().find("ACCORD_ELASTIC_TIMEOUT \"soon\" is not valid") == 0);
}

}  // namespace
}  // namespace accord::launcher
