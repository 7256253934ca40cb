#include "negotiation/controller.h"

#include <algorithm>
#include <set>

namespace accord {

namespace {
constexpr uint64_t kFlagHasMessages = 1;
constexpr uint64_t kFlagShutdown = 2;
constexpr uint64_t kFlagProgress = 4;
}  // namespace

bool IsCacheable(OpType type) {
  switch (type) {
    case OpType::kAllreduce:
    case OpType::kAllgather:
    case OpType::kBroadcast:
    case OpType::kAlltoall:
    case OpType::kReducescatter:
      return true;
    default:
      return false;
  }
}

Controller::Controller(ControlTransport* transport, int cache_capacity)
    : transport_(transport), cache_(cache_capacity) {
  if (transport_->rank() == 0) table_ = std::make_unique<MessageTable>(transport_->size());
}

std::vector<Request> Controller::SortPending(std::vector<uint64_t>* bits) {
  // A group goes as bits only if every member hits; otherwise all of its
  // unsent members go as messages, so the coordinator sees the group whole.
  std::vector<std::pair<Pending*, std::optional<uint32_t>>> unsent;
  std::set<std::string> groups_with_miss;
  for (auto& [name, p] : pending_) {
    if (p.sent) {
      // Part of the group already went as a message: the rest must follow.
      if (!p.request.group.empty()) groups_with_miss.insert(p.request.group);
      continue;
    }
    std::optional<uint32_t> slot;
    if (IsCacheable(p.request.type) && !join_active_) slot = cache_.Lookup(name, p.request);
    if (!slot && !p.request.group.empty()) groups_with_miss.insert(p.request.group);
    unsent.emplace_back(&p, slot);
  }
  std::vector<Pending*> to_send;
  for (auto& [p, slot] : unsent) {
    if (slot && (p->request.group.empty() || !groups_with_miss.count(p->request.group))) {
      (*bits)[1 + *slot / 64] |= uint64_t{1} << (*slot % 64);
    } else {
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

Result<ResponseList> Controller::Exchange(const std::vector<Request>& messages) {
  std::vector<std::string> gathered;
  ACCORD_RETURN_IF_ERROR(transport_->Gather(SerializeRequests(messages), &gathered));
  std::string reply;
  if (table_) {
    ResponseList list;
    std::set<std::string> evicted;
    for (int r = 0; r < static_cast<int>(gathered.size()) && list.fatal_error.empty(); ++r) {
      auto requests = DeserializeRequests(gathered[r]);
      if (!requests.ok()) {
        // Tell every rank, rather than leave them waiting for the broadcast.
        list.fatal_error = "rank " + std::to_string(r) + " sent a bad negotiation message: " +
                           requests.status().message();
        break;
      }
      for (const auto& req : *requests) {
        if (table_->Add(r, req)) list.join_started = true;
        // A rank whose request differs from the cached one sends it as a
        // message; everyone drops the stale entry and re-announces in full.
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

std::vector<uint32_t> Controller::ReadyHits(const std::vector<uint64_t>& bits) const {
  std::vector<uint32_t> hits;
  std::map<std::string, int> group_count;
  for (uint32_t slot = 0; slot < cache_.num_slots(); ++slot) {
    if (!(bits[1 + slot / 64] >> (slot % 64) & 1)) continue;
    hits.push_back(slot);
    const Response& r = cache_.Get(slot);
    if (!r.group.empty()) ++group_count[r.group];
  }
  std::vector<uint32_t> ready;
  for (uint32_t slot : hits) {
    const Response& r = cache_.Get(slot);
    if (r.group.empty() || group_count[r.group] >= r.group_size) ready.push_back(slot);
  }
  return ready;
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

Result<RoundResult> Controller::RunRound(std::vector<Request> new_requests, bool request_shutdown, bool progress) {
  for (auto& req : new_requests) {
    std::string name = req.name;
    pending_.insert_or_assign(std::move(name), Pending{std::move(req), false});
  }
  // Step 1 and 2: flags are inverted so that AND yields "no rank has it".
  std::vector<uint64_t> bits(1 + (cache_.num_slots() + 63) / 64, 0);
  std::vector<Request> messages = SortPending(&bits);
  uint64_t flags = 0;
  if (!messages.empty()) flags |= kFlagHasMessages;
  if (request_shutdown) flags |= kFlagShutdown;
  if (progress || !new_requests.empty()) flags |= kFlagProgress;
  bits[0] = ~flags;
  ACCORD_RETURN_IF_ERROR(transport_->AllreduceBitAnd(&bits));
  const uint64_t any = ~bits[0];

  // Step 3.
  ResponseList list;
  if (any & kFlagHasMessages) {
    ACCORD_ASSIGN_OR_RETURN(list, Exchange(messages));
  }
  // Step 4.
  RoundResult result;
  result.shutdown = (any & kFlagShutdown) != 0;
  const std::vector<uint32_t> hits = ReadyHits(bits);
  result.any_progress = (any & kFlagProgress) != 0 || !hits.empty() || !list.responses.empty();
  result.ready.reserve(hits.size() + list.responses.size());
  for (uint32_t slot : hits) result.ready.push_back(cache_.Get(slot));
  for (const auto& r : list.responses) result.ready.push_back(r);
  ApplyCacheUpdates(hits, list);
  for (const auto& r : result.ready) pending_.erase(r.name);
  return result;
}

}  // namespace accord
