// ACCORD_AUTOTUNE: a workload of many small tensors per step runs while the
// autotuner searches the fusion threshold, the cycle time and the response
// cache on/off. Checks: every allreduce result throughout, element by
// element; that all ranks leave the search together with the same setting;
// that the kept cache setting is really in force (cache hits grow only when
// it is on); and, on rank 0, the CSV log (ACCORD_AUTOTUNE_LOG): one line per
// warm-up and search sample, the grid the search walks (the cache phase
// skipped when ACCORD_CACHE_CAPACITY is 0), and a final "kept" line whose
// setting is the best scored one and is the setting in force (GetMetrics()).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "test_util.h"

namespace {

using accord::DataType;
using accord::ReduceOp;
using namespace accord_test;

constexpr int kTensorsPerStep = 40;
constexpr int kMaxSteps = 2000;  // the search must end long before this

int64_t Elements(int i) { return 1024 + 256 * (i % 7); }

int EnvInt(const char* name, int fallback) {
  const char* value = std::getenv(name);
  return value == nullptr || *value == '\0' ? fallback : std::atoi(value);
}

// One step: kTensorsPerStep allreduces enqueued back to back, then waited for
// and checked against the reference.
void RunStep(int step) {
  std::vector<TestTensor> tensors;
  std::vector<accord::Handle> handles;
  tensors.reserve(kTensorsPerStep);
  const std::string key = "autotune.step" + std::to_string(step);
  for (int i = 0; i < kTensorsPerStep; ++i) {
    const std::string name = "autotune.grad." + std::to_string(i);
    tensors.emplace_back(DataType::kFloat32, accord::Shape{Elements(i)},
                         RankValues(key + name, Rank(), DataType::kFloat32, Elements(i)));
    handles.push_back(
        Enqueued(accord::Allreduce(tensors.back().view(), tensors.back().view(), SumOptions(name)), name));
  }
  for (int i = 0; i < kTensorsPerStep; ++i) {
    const std::string name = "autotune.grad." + std::to_string(i);
    REQUIRE(WaitOk(handles[i], name));
    REQUIRE(ExpectValues(name + " (step " + std::to_string(step) + ")", tensors[i].view(), DataType::kFloat32,
                         {Elements(i)},
                         ReferenceAllreduce(key + name, AllRanks(), DataType::kFloat32, Elements(i), ValueKind::kSmall,
                                            ReduceSpec{ReduceOp::kSum})));
  }
}

// `value` reduced over every rank with `op` (one element of `dtype`).
double ReduceScalar(const std::string& name, DataType dtype, double value, ReduceOp op) {
  TestTensor t(dtype, accord::Shape{1}, {value});
  accord::AllreduceOptions opts;
  opts.name = name;
  opts.op = op;
  REQUIRE(WaitOk(Enqueued(accord::Allreduce(t.view(), t.view(), opts), name), name));
  return ReadElement(t.view(), 0);
}

struct Row {
  std::string sample, phase;
  int64_t threshold = 0;
  double cycle = 0;
  int cache = -1;
  std::string steps, bytes, seconds;
  double score = 0;
};

std::vector<Row> ReadLog(const std::string& path) {
  std::ifstream in(path);
  REQUIRE(in.good());
  std::string line;
  REQUIRE(std::getline(in, line));
  CHECK(line ==
        "sample,phase,fusion_threshold_bytes,cycle_time_ms,cache_enabled,steps,bytes,seconds,score_bytes_per_second");
  std::vector<Row> rows;
  while (std::getline(in, line)) {
    std::vector<std::string> f;
    std::stringstream ss(line);
    std::string field;
    while (std::getline(ss, field, ',')) f.push_back(field);
    if (!line.empty() && line.back() == ',') f.push_back("");
    INFO("CSV line: " << line);
    REQUIRE(f.size() == 9);
    rows.push_back({f[0], f[1], std::stoll(f[2]), std::stod(f[3]), std::stoi(f[4]), f[5], f[6], f[7], std::stod(f[8])});
  }
  return rows;
}

TEST_CASE("autotune: every rank switches together, results stay exact, the best setting is kept", "[autotune]") {
  INFO("rank " << Rank() << " of " << Size());
  REQUIRE(accord::IsInitialized());
  const int warmup = EnvInt("ACCORD_AUTOTUNE_WARMUP_SAMPLES", 3);
  const int steps_per_sample = EnvInt("ACCORD_AUTOTUNE_STEPS_PER_SAMPLE", 10);
  const int max_samples = EnvInt("ACCORD_AUTOTUNE_MAX_SAMPLES", 20);
  const bool cache_capacity = EnvInt("ACCORD_CACHE_CAPACITY", 1024) > 0;
  const char* log_path = std::getenv("ACCORD_AUTOTUNE_LOG");
  REQUIRE(log_path != nullptr);
  REQUIRE(accord::GetMetrics().fusion_threshold_bytes == 64 << 20);  // the default, until the search moves it
  REQUIRE(accord::GetMetrics().cache_enabled == cache_capacity);

  // Steps until no rank is searching any more (decided together, so every
  // rank runs the same collectives).
  int step = 0;
  for (; step < kMaxSteps; ++step) {
    RunStep(step);
    const double searching = ReduceScalar("autotune.searching." + std::to_string(step), DataType::kInt32,
                                          accord::GetMetrics().autotuning ? 1 : 0, ReduceOp::kMax);
    if (searching == 0) break;
  }
  INFO("steps run: " << step);
  REQUIRE(step < kMaxSteps);
  // A few more steps with the kept setting. The same 40 names every step:
  // once cached (from the second step at the latest) they hit, unless the
  // kept setting has the cache off.
  const uint64_t hits_before = accord::GetMetrics().cache_hits;
  for (int i = 1; i <= 3; ++i) RunStep(step + i);

  const accord::Metrics m = accord::GetMetrics();
  CHECK_FALSE(m.autotuning);
  if (!cache_capacity) CHECK_FALSE(m.cache_enabled);
  {
    INFO("cache " << (m.cache_enabled ? "on" : "off") << ": hits " << hits_before << " -> " << m.cache_hits);
    if (m.cache_enabled) {
      CHECK(m.cache_hits >= hits_before + 2 * kTensorsPerStep);
    } else {
      CHECK(m.cache_hits == hits_before);
    }
  }
  const double cache = m.cache_enabled ? 1 : 0;
  CHECK(ReduceScalar("autotune.cache.min", DataType::kInt32, cache, ReduceOp::kMin) == cache);
  CHECK(ReduceScalar("autotune.cache.max", DataType::kInt32, cache, ReduceOp::kMax) == cache);
  const double threshold = static_cast<double>(m.fusion_threshold_bytes);
  CHECK(ReduceScalar("autotune.threshold.min", DataType::kFloat64, threshold, ReduceOp::kMin) == threshold);
  CHECK(ReduceScalar("autotune.threshold.max", DataType::kFloat64, threshold, ReduceOp::kMax) == threshold);
  CHECK(ReduceScalar("autotune.cycle.min", DataType::kFloat64, m.cycle_time_ms, ReduceOp::kMin) == m.cycle_time_ms);
  CHECK(ReduceScalar("autotune.cycle.max", DataType::kFloat64, m.cycle_time_ms, ReduceOp::kMax) == m.cycle_time_ms);

  if (Rank() != 0) return;
  const std::vector<Row> rows = ReadLog(log_path);
  // 8 thresholds at the starting cycle time (0), then the 3 other cycle
  // times, then the cache off (if it can be on at all).
  const int expected_search = std::min(cache_capacity ? 12 : 11, max_samples);
  REQUIRE(rows.size() == static_cast<size_t>(warmup + expected_search + 1));
  std::vector<Row> search;
  for (size_t i = 0; i + 1 < rows.size(); ++i) {
    const Row& r = rows[i];
    INFO("sample " << r.sample);
    CHECK(r.sample == std::to_string(i + 1));
    CHECK(r.phase == (static_cast<int>(i) < warmup ? "warmup" : "search"));
    CHECK(r.steps == std::to_string(steps_per_sample));
    CHECK(std::stoll(r.bytes) > 0);
    CHECK(std::stod(r.seconds) > 0);
    CHECK(r.score > 0);
    if (static_cast<int>(i) < warmup) {
      CHECK(r.threshold == 64 << 20);
      CHECK(r.cycle == 0.0);
      CHECK(r.cache == (cache_capacity ? 1 : 0));
    } else {
      search.push_back(r);
    }
  }
  const std::vector<int64_t> grid = {1 << 20, 2 << 20, 4 << 20, 8 << 20, 16 << 20, 32 << 20, 64 << 20, 128 << 20};
  auto by_score = [](const Row& a, const Row& b) { return a.score < b.score; };
  for (size_t i = 0; i < search.size() && i < grid.size(); ++i) {
    CHECK(search[i].threshold == grid[i]);
    CHECK(search[i].cycle == 0.0);
    CHECK(search[i].cache == (cache_capacity ? 1 : 0));
  }
  const std::vector<double> cycles = {1.0, 2.5, 5.0};
  const size_t cycles_end = grid.size() + cycles.size();
  if (search.size() > grid.size()) {
    // The cycle times are tried with the best threshold of the first phase.
    const auto best_first = std::max_element(search.begin(), search.begin() + grid.size(), by_score);
    for (size_t i = grid.size(); i < search.size() && i < cycles_end; ++i) {
      CHECK(search[i].threshold == best_first->threshold);
      CHECK(search[i].cycle == cycles[i - grid.size()]);
      CHECK(search[i].cache == (cache_capacity ? 1 : 0));
    }
  }
  if (search.size() > cycles_end) {
    // Then the cache off, with the best threshold and cycle time so far.
    REQUIRE(search.size() == cycles_end + 1);
    const auto best_so_far = std::max_element(search.begin(), search.begin() + cycles_end, by_score);
    const Row& off = search.back();
    CHECK(off.threshold == best_so_far->threshold);
    CHECK(off.cycle == best_so_far->cycle);
    CHECK(off.cache == 0);
  }
  const Row& kept = rows.back();
  CHECK(kept.phase == "kept");
  CHECK(kept.threshold == m.fusion_threshold_bytes);
  CHECK(kept.cycle == m.cycle_time_ms);
  CHECK(kept.cache == (m.cache_enabled ? 1 : 0));
  double best_score = 0;
  for (const Row& r : search) best_score = std::max(best_score, r.score);
  CHECK(kept.score == best_score);
  bool kept_is_a_best = false;
  for (const Row& r : search) {
    kept_is_a_best |=
        r.threshold == kept.threshold && r.cycle == kept.cycle && r.cache == kept.cache && r.score == best_score;
  }
  CHECK(kept_is_a_best);
}

}  // namespace
