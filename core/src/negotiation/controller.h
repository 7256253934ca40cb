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
//   5. Shutdown: a rank that asks to stop also forces step 3 and sends its
//      reason; rank 0 puts "shut down by rank R (why)" for the lowest such
//      rank into the ResponseList, so every rank stops with the same message.
//      A rank whose coordinator failed asks to stop with a "failed" flag as
//      well: the AND tells every rank that nothing agreed in this round may
//      run (that rank will not take part), and rank 0 names the lowest
//      failed rank's reason in preference to any other.
//   Carried allreduce: where a rank's one announcement of a round is a small
//      cached allreduce, the Carrier may send its input with the bits
//      (ControlTransport::AllreduceBitAndCarrying). When the AND agrees on
//      that tensor alone, with no messages, and every rank carried its input
//      of it, RoundResult::carried holds every rank's input and the runtime
//      reduces them itself (in rank order, alike on every rank) instead of
//      running the collective: one exchange instead of two.
//   6. Stall inspector (StallOptions): a cached request pending here longer
//      than the check time is re-announced as a message, so rank 0's table
//      sees exactly which ranks have it; rank 0 warns about tensors some
//      ranks announced and others not, and past the shutdown time stops the
//      job as in 5 with the report as the reason.
// Used by the coordinator thread only. Never calls MPI directly.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/spare_nodes.h"
#include "negotiation/control_transport.h"
#include "negotiation/message.h"
#include "negotiation/message_table.h"
#include "negotiation/response_cache.h"

namespace accord {

struct RoundResult {
  std::vector<Response> ready;         // identical on every rank, in execution order
  bool shutdown = false;               // some rank asked to shut down: stop after executing `ready`
  bool failed = false;                 // some rank's coordinator failed (implies `shutdown`): do not
                                       // execute `ready`; its operations fail with `stop_message`
  bool any_progress = false;           // some rank reported progress (see RunRound)
  std::string stop_message;            // with `shutdown`: why, naming the rank that asked first (or
                                       // the stall inspector's report); the same on every rank
  bool stopped_by_error = false;       // with `shutdown`: an error ends the job (the stall inspector,
                                       // a failed coordinator, a stalled process set), not a shutdown
  std::string stall_warning;           // rank 0 only: the stall report it logged this round, if any
  std::optional<TuningChoice> tuning;  // parameters rank 0 sent this round: apply them now
  // Where not empty: `ready` is one allreduce, and these are every rank's
  // inputs of it (by rank of the set), carried with the round's bits.
  std::vector<std::string> carried;
};

// Appends this rank's input of `request` to `*data` and returns true if it
// may be carried with the round's bits (Controller::SetCarrier); false leaves
// it to the collective.
using Carrier = std::function<bool(const Request& request, std::string* data)>;

// The stall inspector's times, in seconds; <= 0 turns a part off.
struct StallOptions {
  double check_seconds = 0;     // warn about (and re-announce) tensors pending this long
  double shutdown_seconds = 0;  // stop the job when a tensor has been stalled this long
};

class Controller {
 public:
  Controller(ControlTransport* transport, int cache_capacity, StallOptions stall = {});

  // One round. `new_requests` became ready on this rank since the last round
  // (names unique among pending ones; the tensor queue guarantees it).
  // `progress` is ORed over the ranks into RoundResult::any_progress (the
  // runtime uses it to tell a quiet job from a busy one). `shutdown_reason`
  // says why this rank asks to stop ("it called Shutdown" if empty); a
  // reason given makes the stop an error's (RoundResult::stopped_by_error).
  // `tuning` (rank 0 only; ignored elsewhere) is sent to every rank in this
  // round's response list, forcing a full round, and comes back in
  // RoundResult::tuning on every rank. `failed`: this rank's coordinator
  // failed and asks to stop (with `request_shutdown`); `shutdown_reason` is
  // then the whole explanation, naming the rank, and the stop message is
  // "accord stopped: <shutdown_reason>".
  Result<RoundResult> RunRound(std::vector<Request> new_requests, bool request_shutdown, bool progress = false,
                               const std::string& shutdown_reason = {},
                               const std::optional<TuningChoice>& tuning = std::nullopt, bool failed = false);
  // Turns the response cache off (emptied; every request is then negotiated
  // in full) or back on (empty). Every rank of the set must call it between
  // the same two rounds, so that cache slots stay identical.
  void SetCacheEnabled(bool enabled) { cache_.SetEnabled(enabled); }
  // Offers small cached allreduces to `carrier` (see the top of this file);
  // none when it is empty. Ranks may differ: an input is used only where
  // every rank carried it.
  void SetCarrier(Carrier carrier) { carrier_ = std::move(carrier); }

