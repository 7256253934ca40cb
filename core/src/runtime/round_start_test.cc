#include "runtime/round_start.h"

#include <catch2/catch.hpp>

#include <atomic>
#include <thread>

#include "runtime/waiters.h"

namespace accord {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::microseconds;
using std::chrono::milliseconds;

TEST_CASE("IdleWait: the idle timeout, growing with the quiet time up to the backoff cap", "[round_start]") {
  Config config;
  config.idle_timeout_us = 1000;
  config.idle_backoff_max_us = 50000;
  CHECK(IdleWait(config, milliseconds(0)) == microseconds(1000));
  CHECK(IdleWait(config, milliseconds(4)) == microseconds(1000));      // 4 ms / 8 = 0.5 ms < the timeout
  CHECK(IdleWait(config, milliseconds(80)) == microseconds(10000));    // 1/8 of the quiet time
  CHECK(IdleWait(config, milliseconds(4000)) == microseconds(50000));  // the cap
  config.idle_backoff_max_us = 500;                                    // a cap under the timeout: the timeout
  CHECK(IdleWait(config, milliseconds(4000)) == microseconds(1000));
}

// Begins a wait (as a handle's Wait does) and ends it when destroyed.
struct Waiting {
  explicit Waiting(Waiters& waiters) : waiters(waiters) { waiters.Begin(); }
  ~Waiting() { waiters.End(); }
  Waiters& waiters;
};

const std::function<uint64_t()> kNoBytes = [] { return uint64_t{0}; };

TEST_CASE("LetBurstFinish: a thread already waiting, or a poll since the last round, starts the round at once",
          "[round_start]") {
  Waiters waiters;
  WorkSignal enqueued;
  enqueued.Notify();
  const uint64_t seen = enqueued.generation();
  {
    Waiting waiting(waiters);
    CHECK(LetBurstFinish(waiters, enqueued, seen, false, waiters.polls(), microseconds(0), kNoBytes) == seen);
    CHECK(LetBurstFinish(waiters, enqueued, seen, true, waiters.polls(), microseconds(0), kNoBytes) == seen);
  }
  const uint64_t polls = waiters.polls();
  waiters.Polled();
  // On one core a poll starts the round; without one this would wait up to kSharedCoreLimit.
  CHECK(LetBurstFinish(waiters, enqueued, seen, true, polls, microseconds(0), kNoBytes) == seen);
}

TEST_CASE("LetBurstFinish: on one core the round waits for the whole burst, until a thread waits", "[round_start]") {
  Waiters waiters;
  WorkSignal enqueued;
  enqueued.Notify();  // the first tensor, which woke the coordinator
  const uint64_t seen = enqueued.generation();
  const auto begin = Clock::now();
  Clock::time_point waited;
  std::thread user([&] {
    for (int i = 0; i < 3; ++i) {  // the rest of the step's tensors, further apart than kSmallBurstQuiet
      std::this_thread::sleep_for(milliseconds(2));
      enqueued.Notify();
    }
    waited = Clock::now();
    Waiting waiting(waiters);  // then it waits for the results
    std::this_thread::sleep_for(milliseconds(50));
  });
  const uint64_t started = LetBurstFinish(waiters, enqueued, seen, true, waiters.polls(), microseconds(0), kNoBytes);
  user.join();
  if (waited - begin >= kSharedCoreLimit) {
    WARN("the machine held the enqueueing thread past kSharedCoreLimit; nothing to check");
    return;
  }
  CHECK(started == seen + 3);
}

TEST_CASE("LetBurstFinish: a small enqueue holds the round for what follows it; a quiet one does not",
          "[round_start]") {
  Waiters waiters;
  WorkSignal enqueued;
  std::atomic<uint64_t> bytes{4 << 10};  // a layer's bias
  const auto new_bytes = [&] { return bytes.load(); };
  enqueued.Notify();
  const uint64_t seen = enqueued.generation();
  const auto begin = Clock::now();
  Clock::time_point weight;
  std::thread user([&] {
    std::this_thread::sleep_for(microseconds(200));  // under kSmallBurstQuiet
    weight = Clock::now();
    bytes = (4 << 20) + (4 << 10);  // its weight
    enqueued.Notify();
    Waiting waiting(waiters);
    std::this_thread::sleep_for(milliseconds(50));
  });
  const uint64_t started = LetBurstFinish(waiters, enqueued, seen, false, waiters.polls(), microseconds(0), new_bytes);
  user.join();
  if (weight - begin >= kSmallBurstQuiet) {
    WARN("the machine held the enqueueing thread past kSmallBurstQuiet; the hold is not checked");
  } else {
    CHECK(started == seen + 1);  // the weight's enqueue, not the bias alone
  }

  // Nothing more arrives and nobody waits: the round starts after the quiet time, not never.
  bytes = 0;
  const uint64_t now = enqueued.generation();
  CHECK(LetBurstFinish(waiters, enqueued, now, false, waiters.polls(), microseconds(0), kNoBytes) == now);
}

}  // namespace
}  // namespace accord
