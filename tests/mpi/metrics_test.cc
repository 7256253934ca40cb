// accord::GetMetrics(): the counters after a workload whose shape is known.
// Each rank checks the deltas of its own counters around each phase:
// tensors and bytes exactly, collectives exactly where the schedule is fixed
// (one operation in flight at a time, a group), as bounds where it is not (a
// burst of separate enqueues may be fused into one collective or several),
// rounds as a lower bound, cache hits and misses exactly for first-time and
// repeated names. Every result is also checked against the reference.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "test_util.h"

namespace {

using accord::DataType;
using accord::Metrics;
using accord::ReduceOp;
using namespace accord_test;

constexpr int kSingles = 5;
constexpr int kBurst = 6;

int64_t Elements(int i) { return 10 + 3 * i; }

// Allreduces (Sum, float32) of `count` tensors named prefix.i, all enqueued
// before any is waited for (or one at a time if `one_at_a_time`), checked
// against the reference. Returns the bytes of this rank's inputs.
uint64_t RunAllreduces(const std::string& prefix, int count, bool one_at_a_time, const std::string& key) {
  std::vector<TestTensor> tensors;
  std::vector<accord::Handle> handles;
  uint64_t bytes = 0;
  for (int i = 0; i < count; ++i) {
    const std::string name = prefix + "." + std::to_string(i);
    tensors.emplace_back(DataType::kFloat32, accord::Shape{Elements(i)},
                         RankValues(key + name, Rank(), DataType::kFloat32, Elements(i)));
    bytes += static_cast<uint64_t>(Elements(i)) * 4;
    accord::AllreduceOptions opts;
    opts.name = name;
    opts.op = ReduceOp::kSum;
    handles.push_back(Enqueued(accord::Allreduce(tensors.back().view(), tensors.back().view(), opts), name));
    if (one_at_a_time) WaitOk(handles.back(), name);
  }
  for (int i = 0; i < count; ++i) {
    const std::string name = prefix + "." + std::to_string(i);
    if (!one_at_a_time) WaitOk(handles[i], name);
    ExpectValues(name, tensors[i].view(), DataType::kFloat32, {Elements(i)},
                 ReferenceAllreduce(key + name, AllRanks(), DataType::kFloat32, Elements(i), ValueKind::kSmall,
                                    ReduceSpec{ReduceOp::kSum}));
  }
  return bytes;
}

void CheckDerived(const Metrics& m) {
  if (m.collectives > 0) {
    CHECK(m.fusion_ratio == Approx(static_cast<double>(m.tensors) / static_cast<double>(m.collectives)));
  } else {
    CHECK(m.fusion_ratio == 0.0);
  }
  const uint64_t lookups = m.cache_hits + m.cache_misses;
  if (lookups > 0) {
    CHECK(m.cache_hit_rate == Approx(static_cast<double>(m.cache_hits) / static_cast<double>(lookups)));
  } else {
    CHECK(m.cache_hit_rate == 0.0);
  }
  CHECK(m.negotiation_seconds >= 0.0);
  CHECK(m.collective_seconds >= 0.0);
}

TEST_CASE("metrics count collectives, tensors, bytes, rounds and cache lookups", "[metrics]") {
  INFO("rank " << Rank() << " of " << Size());
  REQUIRE(accord::IsInitialized());
  const Metrics start = accord::GetMetrics();
  CheckDerived(start);
  CHECK(start.cache_enabled);  // ACCORD_CACHE_CAPACITY's default (1024), no autotuning
  CHECK_FALSE(start.autotuning);

  // One at a time, first-time names: each is its own round and collective,
  // and each is a cache miss.
  const uint64_t single_bytes = RunAllreduces("metrics.single", kSingles, true, "first");
  const Metrics singles = accord::GetMetrics();
  CHECK(singles.collectives - start.collectives == kSingles);
  CHECK(singles.tensors - start.tensors == kSingles);
  CHECK(singles.bytes - start.bytes == single_bytes);
  CHECK(singles.negotiation_rounds - start.negotiation_rounds >= kSingles);
  CHECK(singles.cache_misses - start.cache_misses == kSingles);
  CHECK(singles.cache_hits - start.cache_hits == 0);
  CHECK(singles.negotiation_seconds > start.negotiation_seconds);
  CHECK(singles.collective_seconds > start.collective_seconds);
  CheckDerived(singles);

  // The same names again: every one goes through the response cache.
  CHECK(RunAllreduces("metrics.single", kSingles, true, "again") == single_bytes);
  const Metrics repeated = accord::GetMetrics();
  CHECK(repeated.collectives - singles.collectives == kSingles);
  CHECK(repeated.tensors - singles.tensors == kSingles);
  CHECK(repeated.bytes - singles.bytes == single_bytes);
  CHECK(repeated.negotiation_rounds - singles.negotiation_rounds >= kSingles);
  CHECK(repeated.cache_hits - singles.cache_hits == kSingles);
  CHECK(repeated.cache_misses - singles.cache_misses == 0);
  CheckDerived(repeated);

  // A burst enqueued together: every tensor counted once, in at least one
  // and at most kBurst collectives.
  const uint64_t burst_bytes = RunAllreduces("metrics.burst", kBurst, false, "burst");
  const Metrics burst = accord::GetMetrics();
  CHECK(burst.tensors - repeated.tensors == kBurst);
  CHECK(burst.bytes - repeated.bytes == burst_bytes);
  CHECK(burst.collectives - repeated.collectives >= 1);
  CHECK(burst.collectives - repeated.collectives <= kBurst);
  CHECK(burst.negotiation_rounds - repeated.negotiation_rounds >= 1);
  CHECK(burst.cache_misses - repeated.cache_misses == kBurst);
  CheckDerived(burst);

  // A group of small tensors of one dtype and op: one round, one collective.
  std::vector<TestTensor> group;
  std::vector<accord::TensorView> views;
  uint64_t group_bytes = 0;
  for (int i = 0; i < kBurst; ++i) {
    group.emplace_back(DataType::kInt32, accord::Shape{Elements(i)},
                       RankValues("group." + std::to_string(i), Rank(), DataType::kInt32, Elements(i)));
    views.push_back(group.back().view());
    group_bytes += static_cast<uint64_t>(Elements(i)) * 4;
  }
  accord::AllreduceOptions opts;
  opts.name = "metrics.group";
  opts.op = ReduceOp::kSum;
  WaitOk(Enqueued(accord::GroupedAllreduce(views, views, opts), "metrics.group"), "metrics.group");
  for (int i = 0; i < kBurst; ++i) {
    ExpectValues("metrics.group." + std::to_string(i), group[i].view(), DataType::kInt32, {Elements(i)},
                 ReferenceAllreduce("group." + std::to_string(i), AllRanks(), DataType::kInt32, Elements(i),
                                    ValueKind::kSmall, ReduceSpec{ReduceOp::kSum}));
  }
  const Metrics grouped = accord::GetMetrics();
  CHECK(grouped.collectives - burst.collectives == 1);
  CHECK(grouped.tensors - burst.tensors == kBurst);
  CHECK(grouped.bytes - burst.bytes == group_bytes);
  CheckDerived(grouped);

  // A barrier negotiates but moves no tensor data.
  WaitOk(Enqueued(accord::Barrier(), "barrier"), "barrier");
  const Metrics barrier = accord::GetMetrics();
  CHECK(barrier.collectives == grouped.collectives);
  CHECK(barrier.tensors == grouped.tensors);
  CHECK(barrier.negotiation_rounds > grouped.negotiation_rounds);
}

TEST_CASE("StartTimeline refuses an empty path; StopTimeline without a timeline does nothing", "[timeline]") {
  INFO("rank " << Rank());
  const accord::Status empty = accord::StartTimeline("");
  CHECK(empty.code() == accord::StatusCode::kInvalidArgument);
  CHECK(accord::StopTimeline().ok());
  CHECK(accord::StopTimeline().ok());
  if (Rank() == 0) {
    const accord::Status bad = accord::StartTimeline("/nonexistent-dir/for/accord/timeline.json");
    CHECK(bad.code() == accord::StatusCode::kInvalidArgument);
    CHECK(bad.message().find("/nonexistent-dir/for/accord/timeline.json") != std::string::npos);
  }
  WaitOk(Enqueued(accord::Barrier(), "barrier"), "barrier");
}

}  // namespace
