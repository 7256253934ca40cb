// Turns an MPI return code into an accord::Status at the call site.
//
//   ACCORD_RETURN_IF_ERROR(ACCORD_MPI_CHECK(MPI_Barrier(comm)));
//
// The Status (kInternal) carries the call's text, MPI's own error string and
// file:line. Open MPI only returns error codes on communicators whose error
// handler is MPI_ERRORS_RETURN; with the default MPI_ERRORS_ARE_FATAL it
// aborts before the code comes back.
//
// Any thread that may call MPI may use it; it calls only MPI_Error_string,
// which MPI allows before MPI_Init and after MPI_Finalize.
#pragma once

#include <mpi.h>

#include <string>

#include "accord/status.h"

namespace accord {

inline Status MpiCheck(int rc, const char* what, const char* file, int line) {
  if (rc == MPI_SUCCESS) return Status::OK();
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  std::string error;
  if (MPI_Error_string(rc, text, &length) == MPI_SUCCESS) {
    error.assign(text, static_cast<size_t>(length));
  } else {
    error = "unknown MPI error";
  }
  return Status::Internal(std::string(what) + " failed: " + error + " (MPI error " + std::to_string(rc) + ") at " +
                          file + ":" + std::to_string(line));
}

}  // namespace accord

#define ACCORD_MPI_CHECK(call) ::accord::MpiCheck((call), #call, __FILE__, __LINE__)
