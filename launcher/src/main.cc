// accordrun: starts a data-parallel job under Open MPI's mpirun.
//
// The work is done by small pieces that tests can call on their own:
// cli.h (the command line), plan.h (the mpirun command), runner.h (running
// it), rank_agent.h (the wrapper around each rank), check_build.h.
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "accord/accord.h"
#include "check_build.h"
#include "cli.h"
#include "elastic_driver.h"
#include "plan.h"
#include "rank_agent.h"
#include "remote.h"
#include "runner.h"
#include "shell_words.h"
#include "system_info.h"

namespace accord::launcher {
namespace {

constexpr int kBadInputStatus = 2;

void Note(const std::string& text) { std::cerr << "accordrun: note: " << text << std::endl; }

int Fail(const Status& status) {
  std::cerr << "accordrun: " << status.message() << std::endl;
  return kBadInputStatus;
}

// mpirun options differ between MPI implementations; accordrun speaks Open MPI's.
Status CheckOpenMpi(const std::string& mpirun) {
  Result<CommandOutput> version = RunAndCapture({mpirun, "--version"}, 30);
  if (!version.ok()) return Status::InvalidArgument(mpirun + " --version: " + version.status().message());
  if (version->output.find("Open MPI") == std::string::npos && version->output.find("OpenRTE") == std::string::npos) {
    std::string first_line = version->output.substr(0, version->output.find('\n'));
    return Status::InvalidArgument(mpirun + " is not Open MPI's mpirun (it says \"" + first_line +
                                   "\"); accordrun needs Open MPI: put its bin directory first in PATH");
  }
  return Status::OK();
}

// `accordrun --free-port [--network-interfaces LIST]`, which the launcher
// runs on rank 0's host when that is another host (plan.h, TorchMaster):
// prints a free TCP port of this host and, with LIST, this host's address
// that LIST prefers.
int PrintFreePort(const std::vector<std::string>& args) {
  Result<int> port = FreeTcpPort();
  if (!port.ok()) return Fail(port.status());
  std::string line = std::to_string(*port);
  if (args.size() == 3 && args[1] == "--network-interfaces") {
    Result<std::vector<std::string>> interfaces = ParseNetworkInterfaces(args[2]);
    if (!interfaces.ok()) return Fail(interfaces.status());
    line += " " + ReachableAddresses(/*remote=*/true, *interfaces).front();
  }
  std::cout << line << std::endl;
  return 0;
}

int Main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (!args.empty() && args[0] == "--rank-agent") {
    return RunRankAgent(std::vector<std::string>(args.begin() + 1, args.end()));
  }
  if (!args.empty() && args[0] == "--free-port") return PrintFreePort(args);

  Result<CommandLine> command_line =
      ParseCommandLine(args, ReadTextFile, [](const char* name) { return std::getenv(name); });
  if (!command_line.ok()) return Fail(command_line.status());
  switch (command_line->action) {
    case Action::kHelp: std::cout << command_line->text; return 0;
    case Action::kVersion: std::cout << "accordrun (accord) " << ACCORD_VERSION_STRING << std::endl; return 0;
    case Action::kCheckBuild: {
      BuildReport report;
      report.version = ACCORD_VERSION_STRING;
      report.core = GetBuildInfo();
      report.libtorch = LibTorchAdapterBuilt();
      report.python = ProbePython(GatherSystemInfo());
      std::cout << FormatBuildReport(report);
      return 0;
    }
    case Action::kRun: break;
  }

  const LaunchOptions& options = command_line->options;
  RunSettings settings;
  settings.start_timeout_s = options.start_timeout_s;
  settings.verbose = options.verbose;
  settings.program = options.command.front();
  if (options.elastic) {
    if (!options.dry_run) {
      Result<std::string> mpirun = FindProgram("mpirun", GatherSystemInfo());
      if (mpirun.ok()) {
        Status open_mpi = CheckOpenMpi(*mpirun);
        if (!open_mpi.ok()) return Fail(open_mpi);
      }
    }
    return RunElasticJob(options, GatherSystemInfo(), settings);
  }
  Result<LaunchPlan> plan = PlanLaunch(options, GatherSystemInfo());
  if (!plan.ok()) return Fail(plan.status());
  for (const std::string& note : plan->notes) Note(note);
  if (options.dry_run || options.verbose) {
    for (const std::string& line : plan->binding) std::cerr << "accordrun: binding: " << line << std::endl;
    for (const std::string& line : plan->torch_lines)
      std::cerr << "accordrun: torch.distributed: " << line << std::endl;
  }
  if (options.dry_run) {
    std::cout << JoinShellWords(plan->argv) << std::endl;
    return 0;
  }
  Status open_mpi = CheckOpenMpi(plan->argv[0]);
  if (!open_mpi.ok()) return Fail(open_mpi);
  if (options.verbose) std::cerr << "accordrun: running " << JoinShellWords(plan->argv) << std::endl;
  return RunJob(*plan, settings);
}

}  // namespace
}  // namespace accord::launcher

int main(int argc, char** argv) { return accord::launcher::Main(argc, argv); }
