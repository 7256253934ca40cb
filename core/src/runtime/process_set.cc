#include "runtime/process_set.h"

namespace accord {

std::string ProcessSet::AutoName(const char* op) {
  std::lock_guard<std::mutex> lock(names_mutex_);
  return std::string(op) + ".noname." + std::to_string(unnamed_counts_[op]++);
}

}  // namespace accord
