// Helpers shared by the GPU test programs: the process's CUDA device API
// and test memory that frees itself. Test threads only.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>

#include "device/cuda/cuda_device.h"

namespace accord_test {

// A CUDA device API of its own for the calling test (gpu_test_main.cc has
// checked that one can be made).
inline std::unique_ptr<accord::DeviceApi> CudaApi() { return accord::CreateCudaDeviceApi().value(); }

inline cudaStream_t NativeOf(accord::DeviceStream& stream) { return static_cast<cudaStream_t>(stream.native()); }

// Memory of `bytes` from `api`: device memory on device 0 or page-locked host
// memory, freed at scope exit (device memory after the device's work).
class TestBytes {
 public:
  enum Kind { kDevice, kPinnedHost };
  TestBytes(accord::DeviceApi& api, Kind kind, size_t bytes)
      : api_(api),
        kind_(kind),
        data_(static_cast<unsigned char*>(
            (kind == kDevice ? api.AllocateDevice(0, bytes) : api.AllocateHost(bytes)).value())) {}
  ~TestBytes() {
    if (kind_ == kDevice) {
      api_.FreeDevice(0, data_);
    } else {
      api_.FreeHost(data_);
    }
  }
  TestBytes(const TestBytes&) = delete;
  TestBytes& operator=(const TestBytes&) = delete;

  unsigned char* get() const { return data_; }
  template <typename T>
  T* as() const {
    return reinterpret_cast<T*>(data_);
  }

 private:
  accord::DeviceApi& api_;
  Kind kind_;
  unsigned char* data_;
};

}  // namespace accord_test
