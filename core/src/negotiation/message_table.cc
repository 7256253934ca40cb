#include "negotiation/message_table.h"

#include <algorithm>
#include <functional>
#include <sstream>

namespace accord {

bool MessageTable::Add(int rank, const Request& request) {
  if (request.type == OpType::kJoin) {
    const bool first = joined_.empty();
    joined_.insert(rank);
    // Requests of one round are added in rank order, so among ranks joining
    // in the same round the highest counts as the last.
    last_joined_ = rank;
    return first;
  }
  auto [it, inserted] = entries_.try_emplace(request.name);
  Entry& entry = it->second;
  if (inserted) {
    entry.by_rank.resize(size_);
    entry.order = next_order_++;
    entry.since = Clock::now();
  }
  if (!entry.by_rank[rank]) ++entry.count;
  entry.by_rank[rank] = request;
  return false;
}

std::vector<StalledTensor> MessageTable::Stalled(Clock::time_point now, double min_seconds) const {
  std::vector<StalledTensor> out;
  for (const auto& [name, entry] : entries_) {
    const double waited = std::chrono::duration<double>(now - entry.since).count();
    if (waited < min_seconds || Complete(entry)) continue;
    StalledTensor s;
    s.name = name;
    s.waited_seconds = waited;
    for (int r = 0; r < size_; ++r) {
      if (entry.by_rank[r]) s.type = entry.by_rank[r]->type;
      (entry.by_rank[r] || joined_.count(r) ? s.submitted : s.missing).push_back(r);
    }
    out.push_back(std::move(s));
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const StalledTensor& a, const StalledTensor& b) { return a.waited_seconds > b.waited_seconds; });
  return out;
}

bool MessageTable::Complete(const Entry& entry) const {
  for (int r = 0; r < size_; ++r) {
    if (!entry.by_rank[r] && !joined_.count(r)) return false;
  }
  return entry.count > 0;
}

Response MessageTable::Build(const std::string& name, const Entry& entry) const {
  return BuildResponse(name, entry.by_rank, joined_);
}

namespace {

const Request& FirstRequest(const std::vector<std::optional<Request>>& requests) {
  return **std::find_if(requests.begin(), requests.end(), [](const auto& r) { return r.has_value(); });
}

std::string GroupText(const Request& r) {
  return r.group.empty() ? std::string("no group") : "group '" + r.group + "' of " + std::to_string(r.group_size);
}

std::string Disagreement(const std::vector<std::optional<Request>>& requests,
                         const std::function<std::string(const Request&)>& describe);

}  // namespace

void MessageTable::TakeReady(std::vector<Response>* out) {
  // Complete entries, in first-arrival order; a group is held back until all
  // its members are complete.
  std::vector<std::map<std::string, Entry>::iterator> complete;
  std::map<std::string, int> group_complete;
  // Groups that the ranks disagree about (their name, or how many members
  // they have), with the disagreement: such a group never completes as a
  // whole. A group is enqueued whole, so once one of its names is complete
  // every rank's members of it are in the table.
  std::map<std::string, std::string> broken;
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (!Complete(it->second)) continue;
    complete.push_back(it);
    const Request& any = FirstRequest(it->second.by_rank);
    if (!any.group.empty()) ++group_complete[any.group];
    const std::string why = Disagreement(it->second.by_rank, GroupText);
    if (why.empty()) continue;
    for (const auto& r : it->second.by_rank) {
      if (r && !r->group.empty()) broken.emplace(r->group, why);
    }
  }
  std::sort(complete.begin(), complete.end(),
            [](const auto& a, const auto& b) { return a->second.order < b->second.order; });
  for (auto it : complete) {
    const Request& any = FirstRequest(it->second.by_rank);
    if (!any.group.empty() && !broken.count(any.group) && group_complete[any.group] < any.group_size) continue;
    out->push_back(Build(it->first, it->second));
    entries_.erase(it);
  }
  // The other members of a broken group fail with it, complete or not: a
  // rank that submitted more members than another would wait for the extra
  // ones forever. Ranks without such a member ignore its error response.
  if (!broken.empty()) {
    std::vector<std::pair<std::map<std::string, Entry>::iterator, const std::string*>> members;  // and why
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      for (const auto& r : it->second.by_rank) {
        auto group = r ? broken.find(r->group) : broken.end();
        if (group != broken.end()) {
          members.emplace_back(it, &group->second);
          break;
        }
      }
    }
    std::sort(members.begin(), members.end(),
              [](const auto& a, const auto& b) { return a.first->second.order < b.first->second.order; });
    for (auto [it, why] : members) {
      // An error carries no plan: only what names and describes the tensor.
      const Request& any = FirstRequest(it->second.by_rank);
      Response resp;
      resp.name = it->first;
      resp.type = any.type;
      resp.dtype = any.dtype;
      resp.device_type = any.device.type;
      resp.shape = any.shape;
      resp.group = any.group;
      resp.group_size = any.group_size;
      resp.error_code = StatusCode::kMismatch;
      resp.error_message = std::string("accord: ") + OpTypeName(any.type) + " of tensor '" + it->first +
                           "': ranks disagree on the group: " + *why;
      out->push_back(std::move(resp));
      entries_.erase(it);
    }
  }
  if (!joined_.empty() && static_cast<int>(joined_.size()) == size_) {
    Response join;
    join.type = OpType::kJoin;
    join.name = kJoinName;
    join.last_joined_rank = last_joined_;
    out->push_back(std::move(join));
    joined_.clear();
    last_joined_ = -1;
  }
}

