#include "backends/nccl/nccl_comm.h"

#include <algorithm>
#include <cstdio>
#include <thread>
#include <utility>

#include "backends/nccl/nccl_check.h"
#include "common/logging.h"
#include "device/cuda/device_guard.h"

namespace accord {

struct NcclComm::State {
  int rank = 0;
  int size = 1;
  int ordinal = 0;
  double timeout_seconds = 0;
  // Set by Abort() before it takes the lock, so waiting loops stop at their
  // next poll.
  std::atomic<bool> aborted{false};

  std::mutex mutex;
  ncclComm_t comm = nullptr;  // guarded by mutex; null once aborted or destroyed
  Status error;               // guarded by mutex; the first failure, after which the comm is unusable
};

namespace {

// The pause between two polls of a communicator's state. Enqueueing a
// collective usually finishes within microseconds, so the first polls only
// yield; a long wait (initialisation, a peer that is late) backs off to
// sleeps of up to a millisecond.
class PollPause {
 public:
  void Wait() {
    if (yields_ < kYields) {
      ++yields_;
      std::this_thread::yield();
      return;
    }
    std::this_thread::sleep_for(sleep_);
    sleep_ = std::min(sleep_ * 2, kMaxSleep);
  }

 private:
  static constexpr int kYields = 100;
  static constexpr std::chrono::microseconds kMaxSleep{1000};
  int yields_ = 0;
  std::chrono::microseconds sleep_{10};
};

// "2.5 s", "300.0 s".
std::string Seconds(double seconds) {
  char text[48];
  std::snprintf(text, sizeof(text), "%.1f s", seconds);
  return text;
}

}  // namespace

NcclComm::Clock::time_point DeadlineAfter(double seconds) {
  // Beyond ~30 years the sum could overflow the clock; treat it as no limit.
  if (!(seconds > 0) || seconds > 1e9) return NcclComm::Clock::time_point::max();
  return NcclComm::Clock::now() +
         std::chrono::duration_cast<NcclComm::Clock::duration>(std::chrono::duration<double>(seconds));
}

NcclComm::NcclComm(std::unique_ptr<State> state) : state_(std::move(state)) {}

NcclComm::~NcclComm() { Close(); }

NcclComm::NcclComm(NcclComm&& other) noexcept = default;

NcclComm& NcclComm::operator=(NcclComm&& other) noexcept {
  if (this != &other) {
    Close();
    state_ = std::move(other.state_);
  }
  return *this;
}

int NcclComm::rank() const { return state_->rank; }
int NcclComm::size() const { return state_->size; }
int NcclComm::ordinal() const { return state_->ordinal; }

std::string NcclComm::Describe() const {
  if (!state_) return "a moved-from NCCL communicator";
  return "rank " + std::to_string(state_->rank) + " of " + std::to_string(state_->size) + " on CUDA device " +
         std::to_string(state_->ordinal);
}

Result<NcclComm> NcclComm::Create(const ncclUniqueId& id, int rank, int size, int ordinal, double timeout_seconds) {
  if (size < 1 || rank < 0 || rank >= size || ordinal < 0) {
    return Status::InvalidArgument("NCCL communicator: rank " + std::to_string(rank) + " of a set of " +
                                   std::to_string(size) + " on CUDA device " + std::to_string(ordinal) +
                                   " is not a valid member");
  }
  auto state = std::make_unique<State>();
  state->rank = rank;
  state->size = size;
  state->ordinal = ordinal;
  state->timeout_seconds = timeout_seconds;
  NcclComm comm(std::move(state));
  const std::string context = "creating the NCCL communicator (" + comm.Describe() + ") failed: ";

  DeviceGuard guard(ordinal);
  if (!guard.status().ok()) return Status(guard.status().code(), context + guard.status().message());
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // every wait for the other ranks is ours, under a deadline
  ncclComm_t handle = nullptr;
  const ncclResult_t rc = ncclCommInitRankConfig(&handle, size, id, rank, &config);
  {
    std::lock_guard<std::mutex> lock(comm.state_->mutex);
    comm.state_->comm = handle;  // NCCL returns a handle even when it fails later
    const Status issued = NcclIssueCheck(rc, "ncclCommInitRankConfig", __FILE__, __LINE__, handle);
    if (!issued.ok()) {
      comm.AbortLocked("its initialisation failed");
      return Status::Internal(context + issued.message());
    }
  }
  const Status ready = comm.WaitReady(DeadlineAfter(timeout_seconds), "ncclCommInitRankConfig");
  if (!ready.ok()) {
    // The message names the comm already; the destructor of `comm` aborts a
    // comm in error.
    return Status(ready.code(), "creating the NCCL communicator failed: " + ready.message() + " (all " +
                                    std::to_string(size) + " ranks must create it together, with the same unique id)");
  }
  return Result<NcclComm>(std::move(comm));
}

Status NcclComm::Run(const char* what, const std::function<Status(ncclComm_t)>& issue) {
  if (!state_) return Status::PreconditionFailed(std::string(what) + ": the NCCL communicator was moved from");
  DeviceGuard guard(state_->ordinal);
  ACCORD_RETURN_IF_ERROR(guard.status());
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    ACCORD_RETURN_IF_ERROR(UsableLocked());
    Status issued = issue(state_->comm);
    if (!issued.ok()) return FailLocked(std::move(issued));
  }
  return WaitReady(DeadlineAfter(state_->timeout_seconds), what);
}

