// Tests for the job loop without Open MPI: a Job whose "mpirun" is a shell
// command that starts no rank. One Job runs generation after generation, and
// when it is gone the process's signal actions and environment are as they
// were before.
#include "runner.h"

#include <signal.h>

#include <catch2/catch.hpp>

#include <cstdlib>

namespace accord::launcher {
namespace {

LaunchPlan FakePlan(std::vector<std::string> argv) {
  LaunchPlan plan;
  plan.argv = std::move(argv);
  plan.np = 1;
  return plan;
}

void (*HandlerOf(int signal))(int) {
  struct sigaction action {};
  sigaction(signal, nullptr, &action);
  return action.sa_handler;
}

TEST_CASE("A Job runs one generation after another and restores the process when it ends") {
  const auto chld = HandlerOf(SIGCHLD);
  const auto term = HandlerOf(SIGTERM);
  RunSettings settings;
  settings.program = "train.py";
  {
    Result<std::unique_ptr<Job>> job = Job::Open(FakePlan({"/bin/sh", "-c", "exit 3"}), settings);
    REQUIRE(job.ok());
    CHECK(HandlerOf(SIGCHLD) != chld);
    for (int generation = 0; generation < 3; ++generation) {
      INFO("generation " << generation);
      GenerationResult result = (*job)->RunGeneration();
      CHECK(result.exit_status == 3);  // mpirun's own status: no rank reported
      CHECK(result.stop_signal == 0);
      CHECK(std::getenv(kReportVariable) == nullptr);
    }
  }
  CHECK(HandlerOf(SIGCHLD) == chld);
  CHECK(HandlerOf(SIGTERM) == term);
}

TEST_CASE("RunJob returns 127 when mpirun cannot be run, and 0 when it succeeds with no rank failing") {
  const auto chld = HandlerOf(SIGCHLD);
  RunSettings settings;
  CHECK(RunJob(FakePlan({"/nonexistent/mpirun"}), settings) == 127);
  CHECK(HandlerOf(SIGCHLD) == chld);
  CHECK(std::getenv(kReportVariable) == nullptr);
  LaunchPlan plan = FakePlan({"/bin/sh", "-c", "exit 0"});
  plan.np = 0;  // no rank to wait for
  CHECK(RunJob(plan, settings) == 0);
  CHECK(HandlerOf(SIGCHLD) == chld);
}

}  // namespace
}  // namespace accord::launcher
