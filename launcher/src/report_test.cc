// Tests for the rank agents' report lines, the report address, and how an
// ending is described and turned into an exit status.
#include "report.h"

#include <catch2/catch.hpp>

#include <cerrno>
#include <csignal>

namespace accord::launcher {
namespace {

TEST_CASE("Hello and exit lines round-trip") {
  std::string hello = EncodeHello("abc123", 7, 4242, "node3");
  CHECK(hello == "hello abc123 7 4242 node3\n");
  Result<ReportMessage> decoded = DecodeReport(hello.substr(0, hello.size() - 1));
  REQUIRE(decoded.ok());
  CHECK(decoded->kind == ReportMessage::Kind::kHello);
  CHECK(decoded->token == "abc123");
  CHECK(decoded->rank == 7);
  CHECK(decoded->pid == 4242);
  CHECK(decoded->host == "node3");

  for (RankExit exit : {RankExit{RankExit::How::kExited, 3, false}, RankExit{RankExit::How::kSignaled, 9, true},
                        RankExit{RankExit::How::kNotStarted, ENOENT, false}}) {
    std::string line = EncodeExit(2, exit);
    Result<ReportMessage> back = DecodeReport(line.substr(0, line.size() - 1));
    REQUIRE(back.ok());
    CHECK(back->kind == ReportMessage::Kind::kExit);
    CHECK(back->rank == 2);
    CHECK(back->exit.how == exit.how);
    CHECK(back->exit.value == exit.value);
    CHECK(back->exit.stopped == exit.stopped);
  }
  CHECK(EncodeExit(1, RankExit{RankExit::How::kExited, 3, false}) == "exit 1 exited 3 0\n");
}

TEST_CASE("Malformed report lines are refused") {
  for (const char* line : {"", "hi", "hello tok", "hello tok x 1 h", "hello tok 1 2 h extra", "exit 1 exited",
                           "exit 1 melted 3 0", "exit -1 exited 0 0", "exit x exited 0 0"}) {
    INFO(line);
    CHECK_FALSE(DecodeReport(line).ok());
  }
}

TEST_CASE("Report addresses round-trip; malformed ones are refused") {
  ReportAddress address{"f00d", 40123, {"10.0.0.2", "127.0.0.1"}};
  std::string text = FormatReportAddress(address);
  CHECK(text == "f00d@40123@10.0.0.2,127.0.0.1");
  Result<ReportAddress> back = ParseReportAddress(text);
  REQUIRE(back.ok());
  CHECK(back->token == "f00d");
  CHECK(back->port == 40123);
  CHECK(back->hosts == std::vector<std::string>{"10.0.0.2", "127.0.0.1"});
  for (const char* bad : {"", "tok", "tok@1", "@1@h", "tok@@h", "tok@0@h", "tok@70000@h", "tok@12x@h", "tok@1@"}) {
    INFO(bad);
    CHECK_FALSE(ParseReportAddress(bad).ok());
  }
}

TEST_CASE("Endings are described and mapped to a shell's exit status") {
  RankExit three{RankExit::How::kExited, 3, false};
  CHECK(three.failed());
  CHECK(DescribeExit(three, "python") == "exited with status 3");
  CHECK(ExitStatusFor(three) == 3);

  RankExit ok{RankExit::How::kExited, 0, false};
  CHECK_FALSE(ok.failed());
  CHECK(ExitStatusFor(ok) == 0);

  RankExit segv{RankExit::How::kSignaled, SIGSEGV, false};
  CHECK(segv.failed());
  CHECK(DescribeExit(segv, "python").rfind("was killed by signal 11 (SIGSEGV, ", 0) == 0);
  CHECK(ExitStatusFor(segv) == 128 + SIGSEGV);

  CHECK(std::string(SignalName(SIGTERM)) == "SIGTERM");
  CHECK(SignalName(SIGRTMIN + 3) == nullptr);

  RankExit missing{RankExit::How::kNotStarted, ENOENT, false};
  CHECK(DescribeExit(missing, "pythn") == "could not start \"pythn\": No such file or directory");
  CHECK(ExitStatusFor(missing) == 127);
  CHECK(ExitStatusFor(RankExit{RankExit::How::kNotStarted, EACCES, false}) == 126);
}

}  // namespace
}  // namespace accord::launcher
