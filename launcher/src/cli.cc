#include "cli.h"

#include <CLI/CLI.hpp>

#include <cctype>
#include <charconv>
#include <cmath>
#include <map>

#include "shell_words.h"

namespace accord::launcher {
namespace {

// horovodrun flags that accord does not have, with what to do instead. They
// are refused with this message rather than reported as unknown.
struct RefusedFlag {
  const char* names;  // CLI11 name list
  const char* shown;  // the name in the message
  bool takes_value;
  const char* reason;
};

const RefusedFlag kRefusedFlags[] = {
    {"--gloo", "--gloo", false, "accord runs on MPI only (Open MPI's mpirun); drop --gloo"},
    {"--config-file", "--config-file", true, "accordrun has no config file; give the flags on the command line"},
    {"--autotune-gaussian-process-noise", "--autotune-gaussian-process-noise", true,
     "accord's autotuning will not take this option"},
};

// The values of every option, as text; checked after CLI11 has parsed.
struct RawOptions {
  std::string np;
  std::string hosts;
  std::string hostfile;
  std::vector<std::string> env;
  std::vector<std::string> mpi_args;
  std::string output_dir;
  std::string start_timeout;
  std::string network_interfaces;
  std::string ssh_port;
  std::string ssh_identity_file;
  std::string rsh_agent;
  bool verbose = false;
  bool dry_run = false;
  bool report_bindings = false;
  bool check_build = false;
  bool version = false;
  bool mpi = false;
  std::map<std::string, std::string> tuning;    // flag -> text
  std::map<std::string, bool> tuning_switches;  // flag -> given
  std::string min_np;
  std::string max_np;
  std::string discovery_script;
  std::string slots_per_host;
  std::string elastic_timeout;
  std::string reset_limit;
  std::vector<std::string> cooldown;
  std::string spill_dir;
  std::map<std::string, std::string> refused;  // flag -> value
  std::map<std::string, bool> refused_switches;
};

// CLI11's help, with the program and its arguments in the usage line.
class HelpFormatter : public CLI::Formatter {
 public:
  std::string make_usage(const CLI::App* /*app*/, std::string name) const override {
    return "Usage: " + name + " [OPTIONS] PROGRAM [ARGS...]\n";
  }
};

void BuildApp(CLI::App& app, RawOptions& raw) {
  app.description(
      "accordrun starts a data-parallel job under Open MPI's mpirun, one process (rank) per slot, "
      "and sets accord's configuration for every rank.");
  app.footer(
      "Examples:\n"
      "  accordrun -np 4 python train.py\n"
      "  accordrun -np 8 -H host1:4,host2:4 python train.py\n"
      "  accordrun --hostfile hosts --network-interfaces eth0 --ssh-port 2222 python train.py\n"
      "  accordrun -np 2 --fusion-threshold-mb 32 -x NCCL_DEBUG=INFO python train.py\n"
      "  accordrun --check-build\n"
      "docs/launcher.md describes every flag and the ACCORD_* variable it sets.");
  app.set_help_flag("-h,--help", "Print this help and exit");
  auto formatter = std::make_shared<HelpFormatter>();
  formatter->column_width(44);
  app.formatter(formatter);

  const char* job = "Job";
  app.add_option("--np,--num-proc", raw.np,
                 "Number of processes (written -np too); default: the slots of -H/--hostfile")
      ->option_text("N")
      ->group(job);
  app.add_option("-H,--hosts", raw.hosts, "Hosts and their slots, e.g. host1:4,host2:4 (default: this host)")
      ->option_text("HOSTS")
      ->group(job);
  app.add_option("--hostfile", raw.hostfile, "File of 'host slots=N' lines (# comments allowed)")
      ->option_text("FILE")
      ->group(job);
  app.add_option("-x,--env", raw.env, "Set NAME=VALUE, or forward NAME, for every rank (repeatable)")
      ->option_text("NAME[=VALUE]")
      ->allow_extra_args(false)
      ->take_all()
      ->group(job);
  app.add_option("--mpi-args", raw.mpi_args, "Extra arguments for mpirun, quoted as one word")
      ->option_text("\"ARGS\"")
      ->allow_extra_args(false)
      ->take_all()
      ->group(job);
  app.add_option("--output-filename", raw.output_dir, "Write each rank's stdout and stderr under DIR/1/rank.N/ as well")
      ->option_text("DIR")
      ->group(job);
  app.add_option("--start-timeout", raw.start_timeout,
                 "Stop the job if not every rank has started within SECONDS (default 30)")
      ->option_text("SECONDS")
      ->group(job);

  const char* hosts = "Other hosts (mpirun starts them with ssh; see docs/launcher.md)";
  app.add_option("--network-interfaces,--network-interface", raw.network_interfaces,
                 "Interfaces or IPv4 subnets for MPI's traffic between hosts, e.g. eth0 or 10.0.0.0/24; sets "
                 "btl_tcp_if_include and oob_tcp_if_include")
      ->option_text("IF[,IF]")
      ->group(hosts);
  app.add_option("-p,--ssh-port", raw.ssh_port, "Port of the hosts' ssh servers; sets plm_rsh_args")
      ->option_text("PORT")
      ->group(hosts);
  app.add_option("-i,--ssh-identity-file", raw.ssh_identity_file, "ssh private key for the hosts; sets plm_rsh_args")
      ->option_text("FILE")
      ->group(hosts);
  app.add_option("--rsh-agent", raw.rsh_agent,
                 "Program that starts commands on the hosts in place of ssh (e.g. the test bed's netns-rsh); "
                 "sets plm_rsh_agent")
      ->option_text("PATH")
      ->group(hosts);
  app.add_flag("--verbose", raw.verbose, "Print the mpirun command and progress of the start")->group(job);
  app.add_flag("--dry-run", raw.dry_run, "Print the mpirun command and exit without running it")->group(job);
  app.add_flag("--report-bindings", raw.report_bindings,
               "Each rank says on stderr, before its program starts, the CPUs it may run on and its "
               "OMP_NUM_THREADS")
      ->group(job);
  app.add_flag("--check-build", raw.check_build,
               "Print the frameworks, controllers and backends of this build and exit")
      ->group(job);
  app.add_flag("--version", raw.version, "Print accordrun's version and exit")->group(job);
  app.add_flag("--mpi", raw.mpi, "Use MPI (always the case; accepted for horovodrun scripts)")->group("");

  const char* elastic = "Elastic mode (docs/elastic.md): given --host-discovery-script or --min-np";
  app.add_option("--min-np", raw.min_np, "Fewest processes to run with (default: -np, else 1)")
      ->option_text("N")
      ->group(elastic);
  app.add_option("--max-np", raw.max_np, "Most processes to run with (default: as many as the hosts' slots)")
      ->option_text("N")
      ->group(elastic);
  app.add_option("--host-discovery-script", raw.discovery_script,
                 "Program that prints the available hosts, one 'host[:slots]' per line; run every second")
      ->option_text("PATH")
      ->group(elastic);
  app.add_option("--slots-per-host,--slots", raw.slots_per_host,
                 "Slots of a discovered host printed without ':slots' (default 1)")
      ->option_text("N")
      ->group(elastic);
  app.add_option("--elastic-timeout", raw.elastic_timeout,
                 "Seconds to wait for --min-np slots before the job fails (default 600, or ACCORD_ELASTIC_TIMEOUT)")
      ->option_text("SECONDS")
      ->group(elastic);
  app.add_option("--reset-limit", raw.reset_limit, "Fail the job after this many resets (default: no limit)")
      ->option_text("N")
      ->group(elastic);
  app.add_option("--blacklist-cooldown-range", raw.cooldown,
                 "A failed host returns after MIN s, doubling with each failure up to MAX s (default: never)")
      ->option_text("MIN MAX")
      ->expected(2)
      ->group(elastic);
  app.add_option("--elastic-spill-dir", raw.spill_dir,
                 "Directory on every host for the committed state between generations (default /dev/shm)")
      ->option_text("DIR")
      ->group(elastic);

  const char* tuning = "Tuning (each sets an ACCORD_* variable for every rank)";
  for (const TuningFlag& flag : TuningFlags()) {
    std::string help = flag.help;
    if (!flag.feature.empty()) help += " [not built yet: no effect]";
    help += "; sets " + flag.variable;
    if (flag.kind == TuningKind::kSwitch) {
      app.add_flag(flag.flag, raw.tuning_switches[flag.flag], help)->group(tuning);
    } else {
      app.add_option(flag.flag, raw.tuning[flag.flag], help + "; default " + flag.default_text)
          ->option_text(flag.value_name)
          ->group(tuning);
    }
  }
  for (const RefusedFlag& flag : kRefusedFlags) {
    std::string key = flag.names;
    if (flag.takes_value) {
      app.add_option(flag.names, raw.refused[key])->group("");
    } else {
      app.add_flag(flag.names, raw.refused_switches[key])->group("");
    }
  }
}

// Finds the end of accordrun's own options: returns the tokens for CLI11 (each
// option with its value joined, "--name=value" or "-xvalue", so that values
// starting with '-' are not mistaken for options) and the program's words.
Status SplitArguments(CLI::App& app, const std::vector<std::string>& args, std::vector<std::string>* options,
                      std::vector<std::string>* command) {
  size_t i = 0;
  while (i < args.size()) {
    std::string token = args[i];
    if (token == "--") {
      command->assign(args.begin() + static_cast<long>(i) + 1, args.end());
      return Status::OK();
    }
    if (token.size() < 2 || token[0] != '-') break;  // the program starts here
    // horovodrun (and mpirun) spell the process count -np.
    if (token == "-np" || token.rfind("-np=", 0) == 0) token = "-" + token;
    ++i;
    bool is_long = token.rfind("--", 0) == 0;
    std::string name = is_long ? token.substr(0, token.find('=')) : token.substr(0, 2);
    bool has_inline_value = is_long ? token.find('=') != std::string::npos : token.size() > 2;
    const CLI::Option* option = app.get_option_no_throw(name);
    bool takes_value = option != nullptr && option->get_items_expected_min() > 0;
    std::string shown = name == "--np" ? "-np" : name;
    if (takes_value && has_inline_value && token.size() == name.size() + (is_long ? 1 : 0)) {
      return Status::InvalidArgument(shown + " is given an empty value");  // "--name=" or "-x" + ""
    }
    if (!takes_value || has_inline_value) {
      options->push_back(token);  // a flag, an unknown option (CLI11 reports it), or name=value
      continue;
    }
    if (i == args.size()) return Status::InvalidArgument(shown + " needs a value");
    if (args[i].empty()) return Status::InvalidArgument(shown + " is given an empty value");
    if (option->get_items_expected_min() == 2) {  // --blacklist-cooldown-range MIN MAX
      if (i + 1 == args.size()) return Status::InvalidArgument(shown + " needs two values");
      options->insert(options->end(), {token, args[i], args[i + 1]});
      i += 2;
      continue;
    }
    options->push_back(is_long ? token + "=" + args[i] : token + args[i]);
    ++i;
  }
  command->assign(args.begin() + static_cast<long>(i), args.end());
  return Status::OK();
}

Result<int> ParseProcessCount(const std::string& text) {
  long long value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc() || end != text.data() + text.size()) {
    return Status::InvalidArgument("-np \"" + text + "\" is not a whole number");
  }
  if (value < 1) {
    return Status::InvalidArgument("-np must be at least 1 (got " + text + ")");
  }
  if (value > (1 << 24)) {
    return Status::InvalidArgument("-np " + text + " is more processes than accordrun will start");
  }
  return static_cast<int>(value);
}

// A whole number of at least `min` for `flag`.
Result<int> ParseCount(const std::string& flag, const std::string& text, int min) {
  long long value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc() || end != text.data() + text.size() || value < min || value > (1 << 24)) {
    return Status::InvalidArgument(flag + " \"" + text + "\" is not valid: expected a whole number of at least " +
                                   std::to_string(min));
  }
  return static_cast<int>(value);
}

