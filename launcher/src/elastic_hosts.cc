#include "elastic_hosts.h"

#include <algorithm>
#include <cmath>

namespace accord::launcher {
namespace {

std::string_view Trim(std::string_view text) {
  const char* space = " \t\r";
  size_t first = text.find_first_not_of(space);
  if (first == std::string_view::npos) return {};
  return text.substr(first, text.find_last_not_of(space) - first + 1);
}

}  // namespace

Result<std::vector<HostSlots>> ParseDiscoveredHosts(std::string_view output, int default_slots) {
  std::vector<HostSlots> hosts;
  int line_number = 0;
  while (!output.empty()) {
    size_t newline = output.find('\n');
    std::string_view line = output.substr(0, newline);
    output = newline == std::string_view::npos ? std::string_view() : output.substr(newline + 1);
    ++line_number;
    line = Trim(line.substr(0, line.find('#')));
    if (line.empty()) continue;
    Result<std::vector<HostSlots>> parsed = ParseHostList(line);
    if (!parsed.ok() || parsed->size() != 1 || line.find_first_of(" \t,") != std::string_view::npos) {
      return Status::InvalidArgument("line " + std::to_string(line_number) + " \"" + std::string(line) +
                                     "\" is not 'host' or 'host:slots'" +
                                     (parsed.ok() ? std::string() : ": " + parsed.status().message()));
    }
    HostSlots host = parsed->front();
    if (line.find(':') == std::string_view::npos) host.slots = default_slots;
    for (const HostSlots& earlier : hosts) {
      if (earlier.name == host.name) {
        return Status::InvalidArgument("host " + host.name + " is named twice (line " + std::to_string(line_number) +
                                       ")");
      }
    }
    hosts.push_back(std::move(host));
  }
  return hosts;
}

void ElasticHosts::Discovered(const std::vector<HostSlots>& hosts) {
  discovered_.clear();
  for (const HostSlots& host : hosts) {
    discovered_[host.name] = host.slots;
    if (std::find(order_.begin(), order_.end(), host.name) == order_.end()) order_.push_back(host.name);
  }
}

std::optional<double> ElasticHosts::Blacklist(const std::string& host, Clock::time_point now) {
  HostState& state = state_[host];
  ++state.failures;
  if (!limits_.cooldown_s) {
    state.blacklisted_until = Clock::time_point::max();
    return std::nullopt;
  }
  const auto [low, high] = *limits_.cooldown_s;
  double seconds = std::min(high, low * std::ldexp(1.0, std::min(state.failures - 1, 30)));
  state.blacklisted_until = now + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  return seconds;
}

bool ElasticHosts::Blacklisted(const std::string& host, Clock::time_point now) const {
  auto it = state_.find(host);
  return it != state_.end() && it->second.blacklisted_until && now < *it->second.blacklisted_until;
}

void ElasticHosts::Committed(const std::string& host, long number, const std::string& path) {
  Commit& commit = commits_[host];
  if (number < commit.number) return;
  commit = Commit{host, number, path};
}

std::vector<HostSlots> ElasticHosts::Available(Clock::time_point now) const {
  std::vector<HostSlots> available;
  for (const std::string& name : order_) {
    auto it = discovered_.find(name);
    if (it != discovered_.end() && !Blacklisted(name, now)) available.push_back({name, it->second});
  }
  return available;
}

std::vector<HostSlots> ElasticHosts::Place(Clock::time_point now, int needed, std::optional<Commit>* restore) const {
  std::vector<HostSlots> available = Available(now);
  restore->reset();
  if (TotalSlots(available) < needed) return {};
  // The newest commit among the available hosts leads.
  for (const HostSlots& host : available) {
    auto it = commits_.find(host.name);
    if (it != commits_.end() && (!*restore || it->second.number > (*restore)->number)) *restore = it->second;
  }
  if (*restore) {
    auto first = std::find_if(available.begin(), available.end(),
                              [&](const HostSlots& host) { return host.name == (*restore)->host; });
    std::rotate(available.begin(), first, first + 1);
  }
  std::vector<HostSlots> placement;
  int left = limits_.max_np ? *limits_.max_np : TotalSlots(available);
  for (const HostSlots& host : available) {
    if (left == 0) break;
    int slots = std::min(left, host.slots);
    placement.push_back({host.name, slots});
    left -= slots;
  }
  return placement;
}

ElasticHosts::Change ElasticHosts::Compare(const std::vector<HostSlots>& running, Clock::time_point now) const {
  Change change;
  const std::vector<HostSlots> available = Available(now);
  for (const HostSlots& host : running) {
    auto it = std::find_if(available.begin(), available.end(),
                           [&](const HostSlots& other) { return other.name == host.name; });
    if (it == available.end() || it->slots < host.slots) change.removed = true;
  }
  // More ranks than those that would remain: new hosts or slots, or spare
  // ones that can take the place of those removed.
  int could_run = TotalSlots(available);
  if (limits_.max_np) could_run = std::min(could_run, *limits_.max_np);
  int still_running = 0;
  for (const HostSlots& host : running) {
    auto it = std::find_if(available.begin(), available.end(),
                           [&](const HostSlots& other) { return other.name == host.name; });
    if (it != available.end()) still_running += std::min(it->slots, host.slots);
  }
  change.added = could_run > still_running;
  return change;
}

std::vector<std::string> ElasticHosts::DiscoveredNames() const {
  std::vector<std::string> names;
  for (const std::string& name : order_) {
    if (discovered_.count(name) != 0) names.push_back(name);
  }
  return names;
}

std::vector<std::string> ElasticHosts::BlacklistedNames(Clock::time_point now) const {
  std::vector<std::string> names;
  for (const std::string& name : order_) {
    if (Blacklisted(name, now)) names.push_back(name);
  }
  return names;
}

}  // namespace accord::launcher
