// accordrun's command line: what the user asked for, checked and turned into
// plain values (docs/launcher.md describes every flag).
//
// ParseCommandLine is pure apart from `read_file` (used for --hostfile), so
// tests call it with any arguments and a fake file reader. Any thread may
// call it.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "accord/status.h"
#include "hosts.h"
#include "remote.h"
#include "tuning.h"

namespace accord::launcher {

inline constexpr double kDefaultStartTimeoutSeconds = 30;
inline constexpr double kDefaultElasticTimeoutSeconds = 600;

// Elastic mode (docs/elastic.md): asked for with --host-discovery-script or
// --min-np.
struct ElasticOptions {
  int min_np = 1;                // --min-np; default: -np, else 1
  std::optional<int> max_np;     // --max-np; absent: as many as the hosts offer
  std::string discovery_script;  // --host-discovery-script; empty: the -H/--hostfile hosts, fixed
  int slots_per_host = 1;        // --slots-per-host: for discovered hosts given without slots
  double timeout_s =
      kDefaultElasticTimeoutSeconds;  // --elastic-timeout, ACCORD_ELASTIC_TIMEOUT, HOROVOD_ELASTIC_TIMEOUT
  std::optional<int> reset_limit;     // --reset-limit; absent: no limit
  // --blacklist-cooldown-range MIN MAX: a failed host returns after MIN s,
  // doubling with each further failure up to MAX s; absent: never.
  std::optional<std::pair<double, double>> cooldown_s;
  std::string spill_dir;  // --elastic-spill-dir; empty: /dev/shm, else the temporary directory
};

// What the user asked for when the action is kRun.
struct LaunchOptions {
  std::optional<int> np;              // -np; absent: the total slots of the hosts
  std::vector<HostSlots> hosts;       // -H or --hostfile; empty: this host only
  std::string hosts_origin;           // "-H" or "--hostfile FILE", for messages
  RemoteOptions remote;               // how mpirun reaches the hosts (ssh, interfaces)
  std::vector<std::string> env_args;  // -x values as given: NAME or NAME=VALUE
  std::vector<std::string> mpi_args;  // --mpi-args, split into words
  std::string output_dir;             // --output-filename; empty: none
  double start_timeout_s = kDefaultStartTimeoutSeconds;
  bool verbose = false;
  bool dry_run = false;
  bool report_bindings = false;           // --report-bindings
  TuningResult tuning;                    // from the tuning flags
  std::optional<ElasticOptions> elastic;  // elastic mode
  std::vector<std::string> command;       // the program and its arguments
};

enum class Action {
  kRun,         // start the job (or print its command, with --dry-run)
  kHelp,        // print `text`
  kVersion,     // print the version
  kCheckBuild,  // print what this build has
};

struct CommandLine {
  Action action = Action::kRun;
  std::string text;  // the help text, for kHelp
  LaunchOptions options;
};

// Reads a whole file, or says why it cannot.
using ReadFileFn = std::function<Result<std::string>(const std::string& path)>;

// Reads an environment variable; nullptr when unset. Tests pass their own.
using GetEnvFn = std::function<const char*(const char* name)>;

// Parses accordrun's arguments (without argv[0]). Options come first; the
// first word that is not an option (or everything after `--`) starts the
// program to run, whose arguments accordrun never reads. Every error is an
// InvalidArgument Status whose message names the flag and what was expected.
// `get_env` gives the defaults that variables set (ACCORD_ELASTIC_TIMEOUT).
Result<CommandLine> ParseCommandLine(
    const std::vector<std::string>& args, const ReadFileFn& read_file,
    const GetEnvFn& get_env = [](const char*) -> const char* { return nullptr; });

// True for a valid environment variable name ([A-Za-z_][A-Za-z0-9_]*).
bool ValidEnvName(const std::string& name);

}  // namespace accord::launcher
