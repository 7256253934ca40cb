#include "runtime/round_start.h"

#include <sched.h>

#include <algorithm>

namespace accord {

using Clock = std::chrono::steady_clock;

std::chrono::microseconds IdleWait(const Config& config, std::chrono::steady_clock::duration quiet) {
  const auto base = std::chrono::microseconds(config.idle_timeout_us);
  const auto grown = std::min(std::chrono::duration_cast<std::chrono::microseconds>(quiet / 8),
                              std::chrono::microseconds(config.idle_backoff_max_us));
  return std::max(base, grown);
}

uint64_t LetBurstFinish(Waiters& waiters, WorkSignal& enqueued, uint64_t seen, bool shared_core, uint64_t polls_seen,
                        std::chrono::microseconds spin, const std::function<uint64_t()>& new_bytes) {
  if (waiters.count() > 0 || waiters.polls() != polls_seen) return seen;
  // With GPU work about (Runtime::DeviceSpin), the thread that enqueued is
  // about to wait, and it runs on another core: poll for it rather than
  // sleep until its wait wakes this thread.
  const auto spin_until = Clock::now() + std::min<Clock::duration>(spin, kBurstQuiet);
  while (spin.count() > 0 && Clock::now() < spin_until) {
    sched_yield();
    if (waiters.count() > 0 || waiters.polls() != polls_seen) return enqueued.generation();
  }
  // Usually the thread that enqueued is about to wait: a yield lets it get
  // there without a wake-up each way (when the scheduler honours the yield).
  sched_yield();
  const auto start = Clock::now();
  auto last_arrival = start;
  bool woken_by_waits = false;
  while (waiters.count() == 0) {
    const auto now = Clock::now();
    const uint64_t bytes = shared_core ? 0 : new_bytes();
    const bool small = bytes > 0 && bytes < kSmallBurstBytes;
    const auto deadline = start + (shared_core ? kSharedCoreLimit : small ? kSmallBurstLimit : kBurstLimit);
    if (now >= deadline) break;
    const auto quiet_until = last_arrival + (small ? kSmallBurstQuiet : kBurstQuiet);
    if (!shared_core && now >= quiet_until) break;  // quiet: nothing new, nobody waiting
    const auto until = shared_core ? deadline : std::min(deadline, quiet_until);
    const auto left = std::chrono::duration_cast<std::chrono::microseconds>(until - now);
    if (small) {
      // Sleep until the next enqueue, or until a thread starts to wait or
      // polls (which then notifies this signal too): one wake-up for the
      // weight that ends the pause, none while it lasts.
      if (!woken_by_waits) {
        waiters.set_wake_on_wait(true);
        woken_by_waits = true;
      }
      if (waiters.count() > 0 || waiters.polls() != polls_seen) break;  // began before the switch
      enqueued.WaitFor(seen, left);
      if (waiters.count() > 0 || waiters.polls() != polls_seen) break;
    } else {
      const uint64_t starts = waiters.started().generation();
      if (waiters.count() > 0) break;  // began waiting before `starts` was read
      waiters.started().WaitFor(starts, left);
      if (waiters.started().generation() != starts) break;  // a wait or a poll began
    }
    const uint64_t latest = enqueued.generation();
    if (latest != seen) last_arrival = Clock::now();
    seen = latest;
  }
  if (woken_by_waits) waiters.set_wake_on_wait(false);  // (a process on one core never pauses here)
  return enqueued.generation();
}

}  // namespace accord
