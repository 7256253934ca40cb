// WorkSignal: wakes the coordinator thread when a user thread enqueues.
//
// User threads call Notify(); the coordinator (or a thread driving its
// rounds: fast_path.h) calls WaitFor(). A generation
// counter makes a notification that arrives before the wait begins count.
// Notify() takes the lock only when the coordinator is waiting, so a burst of
// enqueues while it works costs one atomic increment each.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace accord {

class WorkSignal {
 public:
  void Notify() {
    generation_.fetch_add(1);
    if (waiting_.load() == 0) return;
    // Lock, so the waiter is either before its predicate check (and sees the
    // new generation) or inside wait (and gets the notification).
    { std::lock_guard<std::mutex> lock(mutex_); }
    // All: the parked coordinator and a thread driving its rounds in its
    // place (fast_path.h) may both be waiting.
    cv_.notify_all();
  }
  // Counts new work without waking the waiter (the work's own thread will
  // see to it: fast_path.h).
  void Bump() { generation_.fetch_add(1); }
  uint64_t generation() const { return generation_.load(); }
  // Returns when the generation differs from `seen` or `timeout` passed.
  void WaitFor(uint64_t seen, std::chrono::microseconds timeout) {
    std::unique_lock<std::mutex> lock(mutex_);
    waiting_.fetch_add(1);
    cv_.wait_for(lock, timeout, [&] { return generation_.load() != seen; });
    waiting_.fetch_sub(1);
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> waiting_{0};
};

}  // namespace accord