// A number of seconds above 0 (or at least 0 with `zero_ok`) for `what`.
Result<double> ParseSeconds(const std::string& what, const std::string& text, bool zero_ok = false) {
  double value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc() || end != text.data() + text.size() || !std::isfinite(value) || value < 0 ||
      (value == 0 && !zero_ok) || value > 1e7) {
    return Status::InvalidArgument(what + " \"" + text + "\" is not valid: expected a number of seconds " +
                                   (zero_ok ? "of at least 0" : "above 0"));
  }
  return value;
}

Result<double> ParseStartTimeout(const std::string& text) {
  double value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc() || end != text.data() + text.size() || !std::isfinite(value) || value <= 0 ||
      value > 1e6) {
    return Status::InvalidArgument("--start-timeout \"" + text +
                                   "\" is not valid: expected a number of seconds above 0 (at most 1000000)");
  }
  return value;
}

Status CheckEnvArg(const std::string& arg) {
  std::string name = arg.substr(0, arg.find('='));
  if (!ValidEnvName(name)) {
    return Status::InvalidArgument("-x \"" + arg + "\": \"" + name +
                                   "\" is not a valid environment variable name (letters, digits and _, "
                                   "not starting with a digit)");
  }
  return Status::OK();
}

// Turns CLI11's exceptions into accordrun's messages.
Status ParseError(const CLI::ParseError& error) {
  std::string what = error.what();
  if (dynamic_cast<const CLI::ExtrasError*>(&error) != nullptr) {
    // "The following argument(s) was/were not expected: --bogus"
    std::string unknown = what.substr(what.find(':') == std::string::npos ? 0 : what.find(':') + 2);
    return Status::InvalidArgument("unknown option " + unknown + " (accordrun --help lists the options)");
  }
  return Status::InvalidArgument(what);
}

