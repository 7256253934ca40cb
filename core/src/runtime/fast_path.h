// FastPath: a thread that waits for an operation runs the coordinator's
// iteration itself when the coordinator is parked, so a small synchronous
// operation costs no thread hand-off (docs/decisions.md, "The waiting thread
// drives").
//
// The coordinator's loop holds the token (a mutex) for everything it does
// except its idle sleep, when it parks: it marks itself parked and lets the
// token go. A thread about to block on an unfinished handle tries the token;
// if it gets it while a Driver is attached, it runs the coordinator's
// iterations (rounds, collectives, completions) until its handle is settled,
// for a bounded time; then it lets the token go and, if its handle is still
// pending, wakes the coordinator, which carries on as if it had run those
// iterations itself. So exactly one thread at a time does the coordinator's
// work and calls MPI; which thread it is changes only while the token is
// free.
//
// A thread's enqueue wakes the coordinator, except when the coordinator is
// parked and this thread waited for its previous operation before submitting
// anything else (it calls synchronously, as `hvd.allreduce` does): then the
// wake is deferred to the thread's next call. Its wait drives the operation;
// another submit or a poll wakes the coordinator; if the thread does none of
// these the coordinator finds the operation at its next idle round.
//
// Process-wide (leaked, like Waiters): a handle may outlive the runtime.
#pragma once

#include <atomic>
#include <chrono>
#include <mutex>

namespace accord {

class HandleState;

// What runs the coordinator's iterations for a waiting thread (Runtime).
class Driver {
 public:
  virtual ~Driver() = default;
  // Called with the token held, by a thread that waits for `awaited`. Runs
  // iterations until `awaited` is settled or `budget` has passed (at least
  // one iteration if it may drive at all); returns whether it settled.
  // When it returns false the caller wakes the coordinator.
  virtual bool Drive(const HandleState& awaited, std::chrono::microseconds budget) = 0;
};

class FastPath {
 public:
  static FastPath& Get();

  // The coordinator's loop holds this for everything but its idle sleep.
  std::mutex& token() { return token_; }
  // Coordinator, token held: whether waiting threads may drive (and with it
  // a driver), and how long one drives at most.
  void Attach(Driver* driver, std::chrono::microseconds budget);
  void Detach();
  // Coordinator: around its idle sleep (the token is free while parked).
  void set_parked(bool parked) { parked_.store(parked); }

  // Enqueueing thread, for the operation behind `state`: whether to leave
  // the coordinator asleep (see above). Records the submission.
  bool DeferWake(const HandleState* state);
  // Any wait for `state`, finished or not: notes whether the thread waits
  // for what it submitted last.
  void NoteWait(const HandleState& state);
  // A thread about to block on `state` (unfinished) for up to `limit`:
  // drives if it can. Returns whether `state` is settled; if not, and the
  // thread drove or had deferred a wake-up, the coordinator has been woken.
  bool BeforeWait(const HandleState& state, std::chrono::microseconds limit);
  // A poll found an unfinished handle: the thread does not wait, so an
  // operation whose wake it deferred needs the coordinator now.
  void Polled();

  // Whether the calling thread is driving (inside Driver::Drive).
  static bool ThisThreadDrives();

 private:
  // Wakes the coordinator for the calling thread's deferred operation, if any.
  void WakeDeferred();

  std::mutex token_;
  Driver* driver_ = nullptr;             // GUARDED_BY(token_)
  std::chrono::microseconds budget_{0};  // GUARDED_BY(token_)
  std::atomic<bool> parked_{false};
};

}  // namespace accord
