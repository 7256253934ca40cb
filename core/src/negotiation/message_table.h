// MessageTable: the coordinator rank's record of which rank announced what.
//
// Lives on rank 0 of a process set only, used by the coordinator thread only.
// Requests arrive by name from each rank; once every rank that has not
// joined has announced a name, the table checks that the ranks agree and
// emits a Response (a plan, or a kMismatch error naming the tensor, the ranks
// and their values). Members of a group are released together, once the
// whole group is complete. Join requests are tracked here too.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "negotiation/message.h"

namespace accord {

class MessageTable {
 public:
  explicit MessageTable(int size) : size_(size) {}

  // Records `request` from `rank`. Returns true if this was the first join
  // of a join phase (every rank then clears its response cache).
  bool Add(int rank, const Request& request);
  // Appends the responses that became ready, in a deterministic order.
  void TakeReady(std::vector<Response>* out);
  bool any_joined() const { return !joined_.empty(); }

 private:
  struct Entry {
    std::vector<std::optional<Request>> by_rank;
    int count = 0;
    uint64_t order = 0;  // first arrival, for a stable release order
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
