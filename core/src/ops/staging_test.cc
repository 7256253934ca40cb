// Tests for RunStaged (ops/staging.h): how a batch is cut into windows, that
// every element goes through the buffer once and comes back to its own
// place, and the edge cases (empty tensors, a window smaller than one
// element, staging off). The collective here is a stand-in that adds 1000
// to every element of the window and records the window's size; the real
// collectives run in the MPI suites (collectives_test_smallwindows etc.).
#include "ops/staging.h"

#include <catch2/catch.hpp>

#include <cstring>
#include <vector>

#include "fusion/fusion_buffer.h"

namespace accord {
namespace {

struct Run {
  std::vector<int64_t> windows;  // elements per collective call
  Status status;
};

// Stages `tensors` (float) with the given window; each tensor's result goes
// back into it.
Run Stage(std::vector<std::vector<float>>& tensors, int64_t window_bytes, PhaseTimes* phases = nullptr) {
  FusionBuffer buffer;
  const OpContext ctx{nullptr, &buffer, 0, 1, phases, window_bytes};
  std::vector<StagedPart> parts;
  for (auto& t : tensors) {
    parts.push_back(
        {reinterpret_cast<const char*>(t.data()), reinterpret_cast<char*>(t.data()), static_cast<int64_t>(t.size())});
  }
  const size_t element = sizeof(float);
  Run run;
  run.status = RunStaged(
      ctx, parts, element,
      [&](const StagedPart& part, int64_t at, int64_t n, char* dst) {
        std::memcpy(dst, part.in + at * element, n * element);
      },
      [&](const StagedPart& part, int64_t at, int64_t n, const char* src) {
        std::memcpy(part.out + at * element, src, n * element);
      },
      [&](char* data, int64_t n) {
        float* f = reinterpret_cast<float*>(data);
        for (int64_t i = 0; i < n; ++i) f[i] += 1000.0f;
        run.windows.push_back(n);
        return Status::OK();
      });
  return run;
}

// Tensors of the given sizes, element j of tensor i holding 100 * i + j.
std::vector<std::vector<float>> Tensors(const std::vector<int>& sizes) {
  std::vector<std::vector<float>> tensors;
  for (size_t i = 0; i < sizes.size(); ++i) {
    tensors.emplace_back(sizes[i]);
    for (int j = 0; j < sizes[i]; ++j) tensors[i][j] = static_cast<float>(100 * i + j);
  }
  return tensors;
}

// Every element went through the collective exactly once and came back home.
void CheckAllPassedOnce(const std::vector<std::vector<float>>& tensors) {
  for (size_t i = 0; i < tensors.size(); ++i) {
    for (size_t j = 0; j < tensors[i].size(); ++j) {
      INFO("tensor " << i << ", element " << j);
      CHECK(tensors[i][j] == static_cast<float>(1000 + 100 * i + j));
    }
  }
}

TEST_CASE("RunStaged cuts the concatenation into windows that end inside tensors", "[staging]") {
  auto tensors = Tensors({3, 0, 5, 2, 0});
  const Run run = Stage(tensors, 4 * sizeof(float));
  REQUIRE(run.status.ok());
  CHECK(run.windows == std::vector<int64_t>{4, 4, 2});
  CheckAllPassedOnce(tensors);
}

TEST_CASE("RunStaged: a window that is not a whole number of elements rounds down", "[staging]") {
  auto tensors = Tensors({7});
  const Run run = Stage(tensors, 3 * sizeof(float) + 2);
  REQUIRE(run.status.ok());
  CHECK(run.windows == std::vector<int64_t>{3, 3, 1});
  CheckAllPassedOnce(tensors);
}

TEST_CASE("RunStaged: a window smaller than one element still moves one element", "[staging]") {
  auto tensors = Tensors({2, 1});
  const Run run = Stage(tensors, 1);
  REQUIRE(run.status.ok());
  CHECK(run.windows == std::vector<int64_t>{1, 1, 1});
  CheckAllPassedOnce(tensors);
}

TEST_CASE("RunStaged: window 0 (staging off) and a window larger than the batch make one call", "[staging]") {
  const int64_t window = GENERATE(int64_t{0}, int64_t{1} << 20);
  auto tensors = Tensors({5, 3});
  const Run run = Stage(tensors, window);
  REQUIRE(run.status.ok());
  CHECK(run.windows == std::vector<int64_t>{8});
  CheckAllPassedOnce(tensors);
}

TEST_CASE("RunStaged: a batch of empty tensors makes one empty call", "[staging]") {
  auto tensors = Tensors({0, 0});
  const Run run = Stage(tensors, 16);
  REQUIRE(run.status.ok());
  CHECK(run.windows == std::vector<int64_t>{0});
}

TEST_CASE("RunStaged stops at the first failed call", "[staging]") {
  auto tensors = Tensors({10});
  FusionBuffer buffer;
  const OpContext ctx{nullptr, &buffer, 0, 1, nullptr, 4 * sizeof(float)};
  const std::vector<StagedPart> parts{
      {reinterpret_cast<const char*>(tensors[0].data()), reinterpret_cast<char*>(tensors[0].data()), 10}};
  int calls = 0;
  const Status status = RunStaged(
      ctx, parts, sizeof(float), [](const StagedPart&, int64_t, int64_t, char*) {},
      [](const StagedPart&, int64_t, int64_t, const char*) {},
      [&](char*, int64_t) { return ++calls == 2 ? Status::Internal("second window failed") : Status::OK(); });
  CHECK(status.code() == StatusCode::kInternal);
  CHECK(status.message() == "second window failed");
  CHECK(calls == 2);
}

TEST_CASE("RunStaged marks the timeline's phases for a fused batch only", "[staging]") {
  SECTION("fused: packed after the first window, exchanged after the last call") {
    auto tensors = Tensors({3, 3});
    PhaseTimes phases;
    REQUIRE(Stage(tensors, 2 * sizeof(float), &phases).status.ok());
    CHECK(phases.packed != std::chrono::steady_clock::time_point{});
    CHECK(phases.exchanged >= phases.packed);
  }
  SECTION("one tensor: no phases") {
    auto tensors = Tensors({6});
    PhaseTimes phases;
    REQUIRE(Stage(tensors, 2 * sizeof(float), &phases).status.ok());
    CHECK(phases.packed == std::chrono::steady_clock::time_point{});
    CHECK(phases.exchanged == std::chrono::steady_clock::time_point{});
  }
}

}  // namespace
}  // namespace accord