// -H or --hostfile, and -np checked against their slots.
Status ReadHosts(const CLI::App& app, const RawOptions& raw, const ReadFileFn& read_file, LaunchOptions* options) {
  bool have_list = app.get_option("-H")->count() > 0;
  bool have_file = app.get_option("--hostfile")->count() > 0;
  if (have_list && have_file) return Status::InvalidArgument("give -H or --hostfile, not both");
  if (have_list) {
    Result<std::vector<HostSlots>> hosts = ParseHostList(raw.hosts);
    if (!hosts.ok()) return hosts.status();
    options->hosts = std::move(*hosts);
    options->hosts_origin = "-H";
  } else if (have_file) {
    Result<std::string> contents = read_file(raw.hostfile);
    if (!contents.ok()) {
      return Status::InvalidArgument("cannot read hostfile " + raw.hostfile + ": " + contents.status().message());
    }
    Result<std::vector<HostSlots>> hosts = ParseHostfile(*contents, raw.hostfile);
    if (!hosts.ok()) return hosts.status();
    options->hosts = std::move(*hosts);
    options->hosts_origin = "--hostfile " + raw.hostfile;
  }

  if (app.get_option("--np")->count() == 0) {
    const bool elastic =
        app.get_option("--host-discovery-script")->count() > 0 || app.get_option("--min-np")->count() > 0;
    if (options->hosts.empty() && !elastic) {
      return Status::InvalidArgument(
          "-np is required: the number of processes to start, e.g. accordrun -np 2 "
          "python train.py");
    }
    return Status::OK();
  }
  Result<int> np = ParseProcessCount(raw.np);
  if (!np.ok()) return np.status();
  options->np = *np;
  int slots = TotalSlots(options->hosts);
  if (!options->hosts.empty() && *np > slots) {
    return Status::InvalidArgument("-np " + std::to_string(*np) + " is more than the " + std::to_string(slots) +
                                   " slots that " + options->hosts_origin + " offers (" +
                                   FormatHostList(options->hosts) + "); lower -np or add slots");
  }
  return Status::OK();
}