  // Hands back a round's ready list once it has run. The next rounds copy
  // cached responses into these, reusing their memory instead of
  // allocating it (at most kSpareResponses are kept).
  void Recycle(std::vector<Response> ready);
  static constexpr size_t kSpareResponses = 1024;

  int rank() const { return transport_->rank(); }
  int size() const { return transport_->size(); }
  size_t num_pending() const { return pending_.size(); }
  const ResponseCache& cache() const { return cache_; }
  // Requests this controller announced as a cache bit (hits) and cacheable
  // requests it announced as a full message (misses), since construction.
  uint64_t cache_hits() const { return cache_hits_; }
  uint64_t cache_misses() const { return cache_misses_; }

 private:
  using Clock = std::chrono::steady_clock;
  struct Pending {
    Request request;
    bool sent = false;         // announced to the coordinator as a message
    Clock::time_point since;   // when it became pending here
    bool hit_counted = false;  // cache_hits_ counts it once, however many rounds it waits
  };
  using PendingMap = std::unordered_map<std::string, Pending>;
  // Adds (or replaces) the pending request of its name, in a spare node if
  // there is one: a round of cached tensors then allocates no pending nodes.
  void AddPending(Request request, Clock::time_point now);
  // Step 1: fills `bits` with cache hits and returns the messages to send;
  // `hits` gets each hit's slot and request.
  std::vector<Request> SortPending(std::vector<uint64_t>* bits, Clock::time_point now,
                                   std::vector<std::pair<uint32_t, const Request*>>* hits);
  // This rank's [slot + 1 (4 bytes) | input] to carry, or empty.
  std::string CarryOf(const std::vector<std::pair<uint32_t, const Request*>>& hits) const;
  // Every rank's input where all carried slot `slot`'s tensor, else empty.
  std::vector<std::string> CarriedInputs(uint32_t slot, std::vector<std::string> carried) const;
  // Step 3: gather, decide on rank 0, broadcast. `stop_reason`: why this rank
  // asks to stop (empty: it does not); `failed`: because its coordinator
  // failed; `stall_stop`: rank 0's stall report when the inspector stops the job.
  Result<ResponseList> Exchange(const std::vector<Request>& messages, const std::string& stop_reason, bool failed,
                                const std::string& stall_stop, const std::optional<TuningChoice>& tuning);
  // Step 6 on rank 0: logs a report now and then (returned in *warning);
  // sets *stop to the report once a tensor has waited the shutdown time.
  void InspectStalls(Clock::time_point now, std::string* warning, std::string* stop);
  // Step 4 (cached part): fills ready_slots_ with the hits ready everywhere
  // (groups complete).
  void ReadyHits(const std::vector<uint64_t>& bits);
  void ApplyCacheUpdates(const std::vector<uint32_t>& hits, const ResponseList& list);
  // Fills result->ready with the responses of `hits` (from the cache) and
  // of `list`, in that order, copied into spare responses where there are.
  void FillReady(const std::vector<uint32_t>& hits, const ResponseList& list, RoundResult* result);

  ControlTransport* transport_;
  ResponseCache cache_;
  PendingMap pending_;
  SpareNodes<PendingMap> spare_pending_;  // taken out of pending_ when ready, kept for AddPending
  std::unique_ptr<MessageTable> table_;   // rank 0 only
  bool join_active_ = false;              // some rank has joined: no caching until the join completes
  StallOptions stall_;
  std::optional<Clock::time_point> last_stall_warning_;  // rank 0
  uint64_t cache_hits_ = 0;
  uint64_t cache_misses_ = 0;
  Carrier carrier_;
  // Each round's working lists, kept so that a round of one cached tensor
  // allocates none of them (each is cleared where it is filled).
  std::vector<uint64_t> bits_;
  std::vector<std::pair<uint32_t, const Request*>> announced_hits_;
  std::vector<std::pair<Pending*, std::optional<uint32_t>>> unsent_;
  std::vector<Pending*> to_send_;
  std::vector<uint32_t> hit_slots_;
  std::vector<uint32_t> ready_slots_;
  std::vector<Response> spare_responses_;  // handed back by Recycle
};

bool IsCacheable(OpType type);

// "allreduce 'x' (waiting 2.1 s): submitted by rank 0; missing on ranks 1, 2",
// one such part per tensor, joined by " | ".
std::string StallReport(const std::vector<StalledTensor>& stalled);

}  // namespace accord
