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
  bool report_bindings = false;      // --report-bindings
  TuningResult tuning;               // from the tuning flags
  std::vector<std::string> command;  // the program and its arguments
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

// Parses accordrun's arguments (without argv[0]). Options come first; the
// first word that is not an option (or everything after `--`) starts the
// program to run, whose arguments accordrun never reads. Every error is an
// InvalidArgument Status whose message names the flag and what was expected.
Result<CommandLine> ParseCommandLine(const std::vector<std::string>& args, const ReadFileFn& read_file);

// True for a valid environment variable name ([A-Za-z_][A-Za-z0-9_]*).
bool ValidEnvName(const std::string& name);

}  // namespace accord::launcher