// --network-interfaces, --ssh-port, --ssh-identity-file and --rsh-agent.
Status ReadRemoteOptions(const CLI::App& app, const RawOptions& raw, RemoteOptions* remote) {
  if (app.get_option("--network-interfaces")->count() > 0) {
    Result<std::vector<std::string>> interfaces = ParseNetworkInterfaces(raw.network_interfaces);
    if (!interfaces.ok()) return interfaces.status();
    remote->network_interfaces = std::move(*interfaces);
  }
  if (app.get_option("--ssh-port")->count() > 0) {
    Result<int> port = ParseSshPort(raw.ssh_port);
    if (!port.ok()) return port.status();
    remote->ssh_port = *port;
  }
  if (app.get_option("--ssh-identity-file")->count() > 0) {
    ACCORD_RETURN_IF_ERROR(CheckRshWord("--ssh-identity-file", raw.ssh_identity_file));
    remote->ssh_identity_file = raw.ssh_identity_file;
  }
  if (app.get_option("--rsh-agent")->count() > 0) {
    ACCORD_RETURN_IF_ERROR(CheckRshWord("--rsh-agent", raw.rsh_agent));
    remote->rsh_agent = raw.rsh_agent;
  }
  return Status::OK();
}

// The elastic flags; none of them without elastic mode.
Status ReadElasticOptions(const CLI::App& app, const RawOptions& raw, const GetEnvFn& get_env, LaunchOptions* options) {
  auto given = [&](const char* flag) { return app.get_option(flag)->count() > 0; };
  const bool elastic = given("--host-discovery-script") || given("--min-np");
  if (!elastic) {
    for (const char* flag : {"--max-np", "--slots-per-host", "--elastic-timeout", "--reset-limit",
                             "--blacklist-cooldown-range", "--elastic-spill-dir"}) {
      if (given(flag)) {
        return Status::InvalidArgument(std::string(flag) +
                                       " is for elastic mode: give --host-discovery-script or --min-np too");
      }
    }
    return Status::OK();
  }
  ElasticOptions e;
  if (given("--host-discovery-script")) {
    if (!options->hosts.empty()) {
      return Status::InvalidArgument("give --host-discovery-script or " + options->hosts_origin +
                                     ", not both: in elastic mode the script says which hosts there are");
    }
    e.discovery_script = raw.discovery_script;
  }
  if (given("--min-np")) {
    Result<int> min_np = ParseCount("--min-np", raw.min_np, 1);
    if (!min_np.ok()) return min_np.status();
    e.min_np = *min_np;
  } else if (options->np) {
    e.min_np = *options->np;
  }
  if (given("--max-np")) {
    Result<int> max_np = ParseCount("--max-np", raw.max_np, 1);
    if (!max_np.ok()) return max_np.status();
    if (*max_np < e.min_np) {
      return Status::InvalidArgument("--max-np " + raw.max_np + " is below --min-np " + std::to_string(e.min_np));
    }
    e.max_np = *max_np;
  }
  if (options->np && (*options->np < e.min_np || (e.max_np && *options->np > *e.max_np))) {
    return Status::InvalidArgument("-np " + std::to_string(*options->np) + " is outside --min-np " +
                                   std::to_string(e.min_np) + " .. --max-np " +
                                   (e.max_np ? std::to_string(*e.max_np) : std::string("(no limit)")));
  }
  if (given("--slots-per-host")) {
    Result<int> slots = ParseCount("--slots-per-host", raw.slots_per_host, 1);
    if (!slots.ok()) return slots.status();
    e.slots_per_host = *slots;
  }
  if (given("--elastic-timeout")) {
    Result<double> timeout = ParseSeconds("--elastic-timeout", raw.elastic_timeout);
    if (!timeout.ok()) return timeout.status();
    e.timeout_s = *timeout;
  } else {
    for (const char* name : {"ACCORD_ELASTIC_TIMEOUT", "HOROVOD_ELASTIC_TIMEOUT"}) {
      const char* value = get_env(name);
      if (value == nullptr || *value == '\0') continue;
      Result<double> timeout = ParseSeconds(name, value);
      if (!timeout.ok()) return timeout.status();
      e.timeout_s = *timeout;
      break;
    }
  }
  if (given("--reset-limit")) {
    Result<int> limit = ParseCount("--reset-limit", raw.reset_limit, 0);
    if (!limit.ok()) return limit.status();
    e.reset_limit = *limit;
  }
  if (given("--blacklist-cooldown-range")) {
    Result<double> low = ParseSeconds("--blacklist-cooldown-range MIN", raw.cooldown.at(0), /*zero_ok=*/true);
    if (!low.ok()) return low.status();
    Result<double> high = ParseSeconds("--blacklist-cooldown-range MAX", raw.cooldown.at(1), /*zero_ok=*/true);
    if (!high.ok()) return high.status();
    if (*high < *low) {
      return Status::InvalidArgument("--blacklist-cooldown-range: MAX " + raw.cooldown[1] + " is below MIN " +
                                     raw.cooldown[0]);
    }
    e.cooldown_s = std::make_pair(*low, *high);
  }
  if (given("--elastic-spill-dir")) e.spill_dir = raw.spill_dir;
  options->elastic = std::move(e);
  return Status::OK();
}

