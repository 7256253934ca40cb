// Waiters: how many user threads are blocked in a handle's Wait right now,
// and a signal that fires whenever one starts to wait, or polls a handle that
// is not done yet. Process-wide.
//
// The coordinator uses it to tell a user thread that is still submitting a
// burst of tensors (nobody waiting yet) from one that has submitted them all
// and is waiting for the results. Any thread may call every method.
#pragma once

#include <atomic>

#include "runtime/work_signal.h"

namespace accord {

class Waiters {
 public:
  static Waiters& Get();

  // Around a wait that may block.
  void Begin() {
    count_.fetch_add(1);
    started_.Notify();
  }
  void End() { count_.fetch_sub(1); }
  // A poll that found its handle not done: the thread wants results too.
  void Polled() { started_.Notify(); }

  int count() const { return count_.load(); }
  WorkSignal& started() { return started_; }

 private:
  std::atomic<int> count_{0};
  WorkSignal started_;
};

}  // namespace accord
