// DeviceFusionBuffer: the device memory that fused collectives on CUDA
// tensors pack into, one per device, used only on that device's
// communication stream. Like the CPU FusionBuffer it grows on demand and
// never shrinks; it is allocated and freed in the stream's order, so work
// still queued on the old memory finishes before it is given back.
// Coordinator thread only.
#pragma once

#include <cstddef>

#include "device/device.h"

namespace accord {

class DeviceFusionBuffer {
 public:
  explicit DeviceFusionBuffer(DeviceStream* stream) : stream_(stream) {}
  ~DeviceFusionBuffer();
  DeviceFusionBuffer(const DeviceFusionBuffer&) = delete;
  DeviceFusionBuffer& operator=(const DeviceFusionBuffer&) = delete;

  // At least `bytes` of device memory, for work enqueued on the stream from
  // now on; valid until the next call.
  Result<char*> Get(size_t bytes);
  size_t capacity() const { return capacity_; }

 private:
  DeviceStream* stream_;
  char* data_ = nullptr;
  size_t capacity_ = 0;
};

}  // namespace accord
