// The hosts of a job and their slots, from -H or a hostfile.
//
// A slot is room for one rank. `-H host1:4,host2` gives host1 four slots and
// host2 one; a hostfile says the same as lines of `host1 slots=4`. Pure
// functions; any thread may call them.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "accord/status.h"

namespace accord::launcher {

struct HostSlots {
  std::string name;
  int slots = 1;
};

// The most slots one host may have (a bound on typos, not on hardware).
inline constexpr int kMaxSlotsPerHost = 1 << 20;

// Parses the value of -H: comma-separated `name[:slots]` entries.
Result<std::vector<HostSlots>> ParseHostList(std::string_view text);

// Parses a hostfile's contents: one `name [slots=N]` per line; `#` starts a
// comment; blank lines are skipped. `path` names the file in messages.
Result<std::vector<HostSlots>> ParseHostfile(std::string_view contents, std::string_view path);

// `name:slots,...`, the form mpirun's -H takes.
std::string FormatHostList(const std::vector<HostSlots>& hosts);

int TotalSlots(const std::vector<HostSlots>& hosts);

}  // namespace accord::launcher
