// Tests for the job loop without Open MPI: a Job whose "mpirun" is a shell
// command that starts no rank. One Job runs generation after generation, and
// when it is gone the process's signal actions and environment are as they
// were before.
#include "runner.h"

#include <signal.h>

#include <catch2/catch.hpp>

#include <cstdlib>
#include <set>
#include <string>
#include <vector>

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
    Result<std::unique_ptr<Job>> job = Job::Open(/*remote=*/false, {}, settings);
    REQUIRE(job.ok());
    CHECK(HandlerOf(SIGCHLD) != chld);
    for (int generation = 0; generation < 3; ++generation) {
      INFO("generation " << generation);
      GenerationResult result = (*job)->RunGeneration(FakePlan({"/bin/sh", "-c", "exit 3"}));
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

// Records what the programs sent and sends "hosts ..." on the first tick
// after a program connected.
class RecordingObserver : public GenerationObserver {
 public:
  bool OnWorkerLine(int id, const std::string& line) override {
    lines.push_back(line);
    connected.insert(id);
    return true;
  }
  void OnWorkerClosed(int id) override { closed.insert(id); }
  void OnTick(std::vector<std::string>* broadcast, std::string* /*stop*/) override {
    if (!connected.empty() && !sent) {
      broadcast->push_back("hosts 12.5 0 1");
      sent = true;
    }
  }
  std::vector<std::string> lines;
  std::set<int> connected;
  std::set<int> closed;
  bool sent = false;
};

TEST_CASE("A program's own connection reaches the observer, both ways") {
  RunSettings settings;
  Result<std::unique_ptr<Job>> job = Job::Open(/*remote=*/false, {}, settings);
  REQUIRE(job.ok());
  // The fake mpirun connects to the port in ACCORDRUN_REPORT as a program
  // would, says hello as a worker, waits for the observer's line and sends it
  // back.
  const std::string script =
      "port=$(echo \"$ACCORDRUN_REPORT\" | cut -d@ -f2); exec 3<>/dev/tcp/127.0.0.1/$port; "
      "echo 'worker t 0 h1' >&3; read -r line <&3; echo \"echo $line\" >&3; exec 3>&-";
  LaunchPlan plan = FakePlan({"/bin/bash", "-c", script});
  plan.np = 0;
  RecordingObserver observer;
  GenerationResult result = (*job)->RunGeneration(plan, &observer);
  CHECK(result.exit_status == 0);
  REQUIRE(observer.lines.size() == 2);
  CHECK(observer.lines[0] == "worker t 0 h1");
  CHECK(observer.lines[1] == "echo hosts 12.5 0 1");
  CHECK(observer.closed == observer.connected);
}

TEST_CASE("An observer's stop ends the generation") {
  class Stopper : public GenerationObserver {
   public:
    bool OnWorkerLine(int, const std::string&) override { return true; }
    void OnWorkerClosed(int) override {}
    void OnTick(std::vector<std::string>*, std::string* stop) override { *stop = "test stop"; }
  };
  RunSettings settings;
  Result<std::unique_ptr<Job>> job = Job::Open(/*remote=*/false, {}, settings);
  REQUIRE(job.ok());
  LaunchPlan plan = FakePlan({"/bin/sh", "-c", "exec sleep 60"});
  plan.np = 0;
  Stopper stopper;
  GenerationResult result = (*job)->RunGeneration(plan, &stopper);
  CHECK(result.exit_status == 128 + SIGTERM);  // the fake mpirun was told to stop
}

TEST_CASE("Each generation gets MASTER_ADDR and a MASTER_PORT free on rank 0's host, gone from accordrun after") {
  RunSettings settings;
  Result<std::unique_ptr<Job>> job = Job::Open(/*remote=*/false, {}, settings);
  REQUIRE(job.ok());
  LaunchPlan plan = FakePlan({"/bin/sh", "-c",
                              "test \"$MASTER_ADDR\" = 127.0.0.1 && test \"$MASTER_PORT\" -gt 0 && "
                              "test \"$MASTER_PORT\" -lt 65536 || exit 5"});
  plan.np = 0;
  plan.torch.set_addr = plan.torch.set_port = true;
  plan.torch.addr = "127.0.0.1";
  for (int generation = 0; generation < 2; ++generation) {
    CHECK((*job)->RunGeneration(plan).exit_status == 0);
    CHECK(std::getenv("MASTER_ADDR") == nullptr);
    CHECK(std::getenv("MASTER_PORT") == nullptr);
  }
  // A probe on another host that fails ends the generation before mpirun.
  plan.torch.probe_argv = {"/bin/sh", "-c", "exit 2"};
  plan.torch.host = "node1";
  CHECK((*job)->RunGeneration(plan).exit_status == 1);
  // A probe that answers: its port; MASTER_ADDR as the plan says.
  plan.torch.probe_argv = {"/bin/sh", "-c", "echo 'starting'; echo '4242 10.0.0.1'"};
  plan.argv = {"/bin/sh", "-c", "test \"$MASTER_ADDR:$MASTER_PORT\" = 127.0.0.1:4242 || exit 5"};
  CHECK((*job)->RunGeneration(plan).exit_status == 0);
  plan.torch.addr.clear();  // found on that host
  plan.argv = {"/bin/sh", "-c", "test \"$MASTER_ADDR:$MASTER_PORT\" = 10.0.0.1:4242 || exit 5"};
  CHECK((*job)->RunGeneration(plan).exit_status == 0);
}

TEST_CASE("FreeTcpPort gives a port that can be bound; ParsePortProbe reads the probe's last line") {
  Result<int> port = FreeTcpPort();
  REQUIRE(port.ok());
  CHECK(*port > 0);
  CHECK(*port < 65536);
  Result<PortProbe> plain = ParsePortProbe("29500\n");
  REQUIRE(plain.ok());
  CHECK(plain->port == 29500);
  CHECK(plain->address.empty());
  Result<PortProbe> with_address = ParsePortProbe("a note from mpirun\n1234 10.0.0.1\n\n");
  REQUIRE(with_address.ok());
  CHECK(with_address->port == 1234);
  CHECK(with_address->address == "10.0.0.1");
  for (const char* bad : {"", "port\n", "0\n", "70000\n", "12 a b\n"}) {
    INFO(bad);
    CHECK_FALSE(ParsePortProbe(bad).ok());
  }
}

}  // namespace
}  // namespace accord::launcher
