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

}  // namespace accord
