// The elastic driver's view of the hosts (docs/elastic.md): what discovery
// last said, which hosts are blacklisted and until when, where the newest
// commit lies, and from all that the placement of the next generation and
// whether the running one must change.
//
// Pure: time comes in as arguments and discovery's output as text, so tests
// drive it with any clock and any script output. Not synchronised; the
// driver calls it from accordrun's main thread.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "accord/status.h"
#include "hosts.h"

namespace accord::launcher {

// Parses a discovery script's output: one `host` or `host:slots` per line;
// blank lines and `#` comments are skipped; a host without slots gets
// `default_slots`; a host named twice is an error (which slots would count?).
Result<std::vector<HostSlots>> ParseDiscoveredHosts(std::string_view output, int default_slots);

class ElasticHosts {
 public:
  using Clock = std::chrono::steady_clock;

  struct Limits {
    int min_np = 1;
    std::optional<int> max_np;
    // A blacklisted host returns after first s, doubling with each further
    // failure, at most second s; absent: never.
    std::optional<std::pair<double, double>> cooldown_s;
  };
  explicit ElasticHosts(Limits limits) : limits_(std::move(limits)) {}

  // What discovery says now. Hosts keep the order in which they were first
  // seen (the older a host, the lower its ranks), as the placement does.
  void Discovered(const std::vector<HostSlots>& hosts);

  // A host whose ranks failed: out until its cooldown ends (or for good).
  // Returns the cooldown in seconds; nullopt when it is for good. The
  // commit it holds counts again when it returns (its spill outlives its
  // ranks).
  std::optional<double> Blacklist(const std::string& host, Clock::time_point now);
  bool Blacklisted(const std::string& host, Clock::time_point now) const;

  // A commit a host holds: the file to restore it from there.
  struct Commit {
    std::string host;
    long number = -1;
    std::string path;
  };
  // A host reported that it holds commit `number` in `path`; a newer one
  // replaces it (the host's older files are deleted by its writer).
  void Committed(const std::string& host, long number, const std::string& path);

  // Discovered hosts that are not blacklisted, in placement order, with
  // their slots.
  std::vector<HostSlots> Available(Clock::time_point now) const;
  int AvailableSlots(Clock::time_point now) const { return TotalSlots(Available(now)); }

  // The next generation's placement: the available hosts, the one holding
  // the newest commit first (its first rank is rank 0, which restores it),
  // then the others in placement order, taking slots up to --max-np. Empty
  // when fewer than `needed` slots are available. `restore` gets the commit
  // to restore, or none.
  std::vector<HostSlots> Place(Clock::time_point now, int needed, std::optional<Commit>* restore) const;

  // How the placement would change against the running one: hosts (or
  // slots) it uses that are gone, and more slots that it could use.
  struct Change {
    bool removed = false;
    bool added = false;
    bool any() const { return removed || added; }
  };
  Change Compare(const std::vector<HostSlots>& running, Clock::time_point now) const;

  // Every discovered host, and those blacklisted now (for messages).
  std::vector<std::string> DiscoveredNames() const;
  std::vector<std::string> BlacklistedNames(Clock::time_point now) const;

 private:
  struct HostState {
    int failures = 0;
    std::optional<Clock::time_point> blacklisted_until;  // time_point::max() for good
  };

  const Limits limits_;
  std::vector<std::string> order_;         // every host ever discovered, first seen first
  std::map<std::string, int> discovered_;  // host -> slots, as discovery said last
  std::map<std::string, HostState> state_;
  std::map<std::string, Commit> commits_;  // host -> the newest commit it holds
};

}  // namespace accord::launcher
