// The CUDA implementation of the device seam (device/device.h): streams,
// events and memory of real GPUs, and the batched pack/unpack kernel
// (copy_kernel.h). Its semantics are those of device.h, which the host
// implementation (device/host/host_device.h) shares, so the GPU path's logic
// tested there holds here.
//
// Every call that depends on the calling thread's current device switches
// to the object's device for its duration (DeviceGuard) and back, so
// callers need not select a device. CUDA errors come back as Status values
// (ACCORD_CUDA_CHECK). Streams and events are move-only RAII objects whose
// destructors log failures instead of throwing. Any thread may call any
// method, but one stream must not be fed by two threads at once.
//
// device/device_factory.cc makes the process's one CudaDeviceApi through
// CreateCudaDeviceApi; the rest of accord reaches these classes through
// device.h's interfaces (a cudaStream_t is DeviceStream::native()).
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <string>

#include "accord/status.h"
#include "device/cuda/copy_kernel.h"
#include "device/device.h"

namespace accord {

class SegmentTable;

// A cudaEvent_t without timing, made on one device.
class CudaEvent : public DeviceEvent {
 public:
  static Result<CudaEvent> Create(int ordinal);
  ~CudaEvent() override;
  CudaEvent(CudaEvent&& other) noexcept;
  CudaEvent& operator=(CudaEvent&& other) noexcept;
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;

  int ordinal() const { return ordinal_; }
  cudaEvent_t get() const { return event_; }

  // A null native stream is the legacy default stream of the event's device.
  Status RecordNative(void* native_stream) override;
  Result<bool> Query() override;
  Status BlockNative(void* native_stream) override;
  // Blocks the calling thread until the captured work has run.
  Status Synchronize();

 private:
  CudaEvent(int ordinal, cudaEvent_t event) : ordinal_(ordinal), event_(event) {}

  int ordinal_;
  cudaEvent_t event_;  // null once moved from
};

// A cudaStream_t that does not synchronise with the legacy default stream.
class CudaStream : public DeviceStream {
 public:
  static Result<CudaStream> Create(int ordinal);
  // Waits for the work still queued (as the host implementation runs it),
  // then destroys the stream.
  ~CudaStream() override;
  CudaStream(CudaStream&& other) noexcept;
  CudaStream& operator=(CudaStream&& other) noexcept;
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;

  int ordinal() const override { return ordinal_; }
  void* native() const override { return stream_; }
  cudaStream_t get() const { return stream_; }

  Status Wait(DeviceEvent& event) override;
  // cudaMemcpyAsync; from or to pageable host memory CUDA may block the
  // caller until the copy is done.
  Status Copy(void* dst, const void* src, size_t bytes) override;
  // Uploads the segments (segment_table.h), then launches the kernel once.
  Status Launch(const CopyPlan& plan) override;
  // cudaMallocAsync / cudaFreeAsync, from the device's default memory pool.
  Result<void*> Allocate(size_t bytes) override;
  void Free(void* data) override;
  Status Synchronize() override;

 private:
  CudaStream(int ordinal, cudaStream_t stream, const CopyKernelGrid& grid);

  int ordinal_;
  cudaStream_t stream_;                     // null once moved from
  CopyKernelGrid grid_;                     // the kernel's grid limits on this device
  std::unique_ptr<SegmentTable> segments_;  // made by the first Launch
};

class CudaDeviceApi : public DeviceApi {
 public:
  // `device_count` devices are visible (cudaGetDeviceCount).
  explicit CudaDeviceApi(int device_count) : device_count_(device_count) {}

  const char* name() const override { return "cuda"; }
  // "CUDA runtime 13.0, driver 13.0".
  std::string Version() const override;
  int DeviceCount() const override { return device_count_; }
  Result<int> CurrentDevice() const override;
  // The PCI bus id, "0000:3b:00.0".
  Result<std::string> DeviceIdentity(int ordinal) const override;
  Result<std::unique_ptr<DeviceStream>> CreateStream(int ordinal) override;
  Result<std::unique_ptr<DeviceEvent>> CreateEvent(int ordinal) override;
  // Page-locked for every device (cudaHostAllocPortable).
  Result<void*> AllocateHost(size_t bytes) override;
  void FreeHost(void* data) override;
  Result<void*> AllocateDevice(int ordinal, size_t bytes) override;
  void FreeDevice(int ordinal, void* data) override;

 private:
  int device_count_;
};

// The CUDA device API, or why there is none: kUnimplemented when no driver
// or no device is visible (the message names CUDA's error and
// CUDA_VISIBLE_DEVICES), kInternal for any other failure.
Result<std::unique_ptr<DeviceApi>> CreateCudaDeviceApi();

// "CUDA 13.0" (the toolkit this build was compiled with), followed by
// " (driver 13.0)" when a driver is installed.
std::string CudaBuildVersion();

}  // namespace accord
