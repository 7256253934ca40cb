// Tests for RankMonitor: the agents' lines it accepts and refuses, the
// ranks it counts as started, and the exit status and explanation it
// concludes for each way a generation can end.
#include "rank_monitor.h"

#include <sys/wait.h>

#include <catch2/catch.hpp>

#include <string>
#include <vector>

namespace accord::launcher {
namespace {

constexpr int kExited1 = 1 << 8;  // the wait status of a process that exited with status 1

struct Said {
  std::vector<std::string> lines;
  RankMonitor::Say sink() {
    return [this](const std::string& line) { lines.push_back(line); };
  }
};

RankExit Exited(int status, bool stopped = false) {
  RankExit exit;
  exit.value = status;
  exit.stopped = stopped;
  return exit;
}

TEST_CASE("RankMonitor counts hellos with its token and refuses the others") {
  Said said;
  RankMonitor monitor(3, "t0k", "train.py", false, said.sink());
  RankMonitor::Peer a, b, stranger, early;
  CHECK(monitor.OnLine(a, EncodeHello("t0k", 0, 100, "node0")));
  CHECK(a.rank == 0);
  CHECK(a.host == "node0");
  CHECK_FALSE(monitor.OnLine(stranger, EncodeHello("other", 1, 101, "node0")));  // an older generation's
  CHECK_FALSE(monitor.OnLine(b, EncodeHello("t0k", 3, 102, "node0")));           // no such rank
  CHECK_FALSE(monitor.OnLine(early, EncodeExit(2, Exited(0))));                  // exit before hello
  CHECK_FALSE(monitor.OnLine(b, "not a report"));
  CHECK(monitor.StartedCount() == 1);
  CHECK_FALSE(monitor.AllStarted());
  CHECK(monitor.MissingRanks() == "1, 2");
  CHECK(said.lines.empty());  // not verbose
}

TEST_CASE("RankMonitor names the first rank that failed on its own") {
  Said said;
  RankMonitor monitor(2, "t", "train.py", false, said.sink());
  RankMonitor::Peer r0, r1;
  REQUIRE(monitor.OnLine(r0, EncodeHello("t", 0, 10, "h0")));
  REQUIRE(monitor.OnLine(r1, EncodeHello("t", 1, 11, "h1")));
  CHECK(monitor.FirstFailed().empty());
  CHECK(monitor.OnLine(r0, EncodeExit(0, Exited(143, true))));  // stopped: says nothing about the program
  CHECK(monitor.FirstFailed().empty());
  CHECK(monitor.OnLine(r1, EncodeExit(1, Exited(3))));
  CHECK(monitor.FirstFailed() == "rank 1 (on h1)");
  CHECK(monitor.Conclude(kExited1, false, 0) == 3);
  REQUIRE(said.lines.size() == 1);
  CHECK(said.lines[0].rfind("rank 1 (on h1) exited with status 3", 0) == 0);
  CHECK(said.lines[0].find("it was the first rank to fail") != std::string::npos);
}

TEST_CASE("RankMonitor concludes a lost agent, a stop by signal, a start timeout and success") {
  Said said;
  RankMonitor monitor(2, "t", "train.py", true, said.sink());
  RankMonitor::Peer r0, r1;
  REQUIRE(monitor.OnLine(r0, EncodeHello("t", 0, 10, "h0")));
  REQUIRE(monitor.OnLine(r1, EncodeHello("t", 1, 11, "h1")));
  CHECK(said.lines.size() == 3);  // verbose: each rank, then all of them
  CHECK(said.lines[2].rfind("all 2 ranks started in ", 0) == 0);
  said.lines.clear();

  CHECK(monitor.Conclude(0, true, 0) == 1);  // start timeout: already explained by the runner
  CHECK(monitor.Conclude(0, false, 0) == 0);
  CHECK(said.lines.back() == "all 2 ranks exited with status 0");
  CHECK(monitor.Conclude(kExited1, false, SIGTERM) == 128 + SIGTERM);
  CHECK(said.lines.back() == "the job was stopped: accordrun received SIGTERM (mpirun exited with status 1)");

  monitor.OnClosed(r1);  // no exit report: its agent was lost
  CHECK(monitor.FirstFailed() == "rank 1 (on h1)");
  CHECK(monitor.Conclude(kExited1, false, 0) == 1);
  CHECK(said.lines.back().rfind("rank 1 (on h1) ended without reporting how", 0) == 0);
}

TEST_CASE("RankMonitor explains an mpirun that failed before every rank started") {
  Said said;
  RankMonitor monitor(2, "t", "train.py", false, said.sink());
  CHECK(monitor.Conclude(kExited1, false, 0) == 1);
  REQUIRE(said.lines.size() == 1);
  CHECK(said.lines[0] == "mpirun exited with status 1 before any rank started; see mpirun's messages above");
  CHECK(DescribeMpirunEnd(SIGKILL) == "mpirun was killed by signal 9");
}

}  // namespace
}  // namespace accord::launcher
