// WorkSignal: wakes the coordinator thread when a user thread enqueues.
//
// User threads call Notify(); the coordinator calls WaitFor(). A counter
// makes a notification that arrives before the wait begins count.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace accord {

class WorkSignal {
 public:
  void Notify() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ++generation_;
    }
    cv_.notify_one();
  }
  uint64_t generation() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return generation_;
  }
  // Returns when the generation differs from `seen` or `timeout` passed.
  void WaitFor(uint64_t seen, std::chrono::microseconds timeout) {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait_for(lock, timeout, [&] { return generation_ != seen; });
  }

 private:
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  uint64_t generation_ = 0;
};

}  // namespace accord
