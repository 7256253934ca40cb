// Facts about this machine and small process helpers for accordrun's main
// thread: the SystemInfo that PlanLaunch (plan.h) and ProbePython
// (check_build.h) need, reading a file, and running a short command to
// capture its output.
//
// SystemInfo is plain data: GatherSystemInfo fills it from the running
// process, and tests make one up, so that planning never touches the
// machine. The functions below run on accordrun's main thread (they read
// the environment, /proc and /sys, and fork).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "accord/status.h"
#include "topology.h"

namespace accord::launcher {

enum class FileKind { kMissing, kDirectory, kExecutable, kNotExecutable };

// What accordrun knows about the machine it runs on.
struct SystemInfo {
  bool is_root = false;
  std::string hostname;                    // this host's name
  HostTopology topology;                   // the cores this process may run on, and the GPUs
  std::string self_exe;                    // accordrun's absolute path (it is also the rank agent)
  std::map<std::string, std::string> env;  // accordrun's environment
  std::function<FileKind(const std::string& path)> file_kind;
};

// Gathers the SystemInfo of the running process.
SystemInfo GatherSystemInfo();

FileKind GetFileKind(const std::string& path);

Result<std::string> ReadTextFile(const std::string& path);

struct CommandOutput {
  int exit_status = 0;  // 128 + signal number when killed
  std::string output;   // stdout and stderr together
};

// Runs argv (argv[0] a path or a name found in PATH) with stdin closed and
// returns its output; kills it after timeout_s seconds (an error). With
// `stdout_only` its stderr is accordrun's, and only stdout is returned.
Result<CommandOutput> RunAndCapture(const std::vector<std::string>& argv, double timeout_s, bool stdout_only = false);

}  // namespace accord::launcher
