// Turns a CUDA runtime return code into an accord::Status at the call site.
//
//   ACCORD_RETURN_IF_ERROR(ACCORD_CUDA_CHECK(cudaStreamSynchronize(stream)));
//
// The Status (kInternal) carries the call's text, CUDA's error name and
// string, and file:line. Any thread.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "accord/status.h"

namespace accord {

inline Status CudaCheck(cudaError_t rc, const char* what, const char* file, int line) {
  if (rc == cudaSuccess) return Status::OK();
  return Status::Internal(std::string(what) + " failed: " + cudaGetErrorName(rc) + ": " + cudaGetErrorString(rc) +
                          " at " + file + ":" + std::to_string(line));
}

}  // namespace accord

#define ACCORD_CUDA_CHECK(call) ::accord::CudaCheck((call), #call, __FILE__, __LINE__)