// Everything but the hosts and the program.
Status ReadJobOptions(const CLI::App& app, const RawOptions& raw, LaunchOptions* options) {
  for (const std::string& arg : raw.env) ACCORD_RETURN_IF_ERROR(CheckEnvArg(arg));
  options->env_args = raw.env;

  for (const std::string& text : raw.mpi_args) {
    Result<std::vector<std::string>> words = SplitShellWords(text);
    if (!words.ok()) {
      return Status::InvalidArgument("--mpi-args \"" + text + "\": " + words.status().message());
    }
    options->mpi_args.insert(options->mpi_args.end(), words->begin(), words->end());
  }
  if (app.get_option("--output-filename")->count() > 0) options->output_dir = raw.output_dir;
  if (app.get_option("--start-timeout")->count() > 0) {
    Result<double> timeout = ParseStartTimeout(raw.start_timeout);
    if (!timeout.ok()) return timeout.status();
    options->start_timeout_s = *timeout;
  }
  options->verbose = raw.verbose;
  options->dry_run = raw.dry_run;
  options->report_bindings = raw.report_bindings;
  ACCORD_RETURN_IF_ERROR(ReadRemoteOptions(app, raw, &options->remote));

  std::vector<std::pair<std::string, std::string>> tuning_given;
  for (const TuningFlag& flag : TuningFlags()) {
    if (app.get_option(flag.flag)->count() == 0) continue;
    tuning_given.push_back({flag.flag, flag.kind == TuningKind::kSwitch ? "" : raw.tuning.at(flag.flag)});
  }
  Result<TuningResult> tuning = TuningEnvironment(tuning_given);
  if (!tuning.ok()) return tuning.status();
  options->tuning = std::move(*tuning);
  return Status::OK();
}

}  // namespace

