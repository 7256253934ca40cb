#include "runtime/failure_protocol.h"

#include <algorithm>
#include <utility>

#include "common/logging.h"

namespace accord {

namespace {

// The cap of FailureWait. A healthy rank joins a round within its idle wait
// (milliseconds) plus the cycle time; one that has not joined by then is
// blocked in a collective with this rank and never will.
constexpr double kFailureWaitMax = 30.0;  // seconds

}  // namespace

std::chrono::steady_clock::duration FailureWait(const Config& config, double cycle_time_ms) {
  using Clock = std::chrono::steady_clock;
  double seconds = kFailureWaitMax;
  if (!config.stall_check_disable && config.stall_shutdown_time_seconds > 0) {
    seconds = std::min(seconds, config.stall_shutdown_time_seconds);
  }
  seconds += 2 * cycle_time_ms / 1000;
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

void FailureProtocol::Report(const Status& status) {
  std::lock_guard<std::mutex> lock(reported_mutex_);
  if (reported_.ok()) reported_ = status;
  if (!reported_.ok()) has_reported_.store(true, std::memory_order_release);
}

Status FailureProtocol::TakeReported() {
  // The coordinator asks every iteration; a report is rare. One missed by
  // this load is taken in the next iteration (the reporter wakes it).
  if (!has_reported_.load(std::memory_order_acquire)) return Status::OK();
  std::lock_guard<std::mutex> lock(reported_mutex_);
  has_reported_.store(false, std::memory_order_relaxed);
  return std::exchange(reported_, Status::OK());
}

Status FailureProtocol::Absorb(Status status, int rank, const Config& config, double cycle_time_ms) {
  if (status.ok() || !failure_.ok()) return status;
  const std::string what = "rank " + std::to_string(rank) + "'s coordinator failed: " + status.ToString();
  failure_ = Status(status.code(), "accord stopped: " + what);
  stop_reason_ = what;
  stop_requested_ = true;
  const Clock::duration wait = FailureWait(config, cycle_time_ms);
  deadline_ = Clock::now() + wait;
  ACCORD_LOG(kError) << "coordinator failed: " << status << "; stopping every rank (waiting up to "
                     << std::chrono::duration<double>(wait).count() << " s for the others to take part)";
  return Status::OK();
}

void FailureProtocol::Abandon(const Status& why, const MpiWorld& world) const {
  ACCORD_LOG(kFatal) << failure_.message() << "; the other ranks could not be told (" << why
                     << "): they may be waiting inside a collective with this rank. Ending the job with MPI_Abort";
  world.Abort(1);
}

void FailureProtocol::StopForSet(ProcessSetId set, const std::string& why) {
  if (stop_reason_.empty()) {
    const bool ours = why.rfind("accord ", 0) == 0;  // "accord was stopped by ..."
    stop_reason_ = "process set " + std::to_string(set) + (ours ? " " + why.substr(7) : ": " + why);
  }
  stop_requested_ = true;
}

void FailureProtocol::GlobalRoundEnded(const RoundResult& result) {
  if (result.shutdown) stop_message_ = result.stop_message;
  if (result.stopped_by_error) stopped_by_error_ = true;
}

Status FailureProtocol::FinalStatus() const {
  return failure_.ok() ? Status::ShutDown(stop_message_ + "; the operation cannot complete") : failure_;
}

Status FailureProtocol::stop_status() const {
  std::lock_guard<std::mutex> lock(stop_mutex_);
  return stop_status_;
}

Status FailureProtocol::MarkStopped(const Status& reason) {
  {
    std::lock_guard<std::mutex> lock(stop_mutex_);
    if (stop_status_.ok()) stop_status_ = reason;
  }
  running_ = false;
  return stop_status();
}

}  // namespace accord
