// The waiting thread drives (ACCORD_FAST_PATH, core/src/runtime/fast_path.h):
// synchronous small allreduces are run by the thread that waits for them,
// with correct results; a late peer, several threads waiting at once and a
// mismatch on a cached name behave as they do through the coordinator. The
// program runs with the fast path on (the default) and off
// (ACCORD_FAST_PATH=0, where no iteration may be driven); the other suites
// run both ways too (tests/mpi/CMakeLists.txt, "_nofastpath").
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"

namespace {

using accord::DataType;
using accord::StatusCode;
using namespace accord_test;

bool FastPathOn() {
  const char* env = std::getenv("ACCORD_FAST_PATH");
  return env == nullptr || std::string(env) != "0";
}

// One synchronous allreduce of one float: rank r gives r + 1 + step, so the
// sum is size (size + 1) / 2 + size * step on every rank.
void SyncAllreduce(const std::string& name, int step) {
  float value = static_cast<float>(Rank() + 1 + step);
  const accord::TensorView view{&value, DataType::kFloat32, {1}, accord::Device::CPU()};
  accord::Handle handle = Enqueued(accord::Allreduce(view, view, SumOptions(name)), name);
  const accord::Status status = WaitFor(handle, name);
  INFO("rank " << Rank() << ": " << name << " step " << step << ": " << status);
  REQUIRE(status.ok());
  const float expected = static_cast<float>(Size() * (Size() + 1) / 2 + Size() * step);
  CHECK(value == expected);
}

TEST_CASE("fast path: synchronous allreduces, driven by the waiting thread when it is on") {
  const uint64_t before = accord::GetMetrics().driven_iterations;
  constexpr int kOps = 300;
  for (int i = 0; i < kOps; ++i) {
    SyncAllreduce("fast.sync", i);
    // Back to back, a busy machine can keep the coordinator awake: it
    // finishes an operation, finds the next already queued and runs it, so
    // the waiting thread never finds it parked. Every tenth operation
    // leaves it time to go idle, as the computation between a training
    // step's synchronous operations does.
    if (i % 10 == 9) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const uint64_t driven = accord::GetMetrics().driven_iterations - before;
  INFO("rank " << Rank() << ": " << driven << " of " << kOps << " operations' iterations driven");
  if (FastPathOn()) {
    // Most are, on a quiet machine; one is enough to show the path works.
    CHECK(driven > 0);
  } else {
    CHECK(driven == 0);
  }
}

TEST_CASE("fast path: a peer late by 300 ms: the driving thread hands over and the result is right") {
  SyncAllreduce("fast.late.warm", 0);  // cached: the next one may be driven
  if (Rank() == Size() - 1) std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const auto start = std::chrono::steady_clock::now();
  SyncAllreduce("fast.late.warm", 1);
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  INFO("rank " << Rank() << " waited " << waited << " s");
  // The others waited for the late rank (no result before it submitted).
  if (Size() > 1 && Rank() != Size() - 1) CHECK(waited >= 0.25);
}

TEST_CASE("fast path: four threads wait at once, each for its own allreduces") {
  constexpr int kThreads = 4;
  constexpr int kOps = 40;
  std::vector<std::thread> threads;
  std::vector<int> failures(kThreads, 0);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t, &failures] {
      for (int i = 0; i < kOps; ++i) {
        const std::string name = "fast.threads." + std::to_string(t);
        float value = static_cast<float>(Rank() + 1 + i + t);
        const accord::TensorView view{&value, DataType::kFloat32, {1}, accord::Device::CPU()};
        accord::Result<accord::Handle> handle = accord::Allreduce(view, view, SumOptions(name));
        // Catch2's assertions are for the test's thread: count here, check after.
        if (!handle.ok() || !handle.value().Wait(HangTimeout()).ok() ||
            value != static_cast<float>(Size() * (Size() + 1) / 2 + Size() * (i + t))) {
          ++failures[t];
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) {
    INFO("rank " << Rank() << ", thread " << t);
    CHECK(failures[t] == 0);
  }
}

TEST_CASE("fast path: a mismatch on a cached name while driving fails on every rank, naming it") {
  for (int i = 0; i < 5; ++i) SyncAllreduce("fast.mismatch", i);
  if (Size() < 2) return;
  // The last rank changes the shape of the name every rank has cached.
  const bool odd = Rank() == Size() - 1;
  TestTensor t(DataType::kFloat32, {odd ? 2 : 1});
  accord::Handle handle = Enqueued(accord::Allreduce(t.view(), t.view(), SumOptions("fast.mismatch")), "mismatch");
  const accord::Status status = WaitFor(handle, "fast.mismatch");
  INFO("rank " << Rank() << ": " << status);
  CHECK(status.code() == StatusCode::kMismatch);
  CHECK_THAT(status.message(), Catch::Contains("fast.mismatch"));
  // The job goes on, driven as before.
  for (int i = 0; i < 5; ++i) SyncAllreduce("fast.after", i);
}

TEST_CASE("fast path: polling an operation submitted synchronously still completes it") {
  SyncAllreduce("fast.poll", 0);
  float value = static_cast<float>(Rank() + 1);
  const accord::TensorView view{&value, DataType::kFloat32, {1}, accord::Device::CPU()};
  accord::Handle handle = Enqueued(accord::Allreduce(view, view, SumOptions("fast.poll")), "fast.poll");
  // A thread that polls instead of waiting: its deferred wake-up goes out
  // with the first poll, and the coordinator runs the operation.
  const auto deadline = std::chrono::steady_clock::now() + HangTimeout();
  while (!handle.Poll() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  INFO("rank " << Rank());
  REQUIRE(handle.Poll());
  CHECK(handle.status().ok());
  CHECK(value == static_cast<float>(Size() * (Size() + 1) / 2));
}

}  // namespace
