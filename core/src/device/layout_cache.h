// LayoutCache: which of the last segment lists of a stream's pack/unpack
// launches (device/copy_plan.h) the device still holds.
//
// A fused batch packed step after step has the same layout: the same
// tensors at the same addresses, into the same places of the fusion buffer.
// Its segment list is then the same, byte for byte, and so is the table the
// kernel reads. The CUDA stream keeps the tables of up to kEntries lists in
// device memory (device/cuda/segment_table.h) and uploads a list only when
// it is none of them, so that in a training loop the upload leaves the
// critical path after the first step. This class is the bookkeeping, free of
// any device so that it is tested on the host.
//
// Used by one thread at a time (the stream's feeder).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "device/copy_plan.h"

namespace accord {

class LayoutCache {
 public:
  // Lists kept at most, and the longest list kept (longer ones go through a
  // table of their own, uploaded every time).
  static constexpr size_t kEntries = 64;
  static constexpr size_t kMaxSegments = 4096;

  struct Slot {
    size_t entry;  // in [0, kEntries)
    bool hit;      // the entry already holds the list
  };
  // The entry that holds `segments` (a hit), or else the one to upload them
  // into (a miss: a new entry, or the one used least recently), which from
  // now on counts as holding them. Nothing for a list longer than
  // kMaxSegments or an empty one.
  std::optional<Slot> Find(const std::vector<CopySegment>& segments);
  // The upload into `entry` failed: it holds nothing known.
  void Forget(size_t entry);
  // Entries made so far.
  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    std::vector<CopySegment> segments;  // empty: holds nothing known
    uint64_t used = 0;                  // clock_ at its last Find
  };
  bool Holds(const Entry& entry, const std::vector<CopySegment>& segments) const;

  std::vector<Entry> entries_;
  uint64_t clock_ = 0;
  size_t last_ = 0;  // the entry of the last Find, tried first
};

}  // namespace accord
