// Waiters: how many user threads are blocked in a handle's Wait right now,
// and a signal that fires whenever one starts to wait, or polls a handle that
// is not done yet. Process-wide.
//
// The coordinator uses it to tell a user thread that is still submitting a
// burst of tensors (nobody waiting yet) from one that has submitted them all
// and is waiting for the results. Any thread may call every method.
//
// It also holds the coordinator's wake-up signal (one process, one
// coordinator at a time): every enqueue notifies it, and with
// set_wake_on_wait(true) (a process on one core, whose coordinator holds its
// rounds back until a thread waits) so does a thread that starts to wait or
// polls an unfinished handle. Process-wide, so it outlives every runtime.
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
    if (wake_on_wait_.load()) coordinator_.Notify();
  }
  void End() { count_.fetch_sub(1); }
  // Counted like Begin, but signals nothing: a thread that does the
  // coordinator's work itself while it waits (fast_path.h).
  void BeginQuietly() { count_.fetch_add(1); }
  // A poll that found its handle not done: the thread wants results too.
  void Polled() {
    polls_.fetch_add(1);
    started_.Notify();
    if (wake_on_wait_.load()) coordinator_.Notify();
  }

  int count() const { return count_.load(); }
  // Polls of unfinished handles so far.
  uint64_t polls() const { return polls_.load(); }
  WorkSignal& started() { return started_; }
  WorkSignal& coordinator() { return coordinator_; }
  void set_wake_on_wait(bool on) { wake_on_wait_.store(on); }

 private:
  std::atomic<int> count_{0};
  std::atomic<uint64_t> polls_{0};
  WorkSignal started_;
  WorkSignal coordinator_;
  std::atomic<bool> wake_on_wait_{false};
};

}  // namespace accord
