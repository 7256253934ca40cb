// Tests for PlanFusion: which ready responses share a fused collective.
#include "fusion/fusion_planner.h"

#include <catch2/catch.hpp>

#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace accord {
namespace {

using Batches = std::vector<std::vector<size_t>>;

// A ready (ok) response of `elements` elements.
Response Ready(OpType type, int64_t elements, DataType dtype = DataType::kFloat32) {
  Response r;
  r.type = type;
  r.name = "t";
  r.dtype = dtype;
  r.shape = {elements};
  if (type == OpType::kAllgather) r.rank_rows = {elements};
  if (type == OpType::kBroadcast) r.root_rank = 0;
  return r;
}

Response Allreduce(int64_t elements, DataType dtype = DataType::kFloat32) {
  return Ready(OpType::kAllreduce, elements, dtype);
}

Batches Plan(const std::vector<Response>& ready, int64_t threshold, bool large_in_place = false) {
  Batches out;
  for (const auto& batch : PlanFusion(ready, threshold, large_in_place)) out.push_back(batch.members);
  return out;
}

std::string Show(const Batches& batches) {
  std::ostringstream os;
  for (const auto& b : batches) {
    os << "{";
    for (size_t i = 0; i < b.size(); ++i) os << (i ? "," : "") << b[i];
    os << "}";
  }
  return os.str();
}

void CheckPlan(const std::vector<Response>& ready, int64_t threshold, const Batches& expected) {
  const Batches got = Plan(ready, threshold);
  INFO("threshold " << threshold << ": expected " << Show(expected) << ", got " << Show(got));
  CHECK(got == expected);
}

TEST_CASE("fusion: same-key tensors fuse in order up to the threshold", "[fusion]") {
  // 40 bytes each.
  std::vector<Response> ready(5, Allreduce(10));
  CheckPlan(ready, 100, {{0, 1}, {2, 3}, {4}});
  CheckPlan(ready, 120, {{0, 1, 2}, {3, 4}});
  CheckPlan(ready, 1 << 20, {{0, 1, 2, 3, 4}});
  // Exactly filling the threshold is allowed.
  CheckPlan({Allreduce(10), Allreduce(10), Allreduce(5)}, 100, {{0, 1, 2}});
  // A full batch is closed; a later small tensor does not go back to it.
  CheckPlan({Allreduce(15), Allreduce(15), Allreduce(5)}, 100, {{0}, {1, 2}});
}

TEST_CASE("fusion: threshold 0 runs every tensor alone", "[fusion]") {
  CheckPlan({Allreduce(1), Allreduce(1), Allreduce(1)}, 0, {{0}, {1}, {2}});
}

TEST_CASE("fusion: a tensor at or above the threshold goes alone", "[fusion]") {
  CheckPlan({Allreduce(2), Allreduce(25), Allreduce(2)}, 100, {{0, 2}, {1}});
  CheckPlan({Allreduce(2), Allreduce(30), Allreduce(2)}, 100, {{0, 2}, {1}});
  CheckPlan({Allreduce(24), Allreduce(1)}, 100, {{0, 1}});
}

TEST_CASE("fusion: a tensor of kRunAloneBytes or more goes alone under any threshold", "[fusion]") {
  const int64_t big = kRunAloneBytes / 4;  // float32 elements
  CheckPlan({Allreduce(2), Allreduce(big), Allreduce(2)}, int64_t{64} << 20, {{0, 2}, {1}});
  CheckPlan({Allreduce(big - 1), Allreduce(big - 1)}, int64_t{64} << 20, {{0, 1}});
  CheckPlan({Allreduce(big), Allreduce(big)}, int64_t{64} << 20, {{0}, {1}});
}

TEST_CASE("fusion: large CPU allreduces share batches where the set reduces them in place", "[fusion]") {
  const int64_t big = kRunAloneBytes / 4;  // float32 elements
  const int64_t threshold = int64_t{64} << 20;
  // Large and small allreduces of one key fill batches up to the threshold.
  CHECK(Plan({Allreduce(2), Allreduce(big), Allreduce(big), Allreduce(2)}, threshold, true) == Batches{{0, 1, 2, 3}});
  CHECK(Plan({Allreduce(big * 40), Allreduce(big * 30), Allreduce(big)}, threshold, true) == Batches{{0}, {1, 2}});
  // Not where the set does not (the default) ...
  CHECK(Plan({Allreduce(big), Allreduce(big)}, threshold, false) == Batches{{0}, {1}});
  // ... nor for CUDA tensors, Adasum, or other collectives.
  Response cuda = Allreduce(big);
  cuda.device_type = DeviceType::kCUDA;
  Response adasum = Allreduce(big);
  adasum.op = ReduceOp::kAdasum;
  for (const Response& r : {cuda, adasum, Ready(OpType::kAllgather, big), Ready(OpType::kBroadcast, big)}) {
    INFO(OpTypeName(r.type) << " op " << ReduceOpName(r.op) << (r.device_type == DeviceType::kCUDA ? " on CUDA" : ""));
    CHECK(RunsAlone(r, true));
    CHECK(Plan({r, r}, threshold, true) == Batches{{0}, {1}});
  }
  CHECK_FALSE(RunsAlone(Allreduce(big), true));
  CHECK(RunsAlone(Allreduce(big), false));
  CHECK_FALSE(RunsAlone(Allreduce(big - 1), false));
}

TEST_CASE("fusion: different keys never share a batch", "[fusion]") {
  struct KeyCase {
    const char* what;
    Response a;
    Response b;
  };
  Response pre = Allreduce(4);
  pre.prescale_factor = 0.5;
  Response post = Allreduce(4);
  post.postscale_factor = 0.5;
  Response max = Allreduce(4);
  max.op = ReduceOp::kMax;
  Response cuda = Allreduce(4);
  cuda.device_type = DeviceType::kCUDA;
  Response root1 = Ready(OpType::kBroadcast, 4);
  root1.root_rank = 1;
  Response rs_max = Ready(OpType::kReducescatter, 4);
  rs_max.op = ReduceOp::kMax;
  const std::vector<KeyCase> cases = {
      {"dtype", Allreduce(4), Allreduce(4, DataType::kInt32)},
      {"reduce op", Allreduce(4), max},
      {"prescale", Allreduce(4), pre},
      {"postscale", Allreduce(4), post},
      {"device type", Allreduce(4), cuda},
      {"collective allreduce/allgather", Allreduce(4), Ready(OpType::kAllgather, 4)},
      {"collective allreduce/broadcast", Allreduce(4), Ready(OpType::kBroadcast, 4)},
      {"collective allreduce/reducescatter", Allreduce(4), Ready(OpType::kReducescatter, 4)},
      {"broadcast root", Ready(OpType::kBroadcast, 4), root1},
      {"reducescatter op", Ready(OpType::kReducescatter, 4), rs_max},
  };
  for (const auto& c : cases) {
    INFO("key differs in " << c.what);
    CHECK_FALSE(SameFusionKey(c.a, c.b));
    CHECK_FALSE(SameFusionKey(c.b, c.a));
    // Interleaved: each key fills its own batch, placed at its first member.
    CheckPlan({c.a, c.b, c.a, c.b}, 1 << 20, {{0, 2}, {1, 3}});
  }
  // Fields that are not part of a key do not split batches.
  Response other_root = Allreduce(4);
  other_root.root_rank = 3;
  CHECK(SameFusionKey(Allreduce(4), other_root));
  Response gather_max = Ready(OpType::kAllgather, 4);
  gather_max.op = ReduceOp::kMax;
  CHECK(SameFusionKey(Ready(OpType::kAllgather, 4), gather_max));
}

TEST_CASE("fusion: non-fusible responses run alone and keep their place", "[fusion]") {
  Response error = Allreduce(4);
  error.error_code = StatusCode::kMismatch;
  error.error_message = "accord: mismatch";
  const std::vector<Response> lone = {
      Ready(OpType::kAlltoall, 4),      Ready(OpType::kBarrier, 0),          Ready(OpType::kJoin, 0),
      Ready(OpType::kAddProcessSet, 0), Ready(OpType::kRemoveProcessSet, 0), error};
  for (size_t i = 0; i < lone.size(); ++i) {
    INFO("non-fusible response " << i << " (" << OpTypeName(lone[i].type) << ")");
    CHECK_FALSE(IsFusible(lone[i]));
    CheckPlan({lone[i], lone[i], lone[i]}, 1 << 20, {{0}, {1}, {2}});
    CheckPlan({Allreduce(4), lone[i], Allreduce(4)}, 1 << 20, {{0, 2}, {1}});
  }
  for (OpType t : {OpType::kAllreduce, OpType::kAllgather, OpType::kBroadcast, OpType::kReducescatter}) {
    INFO(OpTypeName(t));
    CHECK(IsFusible(Ready(t, 4)));
  }
}

TEST_CASE("fusion: FusionBytes counts every rank's allgather rows", "[fusion]") {
  Response gather = Ready(OpType::kAllgather, 0, DataType::kFloat64);
  gather.shape = {2, 3, 5};
  gather.rank_rows = {2, 7, 0, 1};
  CHECK(FusionBytes(gather) == 10 * 15 * 8);
  CHECK(FusionBytes(Allreduce(6, DataType::kFloat16)) == 12);
  Response rs = Ready(OpType::kReducescatter, 0, DataType::kInt64);
  rs.shape = {4, 3};
  CHECK(FusionBytes(rs) == 96);
  // The allgather's full size decides: 2 ranks x 10 rows x 4 bytes = 80 each.
  Response g2 = Ready(OpType::kAllgather, 10);
  g2.rank_rows = {10, 10};
  CheckPlan({g2, g2, g2}, 200, {{0, 1}, {2}});
  CheckPlan({g2, g2}, 80, {{0}, {1}});
}

TEST_CASE("fusion: random plans cover every response once and respect keys and threshold", "[fusion]") {
  std::mt19937 rng(77);
  const OpType types[] = {OpType::kAllreduce, OpType::kAllgather,     OpType::kBroadcast,
                          OpType::kAlltoall,  OpType::kReducescatter, OpType::kBarrier};
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<Response> ready;
    const int n = static_cast<int>(rng() % 40);
    for (int i = 0; i < n; ++i) {
      Response r = Ready(types[rng() % 6], rng() % 64, rng() % 2 ? DataType::kFloat32 : DataType::kInt8);
      r.op = rng() % 2 ? ReduceOp::kSum : ReduceOp::kMin;
      if (rng() % 10 == 0) r.error_code = StatusCode::kMismatch;
      ready.push_back(r);
    }
    const int64_t threshold = rng() % 400;
    const Batches plan = Plan(ready, threshold);
    INFO("trial " << trial << " threshold " << threshold << " plan " << Show(plan));
    std::vector<int> seen(ready.size(), 0);
    for (size_t b = 0; b < plan.size(); ++b) {
      REQUIRE_FALSE(plan[b].empty());
      if (b > 0) CHECK(plan[b - 1].front() < plan[b].front());  // batches ordered by first member
      int64_t bytes = 0;
      for (size_t k = 0; k < plan[b].size(); ++k) {
        const size_t i = plan[b][k];
        REQUIRE(i < ready.size());
        ++seen[i];
        bytes += FusionBytes(ready[i]);
        if (k > 0) {
          CHECK(plan[b][k - 1] < i);
          CHECK(SameFusionKey(ready[plan[b][0]], ready[i]));
          CHECK(IsFusible(ready[i]));
        }
      }
      if (plan[b].size() > 1) CHECK(bytes <= threshold);
    }
    for (size_t i = 0; i < seen.size(); ++i) {
      INFO("response " << i);
      CHECK(seen[i] == 1);
    }
  }
}

}  // namespace
}  // namespace accord
