// MessageTable: the coordinator rank's record of which rank announced what.
//
// Lives on rank 0 of a process set only, used by the coordinator thread only.
// Requests arrive by name from each rank; once every rank that has not
// joined has announced a name, the table checks that the ranks agree and
// emits a Response (a plan, or a kMismatch error naming the tensor, the ranks
// and their values). Members of a group are released together, once the
// whole group is complete. Join requests are tracked here too.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "negotiation/message.h"

namespace accord {

// A tensor some ranks have announced and others not (see Stalled()).
struct StalledTensor {
  std::string name;
  OpType type = OpType::kAllreduce;
  std::vector<int> submitted;  // ranks that announced it (joined ranks count as present)
  std::vector<int> missing;    // ranks that have not
  double waited_seconds = 0;   // since the first announcement reached the table
};

class MessageTable {
 public:
  using Clock = std::chrono::steady_clock;

  explicit MessageTable(int size) : size_(size) {}

  // Records `request` from `rank`. Returns true if this was the first join
  // of a join phase (every rank then clears its response cache).
  bool Add(int rank, const Request& request);
  // Appends the responses that became ready, in a deterministic order.
  void TakeReady(std::vector<Response>* out);
  bool any_joined() const { return !joined_.empty(); }
  // The incomplete entries first announced at least `min_seconds` before
  // `now`, longest waiting first (the stall inspector's view).
  std::vector<StalledTensor> Stalled(Clock::time_point now, double min_seconds) const;

 private:
  struct Entry {
    std::vector<std::optional<Request>> by_rank;
    int count = 0;
    uint64_t order = 0;       // first arrival, for a stable release order
    Clock::time_point since;  // first arrival, for the stall inspector
  };
  bool Complete(const Entry& entry) const;
  Response Build(const std::string& name, const Entry& entry) const;

  const int size_;
  uint64_t next_order_ = 0;
  std::map<std::string, Entry> entries_;
  std::set<int> joined_;
  int last_joined_ = -1;
};

// Checks that all given requests for one name agree and builds the plan.
// `requests[r]` is rank r's request, or nullopt for a joined rank.
Response BuildResponse(const std::string& name, const std::vector<std::optional<Request>>& requests,
                       const std::set<int>& joined);

}  // namespace accord