bool ValidEnvName(const std::string& name) {
  if (name.empty() || std::isdigit(static_cast<unsigned char>(name[0]))) return false;
  for (char c : name) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  }
  return true;
}

Result<CommandLine> ParseCommandLine(const std::vector<std::string>& args, const ReadFileFn& read_file,
                                     const GetEnvFn& get_env) {
  RawOptions raw;
  CLI::App app{"", "accordrun"};
  BuildApp(app, raw);

  std::vector<std::string> option_tokens;
  CommandLine result;
  ACCORD_RETURN_IF_ERROR(SplitArguments(app, args, &option_tokens, &result.options.command));
  try {
    std::vector<std::string> reversed(option_tokens.rbegin(), option_tokens.rend());  // CLI11 wants reversed
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    result.action = Action::kHelp;
    result.text = app.help();
    return result;
  } catch (const CLI::ParseError& error) {
    return ParseError(error);
  }
  for (const RefusedFlag& flag : kRefusedFlags) {
    if (app.get_option(flag.shown)->count() > 0) {
      return Status::InvalidArgument(std::string(flag.shown) + " is not supported: " + flag.reason);
    }
  }
  if (raw.version) {
    result.action = Action::kVersion;
    return result;
  }
  if (raw.check_build) {
    result.action = Action::kCheckBuild;
    return result;
  }
  ACCORD_RETURN_IF_ERROR(ReadHosts(app, raw, read_file, &result.options));
  ACCORD_RETURN_IF_ERROR(ReadJobOptions(app, raw, &result.options));
  ACCORD_RETURN_IF_ERROR(ReadElasticOptions(app, raw, get_env, &result.options));
  if (result.options.command.empty()) {
    return Status::InvalidArgument(
        "no program to run: give it after the options, e.g. accordrun -np 2 python "
        "train.py");
  }
  return result;
}

}  // namespace accord::launcher