namespace {

std::string RankList(const std::vector<int>& ranks) {
  std::ostringstream os;
  os << (ranks.size() == 1 ? "rank " : "ranks ");
  for (size_t i = 0; i < ranks.size(); ++i) os << (i ? ", " : "") << ranks[i];
  return os.str();
}

// "rank 2 has joined" / "ranks 0, 2 have joined".
std::string JoinedRanks(const std::set<int>& joined) {
  const std::vector<int> ranks(joined.begin(), joined.end());
  return RankList(ranks) + (ranks.size() == 1 ? " has joined" : " have joined");
}

// If `describe` differs across the present requests, a message like
// "rank 0 has float32; rank 1 has int32". Empty when all agree.
std::string Disagreement(const std::vector<std::optional<Request>>& requests,
                         const std::function<std::string(const Request&)>& describe) {
  std::vector<std::pair<std::string, std::vector<int>>> groups;
  for (size_t r = 0; r < requests.size(); ++r) {
    if (!requests[r]) continue;
    std::string value = describe(*requests[r]);
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == value; });
    if (it == groups.end()) {
      groups.push_back({value, {static_cast<int>(r)}});
    } else {
      it->second.push_back(static_cast<int>(r));
    }
  }
  if (groups.size() <= 1) return {};
  std::string out;
  for (const auto& [value, ranks] : groups) {
    out += (out.empty() ? "" : "; ") + RankList(ranks) + (ranks.size() == 1 ? " has " : " have ") + value;
  }
  return out;
}

std::string Num(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

std::string SplitsText(const Request& r) {
  if (r.splits.empty()) return "no splits (even)";
  std::ostringstream os;
  os << "splits [";
  for (size_t i = 0; i < r.splits.size(); ++i) os << (i ? ", " : "") << r.splits[i];
  os << "]";
  return os.str();
}

Shape TrailingDims(const Shape& s) { return s.empty() ? Shape{} : Shape(s.begin() + 1, s.end()); }

}  // namespace

