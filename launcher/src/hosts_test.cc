// Tests for -H and hostfile parsing: every accepted form and every malformed one.
#include "hosts.h"

#include <catch2/catch.hpp>

namespace accord::launcher {
namespace {

std::vector<HostSlots> MustParseList(const std::string& text) {
  Result<std::vector<HostSlots>> hosts = ParseHostList(text);
  INFO("ParseHostList(" << text << ") failed: " << hosts.status());
  REQUIRE(hosts.ok());
  return *hosts;
}

std::string ListError(const std::string& text) {
  Result<std::vector<HostSlots>> hosts = ParseHostList(text);
  INFO("ParseHostList(" << text << ") should fail");
  REQUIRE_FALSE(hosts.ok());
  CHECK(hosts.status().code() == StatusCode::kInvalidArgument);
  return hosts.status().message();
}

std::string FileError(const std::string& contents) {
  Result<std::vector<HostSlots>> hosts = ParseHostfile(contents, "hosts.txt");
  INFO("ParseHostfile(" << contents << ") should fail");
  REQUIRE_FALSE(hosts.ok());
  return hosts.status().message();
}

TEST_CASE("-H takes host:slots entries; a host without slots has one") {
  std::vector<HostSlots> hosts = MustParseList("host1:4,host2:4");
  REQUIRE(hosts.size() == 2);
  CHECK(hosts[0].name == "host1");
  CHECK(hosts[0].slots == 4);
  CHECK(hosts[1].name == "host2");
  CHECK(hosts[1].slots == 4);

  hosts = MustParseList("a, b:3 ,10.0.0.7:2,node-1.cluster_x");
  REQUIRE(hosts.size() == 4);
  CHECK(hosts[0].slots == 1);
  CHECK(hosts[1].name == "b");
  CHECK(hosts[1].slots == 3);
  CHECK(hosts[2].name == "10.0.0.7");
  CHECK(hosts[3].name == "node-1.cluster_x");
  CHECK(hosts[3].slots == 1);
  CHECK(TotalSlots(hosts) == 7);
  CHECK(FormatHostList(hosts) == "a:1,b:3,10.0.0.7:2,node-1.cluster_x:1");
}

TEST_CASE("Malformed -H values are refused with the entry named") {
  CHECK(ListError("") == "-H is empty: expected hosts such as host1:4,host2:4");
  CHECK(ListError("a:2,,b") == "-H \"a:2,,b\": an entry is empty (expected host[:slots] between commas)");
  CHECK(ListError("a,") == "-H \"a,\": an entry is empty (expected host[:slots] between commas)");
  CHECK(ListError(":4").find("\":4\" does not start with a host name") != std::string::npos);
  CHECK(ListError("-a:4").find("does not start with a host name") != std::string::npos);
  CHECK(ListError("a b:4").find("does not start with a host name") != std::string::npos);
  CHECK(ListError("a:") == "-H \"a:\": the slots of \"a:\" must be a whole number from 1 to 1048576");
  CHECK(ListError("a:0").find("the slots of \"a:0\" must be a whole number") != std::string::npos);
  CHECK(ListError("a:-1").find("the slots of \"a:-1\" must be") != std::string::npos);
  CHECK(ListError("a:x").find("the slots of \"a:x\" must be") != std::string::npos);
  CHECK(ListError("a:4:5").find("the slots of \"a:4:5\" must be") != std::string::npos);
  CHECK(ListError("a:99999999999").find("must be a whole number") != std::string::npos);
  CHECK(ListError("a:2,b,a:1") == "-H \"a:2,b,a:1\": host a is listed twice");
}

TEST_CASE("A hostfile has host slots=N lines, comments and blank lines") {
  const char* contents =
      "# the cluster\n"
      "\n"
      "node1 slots=4\n"
      "   node2    slots=2   # the small one\n"
      "node3\n"
      "\t\n";
  Result<std::vector<HostSlots>> hosts = ParseHostfile(contents, "hosts.txt");
  REQUIRE(hosts.ok());
  REQUIRE(hosts->size() == 3);
  CHECK((*hosts)[0].name == "node1");
  CHECK((*hosts)[0].slots == 4);
  CHECK((*hosts)[1].name == "node2");
  CHECK((*hosts)[1].slots == 2);
  CHECK((*hosts)[2].name == "node3");
  CHECK((*hosts)[2].slots == 1);
  // No newline at the end.
  Result<std::vector<HostSlots>> last = ParseHostfile("a slots=2", "f");
  REQUIRE(last.ok());
  CHECK(last->at(0).slots == 2);
}

TEST_CASE("Malformed hostfile lines are refused with file, line and text") {
  CHECK(FileError("a slots=1\n\nb slots=x\n") ==
        "hostfile hosts.txt line 3 \"b slots=x\": slots must be a whole number from 1 to 1048576");
  CHECK(FileError("a slots=0").find("line 1 \"a slots=0\": slots must be") != std::string::npos);
  CHECK(FileError("a slots=").find("slots must be") != std::string::npos);
  CHECK(FileError("a max_slots=4") ==
        "hostfile hosts.txt line 1 \"a max_slots=4\": \"max_slots=4\" is not understood (expected: host slots=N)");
  CHECK(FileError("a 4").find("\"4\" is not understood") != std::string::npos);
  CHECK(FileError("a slots=1 slots=2").find("slots= is given twice") != std::string::npos);
  CHECK(FileError("slots=4").find("expected a host name") != std::string::npos);
  CHECK(FileError("a\nb\na slots=2") == "hostfile hosts.txt line 3 \"a slots=2\": host a is listed twice");
  CHECK(FileError("") == "hostfile hosts.txt lists no hosts (expected lines such as: host1 slots=4)");
  CHECK(FileError("# only a comment\n\n").find("lists no hosts") != std::string::npos);
}

}  // namespace
}  // namespace accord::launcher
