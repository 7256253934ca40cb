// Running a planned job: starts mpirun, listens for the rank agents'
// reports (report.h), enforces --start-timeout, forwards signals sent to
// accordrun, and turns the outcome into accordrun's exit status and a
// one-line explanation.
//
// Runs on accordrun's main thread; it installs signal handlers for SIGCHLD,
// SIGTERM, SIGINT, SIGHUP, SIGUSR1 and SIGUSR2 for the duration.
#pragma once

#include <string>

#include "plan.h"

namespace accord::launcher {

struct RunSettings {
  double start_timeout_s = 30;
  bool verbose = false;
  std::string program;  // the rank's program, for messages
};

// Runs the job and returns accordrun's exit status: 0 when every rank exited
// with 0; else the exit status of the first rank that failed (128 + N for a
// rank killed by signal N), or mpirun's own status when no rank reported a
// failure; 1 when the ranks did not all start in time.
int RunJob(const LaunchPlan& plan, const RunSettings& settings);

}  // namespace accord::launcher
