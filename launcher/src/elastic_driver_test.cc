// Tests for the elastic driver's pure parts: the lines of the driver's
// channel and where the spill goes. The driver itself runs in the tests of
// tests/launcher (accordrun on this host) and tests/multihost (on the bed).
#include "elastic_driver.h"

#include <catch2/catch.hpp>

namespace accord::launcher {
namespace {

TEST_CASE("The driver's channel: every kind of line, and bad ones named") {
  Result<WorkerLine> hello = ParseWorkerLine("worker abc123 2 h1");
  REQUIRE(hello.ok());
  CHECK(hello->kind == WorkerLine::Kind::kWorker);
  CHECK(hello->token == "abc123");
  CHECK(hello->rank == 2);
  CHECK(hello->host == "h1");

  CHECK(ParseWorkerLine("beat 3")->kind == WorkerLine::Kind::kBeat);
  Result<WorkerLine> commit = ParseWorkerLine("commit 0 17 /dev/shm/accord-elastic-x/h1/state g1 c17.pt");
  REQUIRE(commit.ok());
  CHECK(commit->commit == 17);
  CHECK(commit->path == "/dev/shm/accord-elastic-x/h1/state g1 c17.pt");  // a path may hold spaces

  Result<WorkerLine> ready = ParseWorkerLine("ready 1 0.25 1.5");
  REQUIRE(ready.ok());
  CHECK(ready->restore_s == 0.25);
  CHECK(ready->sync_s == 1.5);

  Result<WorkerLine> hosts = ParseWorkerLine("reset 1 hosts");
  REQUIRE(hosts.ok());
  CHECK(hosts->hosts);
  Result<WorkerLine> failure = ParseWorkerLine("reset 1 failure allreduce timed out: rank 2 missing");
  REQUIRE(failure.ok());
  CHECK_FALSE(failure->hosts);
  CHECK(failure->text == "allreduce timed out: rank 2 missing");
  Result<WorkerLine> error = ParseWorkerLine("error 0 ValueError: bad shape");
  REQUIRE(error.ok());
  CHECK(error->kind == WorkerLine::Kind::kError);
  CHECK(error->text == "ValueError: bad shape");
  CHECK(ParseWorkerLine("done 4")->rank == 4);

  CHECK(ParseWorkerLine("").status().message().find("too short") != std::string::npos);
  CHECK(ParseWorkerLine("beat x").status().message().find("no rank") != std::string::npos);
  CHECK(ParseWorkerLine("worker t x h").status().message().find("worker TOKEN RANK HOST") != std::string::npos);
  CHECK(ParseWorkerLine("commit 0 many /p").status().message().find("commit RANK N PATH") != std::string::npos);
  CHECK(ParseWorkerLine("reset 0 maybe").status().message().find("hosts|failure") != std::string::npos);
  CHECK(ParseWorkerLine("ready 0 1").status().message().find("ready RANK") != std::string::npos);
  CHECK(ParseWorkerLine("dance 0").status().message() ==
        "bad line on the driver's channel (unknown kind): \"dance 0\"");
}

TEST_CASE("The spill's default root: /dev/shm where it is writable, else TMPDIR or /tmp") {
  SystemInfo system;
  system.env["TMPDIR"] = "/scratch";
  std::string root = DefaultSpillRoot(system);
  CHECK((root == "/dev/shm" || root == "/scratch"));
}

}  // namespace
}  // namespace accord::launcher
