// Tests for the elastic driver's view of the hosts: discovery's output, the
// blacklist and its cooldown, the placement of a generation and the changes
// that end one.
#include "elastic_hosts.h"

#include <catch2/catch.hpp>

namespace accord::launcher {
namespace {

using Clock = ElasticHosts::Clock;
using Hosts = std::vector<HostSlots>;

std::string Show(const Hosts& hosts) { return FormatHostList(hosts); }

Clock::time_point At(double seconds) {
  return Clock::time_point() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

TEST_CASE("Discovery's output: host or host:slots per line") {
  Result<Hosts> hosts = ParseDiscoveredHosts("h1:2\n\n  h2  \n# spare\nh3:4 # big\n", 3);
  REQUIRE(hosts.ok());
  CHECK(Show(*hosts) == "h1:2,h2:3,h3:4");
  CHECK(ParseDiscoveredHosts("", 1)->empty());
  CHECK(ParseDiscoveredHosts("h1\nh1:2\n", 1).status().message() == "host h1 is named twice (line 2)");
  CHECK(ParseDiscoveredHosts("h1 h2\n", 1).status().message().find("line 1 \"h1 h2\" is not 'host' or 'host:slots'") ==
        0);
  CHECK(ParseDiscoveredHosts("h1:0\n", 1).status().message().find("line 1 \"h1:0\"") == 0);
  CHECK(ParseDiscoveredHosts("a,b\n", 1).status().message().find("is not 'host' or 'host:slots'") != std::string::npos);
}

TEST_CASE("A generation's placement: the newest commit's host first, up to --max-np") {
  ElasticHosts hosts({/*min_np=*/2, /*max_np=*/3, std::nullopt});
  hosts.Discovered({{"h1", 2}, {"h2", 1}, {"h3", 2}});
  std::optional<ElasticHosts::Commit> restore;
  CHECK(Show(hosts.Place(At(0), 2, &restore)) == "h1:2,h2:1");
  CHECK_FALSE(restore);
  CHECK(hosts.Place(At(0), 6, &restore).empty());  // fewer slots than needed

  hosts.Committed("h1", 4, "/s/h1/c4");
  hosts.Committed("h3", 5, "/s/h3/c5");
  hosts.Committed("h3", 3, "/s/h3/c3");  // older: ignored
  CHECK(Show(hosts.Place(At(0), 2, &restore)) == "h3:2,h1:1");
  REQUIRE(restore);
  CHECK(restore->host == "h3");
  CHECK(restore->number == 5);
  CHECK(restore->path == "/s/h3/c5");

  // Hosts keep the order they were first seen in, whatever discovery prints.
  hosts.Discovered({{"h4", 1}, {"h2", 1}, {"h1", 2}});
  CHECK(Show(hosts.Place(At(0), 2, &restore)) == "h1:2,h2:1");
  CHECK(restore->host == "h1");
}

TEST_CASE("Blacklisting: for good, or for a cooldown that doubles up to its maximum") {
  ElasticHosts forever({1, std::nullopt, std::nullopt});
  forever.Discovered({{"h1", 1}, {"h2", 1}});
  forever.Committed("h2", 7, "/p");
  CHECK_FALSE(forever.Blacklist("h2", At(0)));
  CHECK(forever.Blacklisted("h2", At(1e6)));
  CHECK(Show(forever.Available(At(10))) == "h1:1");
  std::optional<ElasticHosts::Commit> restore;
  forever.Place(At(10), 1, &restore);
  CHECK_FALSE(restore);  // the host that holds it is out
  CHECK(forever.BlacklistedNames(At(0)) == std::vector<std::string>{"h2"});

  ElasticHosts cooling({1, std::nullopt, std::make_pair(10.0, 25.0)});
  cooling.Discovered({{"h1", 1}});
  CHECK(cooling.Blacklist("h1", At(0)) == 10.0);
  CHECK(cooling.Blacklisted("h1", At(9.9)));
  CHECK_FALSE(cooling.Blacklisted("h1", At(10.1)));
  CHECK(cooling.Blacklist("h1", At(20)) == 20.0);
  CHECK(cooling.Blacklisted("h1", At(39.9)));
  CHECK_FALSE(cooling.Blacklisted("h1", At(40.1)));
  CHECK(cooling.Blacklist("h1", At(50)) == 25.0);  // 40 capped at the maximum
  CHECK(cooling.AvailableSlots(At(60)) == 0);
  CHECK(cooling.AvailableSlots(At(76)) == 1);
}

TEST_CASE("Changes against the running generation: removed, added, both, or none") {
  ElasticHosts hosts({1, /*max_np=*/3, std::nullopt});
  const Hosts running = {{"h1", 1}, {"h2", 1}};
  hosts.Discovered(running);
  CHECK_FALSE(hosts.Compare(running, At(0)).any());

  hosts.Discovered({{"h1", 1}, {"h2", 1}, {"h3", 1}});
  ElasticHosts::Change added = hosts.Compare(running, At(0));
  CHECK(added.added);
  CHECK_FALSE(added.removed);

  hosts.Discovered({{"h1", 1}});
  ElasticHosts::Change removed = hosts.Compare(running, At(0));
  CHECK(removed.removed);
  CHECK_FALSE(removed.added);

  // A spare host that can take the removed one's place: both.
  hosts.Discovered({{"h1", 1}, {"h3", 1}});
  ElasticHosts::Change both = hosts.Compare(running, At(0));
  CHECK(both.removed);
  CHECK(both.added);

  // At --max-np, a new host changes nothing.
  const Hosts full = {{"h1", 1}, {"h2", 1}, {"h3", 1}};
  hosts.Discovered({{"h1", 1}, {"h2", 1}, {"h3", 1}, {"h4", 1}});
  CHECK_FALSE(hosts.Compare(full, At(0)).any());

  // Fewer slots on a running host is a removal; a blacklisted host is gone.
  hosts.Discovered({{"h1", 2}, {"h2", 1}});
  CHECK_FALSE(hosts.Compare({{"h1", 2}, {"h2", 1}}, At(0)).any());
  hosts.Discovered({{"h1", 1}, {"h2", 1}});
  CHECK(hosts.Compare({{"h1", 2}, {"h2", 1}}, At(0)).removed);
  hosts.Blacklist("h2", At(0));
  CHECK(hosts.Compare(running, At(1)).removed);
}

}  // namespace
}  // namespace accord::launcher
