#include "runtime/process_set.h"

namespace accord {

std::string ProcessSet::AutoName(const char* op) {
  std::lock_guard<std::mutex> lock(names_mutex_);
  return std::string(op) + ".noname." + std::to_string(unnamed_counts_[op]++);
}

ProcessSet::AutoNamer::AutoNamer(ProcessSet& set, const char* op)
    : lock_(set.names_mutex_), count_(set.unnamed_counts_[op]) {
  name_ = std::string(op) + ".noname." + std::to_string(count_);
}

void ProcessSet::AutoNamer::Commit() { ++count_; }

void ProcessSet::CatchUpAutoName(const std::string& name) {
  static const std::string kMarker = ".noname.";
  const size_t at = name.rfind(kMarker);
  if (at == std::string::npos || at == 0) return;
  const size_t digits = at + kMarker.size();
  const size_t length = name.size() - digits;
  if (length == 0 || length > 18 || name.find_first_not_of("0123456789", digits) != std::string::npos) return;
  const uint64_t next = std::stoull(name.substr(digits)) + 1;
  std::lock_guard<std::mutex> lock(names_mutex_);
  uint64_t& count = unnamed_counts_[name.substr(0, at)];
  if (count < next) count = next;
}

}  // namespace accord
