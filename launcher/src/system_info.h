// Facts about this machine and small process helpers for accordrun's main
// thread: the SystemInfo that PlanLaunch needs, reading a file, and running a
// short command to capture its output.
#pragma once

#include <string>
#include <vector>

#include "accord/status.h"
#include "plan.h"

namespace accord::launcher {

// Gathers the SystemInfo of the running process.
SystemInfo GatherSystemInfo();

FileKind GetFileKind(const std::string& path);

Result<std::string> ReadTextFile(const std::string& path);

struct CommandOutput {
  int exit_status = 0;  // 128 + signal number when killed
  std::string output;   // stdout and stderr together
};

// Runs argv (argv[0] a path or a name found in PATH) with stdin closed and
// returns its output; kills it after timeout_s seconds (an error).
Result<CommandOutput> RunAndCapture(const std::vector<std::string>& argv, double timeout_s);

}  // namespace accord::launcher
