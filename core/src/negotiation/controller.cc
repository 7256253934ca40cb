#include "negotiation/controller.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <set>

#include "common/logging.h"

namespace accord {

namespace {
constexpr uint64_t kFlagHasMessages = 1;
constexpr uint64_t kFlagShutdown = 2;
constexpr uint64_t kFlagProgress = 4;
constexpr uint64_t kFlagFailed = 8;
// The stop is an error's (a failure, the stall inspector, a stalled process
// set), not a shutdown the ranks asked for.
constexpr uint64_t kFlagStopError = 16;
}  // namespace

bool IsCacheable(OpType type) {
  switch (type) {
    case OpType::kAllreduce:
    case OpType::kAllgather:
    case OpType::kBroadcast:
    case OpType::kAlltoall:
    case OpType::kReducescatter: return true;
    default: return false;
  }
}

namespace {
std::string Ranks(const std::vector<int>& ranks) {
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  return out;
}
}  // namespace

std::string StallReport(const std::vector<StalledTensor>& stalled) {
  std::string out;
  for (const auto& s : stalled) {
    char waited[32];
    std::snprintf(waited, sizeof(waited), "%.1f", s.waited_seconds);
    out += (out.empty() ? "" : " | ") + std::string(OpTypeName(s.type)) + " '" + s.name + "' (waiting " + waited +
           " s): submitted by " + Ranks(s.submitted) + "; missing on " + Ranks(s.missing);
  }
  return out;
}

Controller::Controller(ControlTransport* transport, int cache_capacity, StallOptions stall)
    : transport_(transport), cache_(cache_capacity), stall_(stall) {
  if (transport_->rank() == 0) table_ = std::make_unique<MessageTable>(transport_->size());
}

void Controller::AddPending(Request request, Clock::time_point now) {
  if (spare_pending_.empty()) {
    std::string name = request.name;
    pending_.insert_or_assign(std::move(name), Pending{std::move(request), false, now});
    return;
  }
  PendingMap::node_type node = spare_pending_.Take();
  node.key() = request.name;
  Pending& p = node.mapped();
  p.request = std::move(request);
  p.sent = false;
  p.since = now;
  p.hit_counted = false;
  auto inserted = pending_.insert(std::move(node));
  if (inserted.inserted) return;
  inserted.position->second = std::move(inserted.node.mapped());
  spare_pending_.Keep(std::move(inserted.node));
}

std::vector<Request> Controller::SortPending(std::vector<uint64_t>* bits, Clock::time_point now,
                                             std::vector<std::pair<uint32_t, const Request*>>* hits) {
  // A group goes as bits only if every member hits; otherwise all of its
  // unsent members go as messages, so the coordinator sees the group whole.
  std::vector<std::pair<Pending*, std::optional<uint32_t>>>& unsent = unsent_;
  unsent.clear();
  std::set<std::string> groups_with_miss;
  for (auto& [name, p] : pending_) {
    if (p.sent) {
      // Part of the group already went as a message: the rest must follow.
      if (!p.request.group.empty()) groups_with_miss.insert(p.request.group);
      continue;
    }
    std::optional<uint32_t> slot;
    // A request waiting here longer than the stall check time goes as a
    // message even if cached: a bit set on some ranks only is lost in the
    // AND, a message tells rank 0 exactly who has the tensor (step 6).
    const bool stalled =
        stall_.check_seconds > 0 && std::chrono::duration<double>(now - p.since).count() >= stall_.check_seconds;
    if (IsCacheable(p.request.type) && !join_active_ && !stalled) slot = cache_.Lookup(name, p.request);
    if (!slot && !p.request.group.empty()) groups_with_miss.insert(p.request.group);
    unsent.emplace_back(&p, slot);
  }
  std::vector<Pending*>& to_send = to_send_;
  to_send.clear();
  for (auto& [p, slot] : unsent) {
    if (slot && (p->request.group.empty() || !groups_with_miss.count(p->request.group))) {
      (*bits)[1 + *slot / 64] |= uint64_t{1} << (*slot % 64);
      hits->emplace_back(*slot, &p->request);
      if (!p->hit_counted) ++cache_hits_;
      p->hit_counted = true;
    } else {
      if (IsCacheable(p->request.type) && !join_active_) ++cache_misses_;
      to_send.push_back(p);
    }
  }
  // Messages go out in name order, whatever the order of the pending table.
  std::sort(to_send.begin(), to_send.end(),
            [](const Pending* a, const Pending* b) { return a->request.name < b->request.name; });
  std::vector<Request> messages;
  messages.reserve(to_send.size());
  for (Pending* p : to_send) {
    p->sent = true;
    messages.push_back(p->request);
  }
  return messages;
}

void Controller::InspectStalls(Clock::time_point now, std::string* warning, std::string* stop) {
  const std::vector<StalledTensor> stalled = table_->Stalled(now, stall_.check_seconds);
  if (stalled.empty()) return;
  const std::string report = StallReport(stalled);
  if (stall_.shutdown_seconds > 0 && stalled.front().waited_seconds >= stall_.shutdown_seconds) *stop = report;
  if (last_stall_warning_ && std::chrono::duration<double>(now - *last_stall_warning_).count() < stall_.check_seconds) {
    return;
  }
  last_stall_warning_ = now;
  *warning = report;
  char limit[64] = "";
  if (stall_.shutdown_seconds > 0) {
    std::snprintf(limit, sizeof(limit), " (the job stops once a tensor has waited %g s)", stall_.shutdown_seconds);
  }
  ACCORD_LOG(kWarning) << "stall: some ranks have submitted tensors that others have not: " << report << limit;
}

Result<ResponseList> Controller::Exchange(const std::vector<Request>& messages, const std::string& stop_reason,
                                          bool failed, const std::string& stall_stop,
                                          const std::optional<TuningChoice>& tuning) {
  // Each rank sends [why it asks to stop, or "" | whether it failed | its messages].
  std::vector<std::string> gathered;
  ACCORD_RETURN_IF_ERROR(transport_->Gather(SerializeEnvelope(stop_reason, failed, messages), &gathered));
  std::string reply;
  if (table_) {
    ResponseList list;
    list.tuning = tuning;
    if (!stall_stop.empty()) list.stop_message = "accord was stopped by the stall inspector: " + stall_stop;
    std::set<std::string> evicted;
    bool failure_named = false;
    for (int r = 0; r < static_cast<int>(gathered.size()) && list.fatal_error.empty(); ++r) {
      Result<RankEnvelope> envelope = DeserializeEnvelope(gathered[r]);
      if (!envelope.ok()) {
        // Tell every rank, rather than leave them waiting for the broadcast.
        list.fatal_error =
            "rank " + std::to_string(r) + " sent a bad negotiation message: " + envelope.status().message();
        break;
      }
      // Ranks are visited in order: the lowest rank that failed is named,
      // else the lowest that asked to stop (else the stall inspector).
      const std::string& reason = envelope->stop_reason;
      if (envelope->failed && !failure_named) {
        list.stop_message = "accord stopped: " + reason;
        failure_named = true;
      } else if (!reason.empty() && list.stop_message.empty()) {
        list.stop_message = "accord was shut down by rank " + std::to_string(r) + " (" + reason + ")";
      }
      for (const auto& req : envelope->requests) {
        if (table_->Add(r, req)) list.join_started = true;
        // A rank whose request differs from the cached one (or that has
        // waited the stall check time for it) sends it as a message;
        // everyone drops the cache entry and re-announces in full.
        if (cache_.Contains(req.name) && evicted.insert(req.name).second) list.evictions.push_back(req.name);
      }
    }
    table_->TakeReady(&list.responses);
    reply = SerializeResponseList(list);
  }
  ACCORD_RETURN_IF_ERROR(transport_->Broadcast(&reply));
  ACCORD_ASSIGN_OR_RETURN(ResponseList list, DeserializeResponseList(reply));
  if (!list.fatal_error.empty()) return Status::Internal(list.fatal_error);
  return list;
}

void Controller::ReadyHits(const std::vector<uint64_t>& bits) {
  std::vector<uint32_t>& hits = hit_slots_;
  hits.clear();
  std::map<std::string, int> group_count;
  for (uint32_t slot = 0; slot < cache_.num_slots(); ++slot) {
    if (!(bits[1 + slot / 64] >> (slot % 64) & 1)) continue;
    hits.push_back(slot);
    const Response& r = cache_.Get(slot);
    if (!r.group.empty()) ++group_count[r.group];
  }
  ready_slots_.clear();
  for (uint32_t slot : hits) {
    const Response& r = cache_.Get(slot);
    if (r.group.empty() || group_count[r.group] >= r.group_size) ready_slots_.push_back(slot);
  }
}

void Controller::ApplyCacheUpdates(const std::vector<uint32_t>& hits, const ResponseList& list) {
  for (uint32_t slot : hits) cache_.Touch(slot);
  if (list.join_started) {
    cache_.Clear();
    join_active_ = true;
  }
  for (const auto& name : list.evictions) cache_.Erase(name);
  for (const auto& r : list.responses) {
    if (r.type == OpType::kJoin) join_active_ = false;
    if (!r.ok() || !IsCacheable(r.type) || join_active_) continue;
    auto it = pending_.find(r.name);
    // Every rank puts, in the same order, so slots stay identical; a rank
    // without the tensor (impossible outside a join) stores no request.
    cache_.Put(r, it == pending_.end() ? std::nullopt : std::optional<Request>(std::move(it->second.request)));
  }
}

void Controller::FillReady(const std::vector<uint32_t>& hits, const ResponseList& list, RoundResult* result) {
  const size_t n = hits.size() + list.responses.size();
  if (n == 0) return;
  std::vector<Response>& ready = result->ready;
  ready.swap(spare_responses_);
  while (ready.size() > n) {  // more spare than needed: keep the rest
    spare_responses_.push_back(std::move(ready.back()));
    ready.pop_back();
  }
  ready.reserve(n);
  size_t i = 0;
  auto copy = [&](const Response& from) {
    if (i < ready.size()) {
      ready[i] = from;  // copy-assigned: the strings and vectors keep their memory
    } else {
      ready.push_back(from);
    }
    ++i;
  };
  for (uint32_t slot : hits) copy(cache_.Get(slot));
  for (const auto& r : list.responses) copy(r);
}

void Controller::Recycle(std::vector<Response> ready) {
  if (ready.size() > spare_responses_.size()) ready.swap(spare_responses_);
  for (Response& r : ready) {
    if (spare_responses_.size() >= kSpareResponses) break;
    spare_responses_.push_back(std::move(r));
  }
}

std::string Controller::CarryOf(const std::vector<std::pair<uint32_t, const Request*>>& hits) const {
  if (!carrier_ || hits.size() != 1) return {};
  const auto& [slot, request] = hits.front();
  if (request->type != OpType::kAllreduce || !request->group.empty()) return {};
  const uint32_t tag = slot + 1;
  std::string carry(reinterpret_cast<const char*>(&tag), sizeof(tag));
  if (!carrier_(*request, &carry) || carry.size() > ControlTransport::kCarryBytes) return {};
  return carry;
}

std::vector<std::string> Controller::CarriedInputs(uint32_t slot, std::vector<std::string> carried) const {
  // A rank tags a slot only for a request equal to its cached one and only
  // for an allreduce outside a group (CarryOf): the slot's response is one.
  const Response& r = cache_.Get(slot);
  const uint64_t expected = sizeof(uint32_t) + static_cast<uint64_t>(NumElements(r.shape)) * DataTypeSize(r.dtype);
  for (const std::string& c : carried) {
    uint32_t tag = 0;
    if (c.size() != expected) return {};
    std::memcpy(&tag, c.data(), sizeof(tag));
    if (tag != slot + 1) return {};
  }
  for (std::string& c : carried) c.erase(0, sizeof(uint32_t));
  return carried;
}

Result<RoundResult> Controller::RunRound(std::vector<Request> new_requests, bool request_shutdown, bool progress,
                                         const std::string& shutdown_reason, const std::optional<TuningChoice>& tuning,
                                         bool failed) {
  const Clock::time_point now = Clock::now();
  const bool any_new = !new_requests.empty();
  for (auto& req : new_requests) AddPending(std::move(req), now);
  RoundResult result;
  // Step 6 (rank 0): may decide to stop the job.
  std::string stall_stop;
  if (table_ && stall_.check_seconds > 0) InspectStalls(now, &result.stall_warning, &stall_stop);
  // Step 1 and 2: flags are inverted so that AND yields "no rank has it".
  std::vector<uint64_t>& bits = bits_;
  bits.assign(1 + (cache_.num_slots() + 63) / 64, 0);
  std::vector<std::pair<uint32_t, const Request*>>& announced_hits = announced_hits_;
  announced_hits.clear();
  std::vector<Request> messages = SortPending(&bits, now, &announced_hits);
  std::string stop_reason;
  if (request_shutdown || failed) stop_reason = shutdown_reason.empty() ? "it called Shutdown" : shutdown_reason;
  uint64_t flags = 0;
  if (!messages.empty()) flags |= kFlagHasMessages;
  // A rank that stops the job sends why (step 5).
  if (!stop_reason.empty() || !stall_stop.empty()) flags |= kFlagShutdown | kFlagHasMessages;
  if (failed) flags |= kFlagFailed;
  if (failed || !stall_stop.empty() || (request_shutdown && !shutdown_reason.empty())) flags |= kFlagStopError;
  if (progress || any_new) flags |= kFlagProgress;
  // Rank 0 sends new tuning parameters in the response list.
  const bool send_tuning = table_ != nullptr && tuning.has_value();
  if (send_tuning) flags |= kFlagHasMessages;
  bits[0] = ~flags;
  // A lone small allreduce travels with the bits (see the header), unless
  // this rank has more to say this round.
  const std::string carry = (flags & kFlagHasMessages) ? std::string() : CarryOf(announced_hits);
  std::vector<std::string> carried;
  ACCORD_RETURN_IF_ERROR(transport_->AllreduceBitAndCarrying(&bits, carry, &carried));
  const uint64_t any = ~bits[0];

  // Step 3.
  ResponseList list;
  if (any & kFlagHasMessages) {
    ACCORD_ASSIGN_OR_RETURN(list, Exchange(messages, stop_reason, failed, stall_stop,
                                           send_tuning ? tuning : std::optional<TuningChoice>()));
  }
  result.tuning = list.tuning;
  // Step 4.
  result.shutdown = (any & kFlagShutdown) != 0;
  result.failed = (any & kFlagFailed) != 0;
  if (result.shutdown) result.stop_message = list.stop_message.empty() ? "accord was shut down" : list.stop_message;
  result.stopped_by_error = result.shutdown && (any & kFlagStopError) != 0;
  ReadyHits(bits);
  const std::vector<uint32_t>& hits = ready_slots_;
  result.any_progress = (any & kFlagProgress) != 0 || !hits.empty() || !list.responses.empty();
  FillReady(hits, list, &result);
  // The same facts on every rank (the AND, the flags, what each carried),
  // so every rank decides alike.
  if (!carried.empty() && hits.size() == 1 && result.ready.size() == 1 &&
      !(any & (kFlagHasMessages | kFlagShutdown | kFlagFailed))) {
    result.carried = CarriedInputs(hits.front(), std::move(carried));
  }
  ApplyCacheUpdates(hits, list);
  for (const auto& r : result.ready) spare_pending_.Keep(pending_.extract(r.name));
  return result;
}

}  // namespace accord
