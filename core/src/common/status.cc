// Out-of-line members of accord::Status (core/include/accord/status.h).
#include "accord/status.h"

namespace accord {

const char* StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "OK";
    case StatusCode::kInvalidArgument: return "INVALID_ARGUMENT";
    case StatusCode::kPreconditionFailed: return "PRECONDITION_FAILED";
    case StatusCode::kMismatch: return "MISMATCH";
    case StatusCode::kTimeout: return "TIMEOUT";
    case StatusCode::kShutDown: return "SHUT_DOWN";
    case StatusCode::kAborted: return "ABORTED";
    case StatusCode::kUnimplemented: return "UNIMPLEMENTED";
    case StatusCode::kInternal: return "INTERNAL";
  }
  return "UNKNOWN";
}

Status::Status(StatusCode code, std::string message) {
  // An OK code never carries state, so ok() stays a null check and OK
  // statuses never allocate, whatever the caller passed as message.
  if (code != StatusCode::kOk) {
    state_ = std::make_shared<const State>(State{code, std::move(message)});
  }
}

const std::string& Status::message() const {
  // A function-local constant so that OK statuses can hand out a reference
  // without owning a string.
  static const std::string kEmpty;
  return state_ ? state_->message : kEmpty;
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  std::string text = StatusCodeName(code());
  text += ": ";
  text += state_->message;
  return text;
}

std::ostream& operator<<(std::ostream& os, const Status& status) { return os << status.ToString(); }

}  // namespace accord
