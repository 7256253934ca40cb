#include "device/layout_cache.h"

#include <cstring>

namespace accord {

bool LayoutCache::Holds(const Entry& entry, const std::vector<CopySegment>& segments) const {
  // CopySegment is two pointers and two int64: no padding, so equal lists
  // are equal bytes.
  static_assert(sizeof(CopySegment) == 2 * sizeof(void*) + 2 * sizeof(int64_t), "CopySegment has padding");
  return entry.segments.size() == segments.size() &&
         std::memcmp(entry.segments.data(), segments.data(), segments.size() * sizeof(CopySegment)) == 0;
}

std::optional<LayoutCache::Slot> LayoutCache::Find(const std::vector<CopySegment>& segments) {
  if (segments.empty() || segments.size() > kMaxSegments) return std::nullopt;
  ++clock_;
  // A training loop repeats its last layouts: the last one first, then the rest.
  if (last_ < entries_.size() && Holds(entries_[last_], segments)) {
    entries_[last_].used = clock_;
    return Slot{last_, true};
  }
  for (size_t i = 0; i < entries_.size(); ++i) {
    if (i != last_ && Holds(entries_[i], segments)) {
      entries_[i].used = clock_;
      last_ = i;
      return Slot{i, true};
    }
  }
  size_t entry = entries_.size();
  if (entries_.size() < kEntries) {
    entries_.emplace_back();
  } else {
    entry = 0;
    for (size_t i = 1; i < entries_.size(); ++i) {
      if (entries_[i].used < entries_[entry].used) entry = i;
    }
  }
  Entry& e = entries_[entry];
  e.segments = segments;
  e.used = clock_;
  last_ = entry;
  return Slot{entry, false};
}

void LayoutCache::Forget(size_t entry) {
  if (entry >= entries_.size()) return;
  entries_[entry].segments.clear();
  entries_[entry].used = 0;
}

}  // namespace accord
