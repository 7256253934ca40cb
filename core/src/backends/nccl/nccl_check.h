// Turns an NCCL return code into an accord::Status at the call site.
//
//   ACCORD_RETURN_IF_ERROR(ACCORD_NCCL_CHECK(ncclGetUniqueId(&id)));
//   ACCORD_NCCL_CHECK_COMM(comm, ncclCommGetAsyncError(comm, &state))
//   ACCORD_NCCL_CHECK_ISSUE(comm, ncclAllReduce(..., comm, stream))
//
// The Status (kInternal) carries the call's text, NCCL's error string and
// code, and file:line. The _COMM and _ISSUE variants add NCCL's description
// of its last error (ncclGetLastError), which names the cause (a peer that
// went away, a bad pointer) where the error string only names the class.
//
// _ISSUE is for calls on a non-blocking communicator (collectives, group
// end, finalize): ncclInProgress means the call was accepted and finishes in
// the background, so it counts as success there; the caller then waits until
// the communicator is ready (NcclComm::WaitReady) before its next NCCL call
// or its next CUDA work on the stream.
//
// Any thread.
#pragma once

#include <nccl.h>

#include <string>

#include "accord/status.h"

namespace accord {

inline Status NcclCheck(ncclResult_t rc, const char* what, const char* file, int line, bool with_last_error,
                        ncclComm_t comm) {
  if (rc == ncclSuccess) return Status::OK();
  std::string message = std::string(what) + " failed: " + ncclGetErrorString(rc) + " (NCCL error " +
                        std::to_string(static_cast<int>(rc)) + ")";
  if (with_last_error) {
    const char* last = ncclGetLastError(comm);
    if (last != nullptr && last[0] != '\0') message += ": " + std::string(last);
  }
  return Status::Internal(message + " at " + file + ":" + std::to_string(line));
}

inline Status NcclIssueCheck(ncclResult_t rc, const char* what, const char* file, int line, ncclComm_t comm) {
  return rc == ncclInProgress ? Status::OK() : NcclCheck(rc, what, file, line, true, comm);
}

}  // namespace accord

#define ACCORD_NCCL_CHECK(call) ::accord::NcclCheck((call), #call, __FILE__, __LINE__, false, nullptr)
#define ACCORD_NCCL_CHECK_COMM(comm, call) ::accord::NcclCheck((call), #call, __FILE__, __LINE__, true, (comm))
#define ACCORD_NCCL_CHECK_ISSUE(comm, call) ::accord::NcclIssueCheck((call), #call, __FILE__, __LINE__, (comm))
