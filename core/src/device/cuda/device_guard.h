// DeviceGuard: makes `ordinal` the calling thread's current CUDA device for
// its lifetime and restores the previous one after. Move-only; the
// destructor never throws (a failure to restore is logged).
#pragma once

#include <cuda_runtime_api.h>

#include "accord/status.h"
#include "common/logging.h"
#include "device/cuda/cuda_check.h"

namespace accord {

class DeviceGuard {
 public:
  // Check status() before relying on the switch.
  explicit DeviceGuard(int ordinal) {
    status_ = ACCORD_CUDA_CHECK(cudaGetDevice(&previous_));
    if (status_.ok() && previous_ != ordinal) {
      status_ = ACCORD_CUDA_CHECK(cudaSetDevice(ordinal));
      switched_ = status_.ok();
    }
  }
  ~DeviceGuard() {
    if (!switched_) return;
    const Status restored = ACCORD_CUDA_CHECK(cudaSetDevice(previous_));
    if (!restored.ok()) {
      ACCORD_LOG(kWarning) << "could not restore the current CUDA device: " << restored;
    }
  }
  DeviceGuard(DeviceGuard&& other) noexcept
      : previous_(other.previous_), switched_(other.switched_), status_(std::move(other.status_)) {
    other.switched_ = false;
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;
  DeviceGuard& operator=(DeviceGuard&&) = delete;

  const Status& status() const { return status_; }

 private:
  int previous_ = 0;
  bool switched_ = false;
  Status status_;
};

}  // namespace accord
