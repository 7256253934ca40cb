#include "fusion/fusion_planner.h"

namespace accord {

int64_t FusionBytes(const Response& r) {
  const int64_t element = static_cast<int64_t>(DataTypeSize(r.dtype));
  if (r.type == OpType::kAllgather) {
    int64_t rows = 0;
    for (int64_t n : r.rank_rows) rows += n;
    return rows * r.RowElements() * element;
  }
  return NumElements(r.shape) * element;
}

bool IsFusible(const Response& r) {
  if (!r.ok()) return false;
  switch (r.type) {
    case OpType::kAllreduce:
    case OpType::kAllgather:
    case OpType::kBroadcast:
    case OpType::kReducescatter: return true;
    default: return false;
  }
}

bool SameFusionKey(const Response& a, const Response& b) {
  if (a.type != b.type || a.dtype != b.dtype || a.device_type != b.device_type) return false;
  switch (a.type) {
    case OpType::kAllreduce:
    case OpType::kReducescatter:
      return a.op == b.op && a.prescale_factor == b.prescale_factor && a.postscale_factor == b.postscale_factor;
    case OpType::kBroadcast: return a.root_rank == b.root_rank;
    default: return true;
  }
}

bool RunsAlone(const Response& r, bool large_in_place) {
  if (FusionBytes(r) < kRunAloneBytes) return false;
  return !(large_in_place && r.type == OpType::kAllreduce && r.op != ReduceOp::kAdasum &&
           r.device_type == DeviceType::kCPU);
}

std::vector<FusedBatch> PlanFusion(const std::vector<Response>& ready, int64_t threshold_bytes, bool large_in_place) {
  std::vector<FusedBatch> batches;
  std::vector<int64_t> batch_bytes;
  std::vector<size_t> open;  // indices of batches still accepting members
  for (size_t i = 0; i < ready.size(); ++i) {
    const Response& r = ready[i];
    const int64_t bytes = FusionBytes(r);
    if (!IsFusible(r) || threshold_bytes <= 0 || bytes >= threshold_bytes || RunsAlone(r, large_in_place)) {
      batches.push_back({{i}});
      batch_bytes.push_back(bytes);
      continue;
    }
    size_t slot = open.size();
    for (size_t k = 0; k < open.size(); ++k) {
      if (SameFusionKey(ready[batches[open[k]].members.front()], r)) {
        slot = k;
        break;
      }
    }
    if (slot < open.size() && batch_bytes[open[slot]] + bytes <= threshold_bytes) {
      batches[open[slot]].members.push_back(i);
      batch_bytes[open[slot]] += bytes;
      continue;
    }
    // No open batch of this key, or it is full: start a new one in its place.
    batches.push_back({{i}});
    batch_bytes.push_back(bytes);
    if (slot < open.size()) {
      open[slot] = batches.size() - 1;
    } else {
      open.push_back(batches.size() - 1);
    }
  }
  return batches;
}

}  // namespace accord
