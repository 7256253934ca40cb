// NcclComm: move-only owner of one non-blocking NCCL communicator, with the
// waits and the abort that make it safe to use under a deadline.
//
// Non-blocking communicators (ncclConfig_t::blocking = 0) never block the
// caller on the other ranks: initialisation, collectives, group end and
// finalize may return ncclInProgress and finish in the background. Until
// ncclCommGetAsyncError reports ncclSuccess again, no other NCCL call may be
// made on the communicator and no other CUDA work may be enqueued on the
// stream NCCL is using. Errors can also surface only there, later.
//
// How a batch of NCCL calls runs (Run):
//   1. The comm's device becomes the thread's current device (DeviceGuard).
//   2. Under `mutex_`, the calls are issued; they return at once.
//   3. Without the lock, WaitReady polls ncclCommGetAsyncError (each poll
//      under the lock, a short sleep between polls) until the state leaves
//      ncclInProgress, the deadline passes, or Abort() is called.
//   4. On an NCCL error the comm is in error: the first error is kept and
//      every later call returns it; the destructor aborts instead of
//      finalizing. When the deadline passes, the comm is aborted at once
//      (nothing else can be done with a comm that is still in progress) and
//      every later call returns the timeout.
//
// Abort() (ncclCommAbort) makes collectives already queued on the GPU end
// early. It takes `mutex_` only for one NCCL call, and waiting loops check
// the aborted flag before each poll, so it interrupts a wait within one poll
// interval; the lock keeps it from freeing the comm under a concurrent NCCL
// call. After it, every call fails with kAborted.
//
// Threads: Create, Run, WaitReady and the destructor belong to one thread
// (the coordinator). Abort() may be called from any thread while the
// object lives, but not while it is being moved or destroyed.
#pragma once

#include <nccl.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "accord/status.h"

namespace accord {

class NcclComm {
 public:
  using Clock = std::chrono::steady_clock;

  // Every rank of the set calls it with the same id and size. Waits at most
  // `timeout_seconds` (0: no limit) for the other ranks; if they do not all
  // arrive, the comm is aborted and the error names this rank, the set's
  // size, the device and the seconds waited.
  static Result<NcclComm> Create(const ncclUniqueId& id, int rank, int size, int ordinal, double timeout_seconds);

  // Finalizes the comm and waits (at most timeout_seconds, or
  // kUnboundedFinalizeSeconds when that is 0) for it to become quiescent,
  // then destroys it; aborts it instead if it is in error or the wait runs
  // out. Never throws; failures are logged.
  ~NcclComm();
  NcclComm(NcclComm&& other) noexcept;
  NcclComm& operator=(NcclComm&& other) noexcept;
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  int rank() const;
  int size() const;
  int ordinal() const;
  // "rank 1 of 4 on CUDA device 0", for error messages.
  std::string Describe() const;

  // Issues a batch of NCCL calls (steps 1-4 above) and returns once NCCL
  // has accepted all of it, so the caller may enqueue its next CUDA work on
  // the stream. `issue` gets the raw handle, makes its calls (checked with
  // ACCORD_NCCL_CHECK_ISSUE) and returns the first failure. `what` names the
  // batch in errors ("ncclAllReduce").
  Status Run(const char* what, const std::function<Status(ncclComm_t)>& issue);

  // Polls until the comm is no longer ncclInProgress: OK once it is ready,
  // its error if it failed, kAborted after Abort(), or kInternal (the comm
  // aborted) when `deadline` passes first.
  Status WaitReady(Clock::time_point deadline, const char* what);

  // Any thread; idempotent. See the header comment.
  void Abort();

  // Bounds the destructor's wait for ncclCommFinalize when the collective
  // timeout is 0 (no limit): a shutdown must not hang on a dead peer.
  static constexpr double kUnboundedFinalizeSeconds = 60.0;

 private:
  struct State;
  explicit NcclComm(std::unique_ptr<State> state);

  // Status for a comm that can no longer be used, or OK. Needs the lock.
  Status UsableLocked() const;
  // Keeps `error` as the comm's first error and returns it. Needs the lock.
  Status FailLocked(Status error);
  // ncclCommAbort on the handle (then null). Needs the lock.
  void AbortLocked(const char* why);
  // The destructor's work: finalize and destroy, or abort.
  void Close() noexcept;

  std::unique_ptr<State> state_;
};

// now + `seconds`, or the far future for 0 (no limit) and anything not
// positive.
NcclComm::Clock::time_point DeadlineAfter(double seconds);

}  // namespace accord