Response BuildResponse(const std::string& name, const std::vector<std::optional<Request>>& requests,
                       const std::set<int>& joined) {
  const int size = static_cast<int>(requests.size());
  const Request* first = nullptr;
  for (const auto& r : requests) {
    if (r) {
      first = &*r;
      break;
    }
  }
  Response resp;
  resp.name = name;
  resp.type = first->type;
  resp.dtype = first->dtype;
  resp.op = first->op;
  resp.prescale_factor = first->prescale_factor;
  resp.postscale_factor = first->postscale_factor;
  resp.root_rank = first->root_rank;
  resp.device_type = first->device.type;
  resp.shape = first->shape;
  resp.group = first->group;
  resp.group_size = first->group_size;
  resp.ranks = first->ranks;
  resp.target_set = first->target_set;

  auto fail = [&](StatusCode code, const std::string& what, const std::string& detail) {
    resp.error_code = code;
    resp.error_message = std::string("accord: ") + OpTypeName(resp.type) + " of tensor '" + name + "': " + what +
                         (detail.empty() ? "" : ": " + detail);
    return resp;
  };
  auto check = [&](const char* what, const std::function<std::string(const Request&)>& describe) {
    std::string d = Disagreement(requests, describe);
    if (!d.empty()) fail(StatusCode::kMismatch, std::string("ranks disagree on the ") + what, d);
    return d.empty();
  };

  if (!check("operation", [](const Request& r) { return std::string(OpTypeName(r.type)); })) return resp;
  if (!check("group", GroupText)) return resp;
  const OpType type = first->type;
  // A joined rank can only stand in for a Sum or Average allreduce (with
  // zeros). Anything else is a disagreement between the ranks that submitted
  // it and those that declared they have no more work, so it fails like any
  // other mismatch: on every submitting rank, as kMismatch (Horovod raises
  // HorovodInternalError), naming the joined ranks.
  if (!joined.empty() && type != OpType::kAllreduce) {
    return fail(StatusCode::kMismatch,
                "cannot run while " + JoinedRanks(joined) + " (only allreduce with Sum or Average can)", "");
  }
  if (type == OpType::kBarrier) return resp;
  if (type == OpType::kAddProcessSet) {
    check("ranks of the new process set", [](const Request& r) {
      std::string s = "[";
      for (size_t i = 0; i < r.ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(r.ranks[i]);
      return s + "]";
    });
    return resp;
  }
  if (type == OpType::kRemoveProcessSet) {
    check("process set to remove", [](const Request& r) { return "set " + std::to_string(r.target_set); });
    return resp;
  }
  if (!check("dtype", [](const Request& r) { return std::string(DataTypeName(r.dtype)); })) return resp;
  if (!check("device type", [](const Request& r) {
        return r.device.type == DeviceType::kCPU ? std::string("cpu") : std::string("cuda");
      }))
    return resp;

  switch (type) {
    case OpType::kAllreduce:
    case OpType::kReducescatter:
      if (!check("shape", [](const Request& r) { return ShapeToString(r.shape); })) return resp;
      if (!check("reduce op", [](const Request& r) { return std::string(ReduceOpName(r.op)); })) return resp;
      if (!check("prescale factor", [](const Request& r) { return Num(r.prescale_factor); })) return resp;
      if (!check("postscale factor", [](const Request& r) { return Num(r.postscale_factor); })) return resp;
      if (!joined.empty() && first->op != ReduceOp::kSum && first->op != ReduceOp::kAverage) {
        return fail(StatusCode::kMismatch,
                    std::string("reduce op ") + ReduceOpName(first->op) + " cannot run while " + JoinedRanks(joined) +
                        " (joined ranks contribute zeros; only Sum and Average are meaningful)",
                    "");
      }
      break;
    case OpType::kBroadcast:
      if (!check("shape", [](const Request& r) { return ShapeToString(r.shape); })) return resp;
      if (!check("root rank", [](const Request& r) { return "root " + std::to_string(r.root_rank); })) return resp;
      if (first->root_rank < 0 || first->root_rank >= size) {
        return fail(StatusCode::kInvalidArgument,
                    "root rank " + std::to_string(first->root_rank) + " is not a rank of the process set (size " +
                        std::to_string(size) + ")",
                    "");
      }
      break;
    case OpType::kAllgather:
    case OpType::kAlltoall: {
      if (!check("number of dimensions", [](const Request& r) { return std::to_string(r.shape.size()) + "-d"; }))
        return resp;
      if (!check("trailing dimensions (all but dim 0)",
                 [](const Request& r) { return ShapeToString(TrailingDims(r.shape)); }))
        return resp;
      resp.rank_rows.assign(size, 0);
      for (int r = 0; r < size; ++r) {
        if (requests[r]) resp.rank_rows[r] = requests[r]->shape.empty() ? 1 : requests[r]->shape[0];
      }
      if (type == OpType::kAllgather) break;
      resp.splits.assign(static_cast<size_t>(size) * size, 0);
      for (int r = 0; r < size; ++r) {
        const Request& q = *requests[r];
        const int64_t rows = resp.rank_rows[r];
        if (q.splits.empty()) {
          if (rows % size != 0) {
            return fail(StatusCode::kInvalidArgument,
                        "rank " + std::to_string(r) + " gave no splits and its dim 0 (" + std::to_string(rows) +
                            ") does not divide by the process set size (" + std::to_string(size) + ")",
                        "");
          }
          for (int j = 0; j < size; ++j) resp.splits[r * size + j] = rows / size;
          continue;
        }
        // Each rank checked its own splits; these checks keep a corrupt
        // message from overflowing the sum or planning negative counts.
        int64_t sum = 0;
        bool valid = static_cast<int>(q.splits.size()) == size;
        for (int64_t s : q.splits) valid = valid && s >= 0 && !__builtin_add_overflow(sum, s, &sum);
        if (!valid || sum != rows) {
          return fail(StatusCode::kInvalidArgument,
                      "rank " + std::to_string(r) + " has " + SplitsText(q) + " for dim 0 of " + std::to_string(rows) +
                          " rows; splits need one non-negative entry per rank (" + std::to_string(size) +
                          ") adding up to dim 0",
                      "");
        }
        for (int j = 0; j < size; ++j) resp.splits[r * size + j] = q.splits[j];
      }
      break;
    }
    default: break;
  }
  return resp;
}

}  // namespace accord
