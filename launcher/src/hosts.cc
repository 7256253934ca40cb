#include "hosts.h"

#include <cctype>
#include <charconv>
#include <set>
#include <sstream>

namespace accord::launcher {
namespace {

// A host name or IPv4 address as mpirun's -H accepts it.
bool ValidHostName(std::string_view name) {
  if (name.empty() || name.front() == '-' || name.front() == '.') return false;
  for (char c : name) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_')) return false;
  }
  return true;
}

// A slot count: plain decimal digits, 1 .. kMaxSlotsPerHost.
bool ParseSlots(std::string_view text, int* slots) {
  if (text.empty()) return false;
  for (char c : text) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  }
  int value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) return false;
  if (value < 1 || value > kMaxSlotsPerHost) return false;
  *slots = value;
  return true;
}

std::string SlotsExpected() { return "a whole number from 1 to " + std::to_string(kMaxSlotsPerHost); }

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

}  // namespace

Result<std::vector<HostSlots>> ParseHostList(std::string_view text) {
  std::vector<HostSlots> hosts;
  std::set<std::string> seen;
  if (Trim(text).empty()) {
    return Status::InvalidArgument("-H is empty: expected hosts such as host1:4,host2:4");
  }
  size_t start = 0;
  for (;;) {
    size_t comma = text.find(',', start);
    std::string_view entry = Trim(text.substr(start, comma == std::string_view::npos ? comma : comma - start));
    std::string where = "-H \"" + std::string(text) + "\": ";
    if (entry.empty()) {
      return Status::InvalidArgument(where + "an entry is empty (expected host[:slots] between commas)");
    }
    HostSlots host;
    size_t colon = entry.find(':');
    std::string_view name = entry.substr(0, colon);
    if (!ValidHostName(name)) {
      return Status::InvalidArgument(where + "\"" + std::string(entry) +
                                     "\" does not start with a host name (letters, digits, '.', '-', '_')");
    }
    host.name = std::string(name);
    if (colon != std::string_view::npos) {
      std::string_view slots = entry.substr(colon + 1);
      if (!ParseSlots(slots, &host.slots)) {
        return Status::InvalidArgument(where + "the slots of \"" + std::string(entry) + "\" must be " +
                                       SlotsExpected());
      }
    }
    if (!seen.insert(host.name).second) {
      return Status::InvalidArgument(where + "host " + host.name + " is listed twice");
    }
    hosts.push_back(std::move(host));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return hosts;
}

Result<std::vector<HostSlots>> ParseHostfile(std::string_view contents, std::string_view path) {
  std::vector<HostSlots> hosts;
  std::set<std::string> seen;
  int line_number = 0;
  size_t start = 0;
  while (start <= contents.size()) {
    size_t newline = contents.find('\n', start);
    std::string_view raw =
        contents.substr(start, newline == std::string_view::npos ? std::string_view::npos : newline - start);
    start = newline == std::string_view::npos ? contents.size() + 1 : newline + 1;
    ++line_number;
    std::string_view line = raw.substr(0, raw.find('#'));
    line = Trim(line);
    if (line.empty()) continue;

    std::ostringstream where;
    where << "hostfile " << path << " line " << line_number << " \"" << Trim(raw) << "\": ";
    std::istringstream words{std::string(line)};
    std::string name;
    words >> name;
    if (!ValidHostName(name)) {
      return Status::InvalidArgument(where.str() + "expected a host name (letters, digits, '.', '-', '_') first");
    }
    HostSlots host;
    host.name = name;
    bool have_slots = false;
    std::string field;
    while (words >> field) {
      if (field.rfind("slots=", 0) != 0) {
        return Status::InvalidArgument(where.str() + "\"" + field + "\" is not understood (expected: host slots=N)");
      }
      if (have_slots) return Status::InvalidArgument(where.str() + "slots= is given twice");
      if (!ParseSlots(std::string_view(field).substr(6), &host.slots)) {
        return Status::InvalidArgument(where.str() + "slots must be " + SlotsExpected());
      }
      have_slots = true;
    }
    if (!seen.insert(host.name).second) {
      return Status::InvalidArgument(where.str() + "host " + host.name + " is listed twice");
    }
    hosts.push_back(std::move(host));
  }
  if (hosts.empty()) {
    return Status::InvalidArgument("hostfile " + std::string(path) +
                                   " lists no hosts (expected lines such as: host1 slots=4)");
  }
  return hosts;
}

std::string FormatHostList(const std::vector<HostSlots>& hosts) {
  std::string text;
  for (const HostSlots& host : hosts) {
    if (!text.empty()) text.push_back(',');
    text += host.name + ":" + std::to_string(host.slots);
  }
  return text;
}

int TotalSlots(const std::vector<HostSlots>& hosts) {
  long long total = 0;
  for (const HostSlots& host : hosts) total += host.slots;
  return total > (1LL << 30) ? (1 << 30) : static_cast<int>(total);
}

}  // namespace accord::launcher
