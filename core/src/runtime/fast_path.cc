#include "runtime/fast_path.h"

#include <algorithm>

#include "runtime/waiters.h"

namespace accord {

namespace {

// What the calling thread did last, for DeferWake. Pointers are compared,
// never followed.
struct ThreadCalls {
  const HandleState* last_submitted = nullptr;
  // It waited for its last submission before submitting anything else.
  bool waits_at_once = false;
  // Its enqueue whose wake-up was deferred, until the thread's next call.
  const HandleState* deferred = nullptr;
};

ThreadCalls& Calls() {
  thread_local ThreadCalls calls;
  return calls;
}

thread_local bool driving = false;

}  // namespace

bool FastPath::ThisThreadDrives() { return driving; }

FastPath& FastPath::Get() {
  static FastPath* fast = new FastPath();  // leaked: handles may be waited on during exit
  return *fast;
}

void FastPath::Attach(Driver* driver, std::chrono::microseconds budget) {
  driver_ = driver;
  budget_ = budget;
}

void FastPath::Detach() {
  parked_.store(false);
  driver_ = nullptr;
}

bool FastPath::DeferWake(const HandleState* state) {
  ThreadCalls& calls = Calls();
  calls.last_submitted = state;
  if (calls.deferred != nullptr) {
    // A second submission before a wait: a burst, which the coordinator
    // gathers (round_start.h). This enqueue's wake-up covers both.
    calls.deferred = nullptr;
    calls.waits_at_once = false;
    return false;
  }
  if (!calls.waits_at_once || !parked_.load()) return false;
  calls.deferred = state;
  return true;
}

void FastPath::WakeDeferred() {
  ThreadCalls& calls = Calls();
  if (calls.deferred == nullptr) return;
  calls.deferred = nullptr;
  Waiters::Get().coordinator().Notify();
}

void FastPath::Polled() {
  Calls().waits_at_once = false;
  WakeDeferred();
}

void FastPath::NoteWait(const HandleState& state) {
  ThreadCalls& calls = Calls();
  calls.waits_at_once = calls.last_submitted == &state;
}

bool FastPath::BeforeWait(const HandleState& state, std::chrono::microseconds limit) {
  ThreadCalls& calls = Calls();
  const bool deferred = calls.deferred != nullptr;
  calls.deferred = nullptr;
  bool settled = false;
  bool tried = false;
  if (parked_.load()) {
    std::unique_lock<std::mutex> token(token_, std::try_to_lock);
    if (token.owns_lock() && driver_ != nullptr) {
      tried = true;
      // The driving thread counts as waiting (the rounds' polls spin for a
      // waiter) but wakes nobody: it is the coordinator now.
      Waiters& waiters = Waiters::Get();
      waiters.BeginQuietly();
      driving = true;
      settled = driver_->Drive(state, std::min(budget_, limit));
      driving = false;
      waiters.End();
    }
  }
  // The coordinator takes over what is left: the deferred operation, or the
  // rounds the driving thread began.
  if (!settled && (tried || deferred)) Waiters::Get().coordinator().Notify();
  return settled;
}

}  // namespace accord