Status NcclComm::WaitReady(Clock::time_point deadline, const char* what) {
  if (!state_) return Status::PreconditionFailed(std::string(what) + ": the NCCL communicator was moved from");
  const Clock::time_point start = Clock::now();
  PollPause pause;
  while (true) {
    {
      std::lock_guard<std::mutex> lock(state_->mutex);
      ACCORD_RETURN_IF_ERROR(UsableLocked());
      ncclComm_t comm = state_->comm;
      ncclResult_t state = ncclSuccess;
      Status polled = ACCORD_NCCL_CHECK_COMM(comm, ncclCommGetAsyncError(comm, &state));
      if (!polled.ok()) return FailLocked(std::move(polled));
      if (state == ncclSuccess) return Status::OK();
      if (state != ncclInProgress) return FailLocked(NcclCheck(state, what, __FILE__, __LINE__, true, comm));
      const Clock::time_point now = Clock::now();
      if (now >= deadline) {
        const double waited = std::chrono::duration<double>(now - start).count();
        Status timed_out = FailLocked(Status::Internal(std::string(what) + " did not finish within " + Seconds(waited) +
                                                       "; the communicator was aborted"));
        AbortLocked(timed_out.message().c_str());
        return timed_out;
      }
    }
    pause.Wait();
  }
}

void NcclComm::Abort() {
  if (!state_) return;
  state_->aborted.store(true);
  std::lock_guard<std::mutex> lock(state_->mutex);
  AbortLocked("Abort() was called");
}

Status NcclComm::UsableLocked() const {
  if (!state_->error.ok()) return state_->error;
  if (state_->aborted.load() || state_->comm == nullptr) {
    return Status::Aborted("the NCCL communicator (" + Describe() + ") was aborted; no collective can run on it");
  }
  return Status::OK();
}

Status NcclComm::FailLocked(Status error) {
  if (state_->error.ok()) {
    state_->error = Status(error.code(), error.message() + " [NCCL communicator: " + Describe() + "]");
  }
  return state_->error;
}

void NcclComm::AbortLocked(const char* why) {
  if (state_->comm == nullptr) return;
  // NCCL frees the comm's device resources; it needs the comm's device.
  DeviceGuard guard(state_->ordinal);
  if (!guard.status().ok()) {
    ACCORD_LOG(kWarning) << "aborting an NCCL communicator: " << guard.status();
  }
  const Status aborted = NcclIssueCheck(ncclCommAbort(state_->comm), "ncclCommAbort", __FILE__, __LINE__, nullptr);
  state_->comm = nullptr;
  ACCORD_LOG(kWarning) << "aborted the NCCL communicator (" << Describe() << "): " << why;
  if (!aborted.ok()) {
    ACCORD_LOG(kWarning) << aborted;
  }
}

void NcclComm::Close() noexcept {
  if (!state_) return;
  const double limit = state_->timeout_seconds > 0 ? state_->timeout_seconds : kUnboundedFinalizeSeconds;
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    if (state_->comm == nullptr) return;  // aborted already
    if (!state_->error.ok()) {
      AbortLocked("it is in error, so it cannot be finalized");
      return;
    }
    DeviceGuard guard(state_->ordinal);
    const Status finalizing = ACCORD_NCCL_CHECK_ISSUE(state_->comm, ncclCommFinalize(state_->comm));
    if (!finalizing.ok()) {
      AbortLocked(finalizing.message().c_str());
      return;
    }
  }
  // Without the lock, so that Abort() can still cut the wait short.
  const Status quiescent = WaitReady(DeadlineAfter(limit), "ncclCommFinalize");
  std::lock_guard<std::mutex> lock(state_->mutex);
  if (state_->comm == nullptr) return;  // the wait timed out, or Abort() came first
  if (!quiescent.ok()) {
    AbortLocked(quiescent.message().c_str());
    return;
  }
  DeviceGuard guard(state_->ordinal);
  const Status destroyed =
      NcclIssueCheck(ncclCommDestroy(state_->comm), "ncclCommDestroy", __FILE__, __LINE__, nullptr);
  state_->comm = nullptr;
  if (!destroyed.ok()) {
    ACCORD_LOG(kWarning) << "destroying the NCCL communicator (" << Describe() << "): " << destroyed;
  }
}

}  // namespace accord
