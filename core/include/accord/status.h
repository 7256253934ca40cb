// Status and Result<T>: errors travel as values inside accord.
//
// Only the edges (the pybind11 module, the LibTorch adapter) turn a Status into
// an exception. A Status is cheap to copy when OK (no allocation).
#pragma once

#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <utility>

namespace accord {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,     // bad input from the caller; nothing was enqueued
  kPreconditionFailed,  // e.g. not initialised, or called on a rank outside the process set
  kMismatch,            // ranks disagree about a collective (dtype, shape, op, ...)
  kTimeout,             // a Wait() deadline passed; the operation is still in flight
  kShutDown,            // accord was shut down before the operation completed
  kAborted,             // the operation was cancelled (e.g. its process set was removed)
  kUnimplemented,       // a feature this build does not have (e.g. CUDA tensors without CUDA)
  kInternal,            // MPI/NCCL/CUDA failure or a broken invariant
};

const char* StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message);

  static Status OK() { return Status(); }
  static Status InvalidArgument(std::string msg) { return {StatusCode::kInvalidArgument, std::move(msg)}; }
  static Status PreconditionFailed(std::string msg) { return {StatusCode::kPreconditionFailed, std::move(msg)}; }
  static Status Mismatch(std::string msg) { return {StatusCode::kMismatch, std::move(msg)}; }
  static Status Timeout(std::string msg) { return {StatusCode::kTimeout, std::move(msg)}; }
  static Status ShutDown(std::string msg) { return {StatusCode::kShutDown, std::move(msg)}; }
  static Status Aborted(std::string msg) { return {StatusCode::kAborted, std::move(msg)}; }
  static Status Unimplemented(std::string msg) { return {StatusCode::kUnimplemented, std::move(msg)}; }
  static Status Internal(std::string msg) { return {StatusCode::kInternal, std::move(msg)}; }

  bool ok() const { return state_ == nullptr; }
  StatusCode code() const { return state_ ? state_->code : StatusCode::kOk; }
  const std::string& message() const;
  // "CODE: message", or "OK".
  std::string ToString() const;

 private:
  struct State {
    StatusCode code;
    std::string message;
  };
  std::shared_ptr<const State> state_;  // null means OK
};

std::ostream& operator<<(std::ostream& os, const Status& status);

// A value or the Status that explains why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}          // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {}  // NOLINT: must not be OK

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() & { return *value_; }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace accord

#define ACCORD_CONCAT_INNER_(a, b) a##b
#define ACCORD_CONCAT_(a, b) ACCORD_CONCAT_INNER_(a, b)

// Returns from the enclosing function if `expr` (a Status) is not OK.
#define ACCORD_RETURN_IF_ERROR(expr)                 \
  do {                                               \
    ::accord::Status accord_status_ = (expr);        \
    if (!accord_status_.ok()) return accord_status_; \
  } while (0)

// `lhs = value of expr` (a Result<T>), or return its Status.
#define ACCORD_ASSIGN_OR_RETURN(lhs, expr)                                                                      \
  auto ACCORD_CONCAT_(accord_result_, __LINE__) = (expr);                                                       \
  if (!ACCORD_CONCAT_(accord_result_, __LINE__).ok()) return ACCORD_CONCAT_(accord_result_, __LINE__).status(); \
  lhs = std::move(ACCORD_CONCAT_(accord_result_, __LINE__)).value()
