// Controller: runs the negotiation rounds of one process set on one rank.
//
// Every rank of the set calls RunRound the same number of times, in step;
// each call is one round of the protocol in docs/negotiation.md:
//   1. Sort this rank's pending requests: those whose exact request is in the
//      response cache become bits; the others (not yet sent) become messages.
//   2. One bitwise-AND allreduce of [inverted flags | cache bits]: every rank
//      learns which cached tensors are ready everywhere, whether any rank has
//      uncached messages, and whether any rank asked to shut down.
//   3. Only if some rank has messages: gather them on rank 0 (the
//      coordinator), which records them in its MessageTable, decides, and
//      broadcasts a ResponseList (new plans or errors, cache evictions).
//   4. Every rank derives the same ordered list of ready responses (cached
//      hits by slot, then the new ones), and applies the same cache updates.
// Used by the coordinator thread only. Never calls MPI directly.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "negotiation/control_transport.h"
#include "negotiation/message.h"
#include "negotiation/message_table.h"
#include "negotiation/response_cache.h"

namespace accord {

struct RoundResult {
  std::vector<Response> ready;  // identical on every rank, in execution order
  bool shutdown = false;        // some rank asked to shut down: stop after executing `ready`
  bool any_progress = false;    // some rank reported progress (see RunRound)
};

class Controller {
 public:
  Controller(ControlTransport* transport, int cache_capacity);

  // One round. `new_requests` became ready on this rank since the last round
  // (names unique among pending ones; the tensor queue guarantees it).
  // `progress` is ORed over the ranks into RoundResult::any_progress (the
  // runtime uses it to tell a quiet job from a busy one).
  Result<RoundResult> RunRound(std::vector<Request> new_requests, bool request_shutdown, bool progress = false);

  int rank() const { return transport_->rank(); }
  int size() const { return transport_->size(); }
  size_t num_pending() const { return pending_.size(); }
  const ResponseCache& cache() const { return cache_; }

 private:
  struct Pending {
    Request request;
    bool sent = false;  // announced to the coordinator as a message
  };
  // Step 1: fills `bits` with cache hits and returns the messages to send.
  std::vector<Request> SortPending(std::vector<uint64_t>* bits);
  // Step 3: gather, decide on rank 0, broadcast.
  Result<ResponseList> Exchange(const std::vector<Request>& messages);
  // Step 4 (cached part): hits ready everywhere, groups complete.
  std::vector<uint32_t> ReadyHits(const std::vector<uint64_t>& bits) const;
  void ApplyCacheUpdates(const std::vector<uint32_t>& hits, const ResponseList& list);

  ControlTransport* transport_;
  ResponseCache cache_;
  std::unordered_map<std::string, Pending> pending_;
  std::unique_ptr<MessageTable> table_;  // rank 0 only
  bool join_active_ = false;             // some rank has joined: no caching until the join completes
};

bool IsCacheable(OpType type);

}  // namespace accord
