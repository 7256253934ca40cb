// The device seam: what the GPU data path needs from a device, behind a
// small interface with two implementations.
//
//   - CUDA (device/cuda/): streams, events and memory of real GPUs, and
//     the pack/unpack kernel.
//   - Host (device/host/host_device.h): "device" memory is host memory, a stream
//     is an ordered work queue run by a thread of its own, and an event is a
//     completion flag. CPU-only tests run the whole GPU path's logic through
//     it (ACCORD_CUDA_HOST_EMULATION=1 routes CUDA tensors to it).
//
// The semantics are CUDA's, so logic tested against one holds for the other:
//   - Work enqueued on one stream runs in order; work on different streams
//     is unordered unless a stream waits for an event.
//   - DeviceEvent::Record captures the work submitted to a stream so far; a
//     later Wait (or Query) refers to the most recent capture when it is
//     called. An event never recorded counts as fired.
//   - Enqueueing never blocks on the queued work; only Synchronize and
//     DeviceApi::FreeDevice wait for it.
//
// Every failure comes back as a Status carrying the library's own error
// string and file:line. Streams and events are move-only RAII objects whose
// destructors never throw. Any thread may call any method, but one stream
// must not be fed by two threads at once (the coordinator owns its
// communication streams; a producer's stream is only recorded on).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "accord/status.h"
#include "accord/tensor.h"
#include "device/copy_plan.h"

namespace accord {

class DeviceApi;
class DeviceStream;

class DeviceEvent {
 public:
  virtual ~DeviceEvent() = default;
  // Captures the work submitted so far to the stream whose native handle is
  // `native_stream` (a cudaStream_t; null is the device's legacy default
  // stream). Used for a producer's stream, which accord does not own.
  virtual Status RecordNative(void* native_stream) = 0;
  Status Record(DeviceStream& stream);
  // True once the captured work has run. Never blocks.
  virtual Result<bool> Query() = 0;
  // Makes the stream with this native handle wait, on the device, for the
  // captured work (the host does not wait).
  virtual Status BlockNative(void* native_stream) = 0;
};

class DeviceStream {
 public:
  virtual ~DeviceStream() = default;
  virtual int ordinal() const = 0;
  // The handle a framework knows the stream by (cudaStream_t).
  virtual void* native() const = 0;
  // Later work on this stream waits for `event`'s captured work.
  virtual Status Wait(DeviceEvent& event) = 0;
  // Copies `bytes` between device memory and host memory, in any direction
  // (page-locked host memory from DeviceApi::AllocateHost keeps it
  // asynchronous). The memory must stay valid until the copy has run.
  virtual Status Copy(void* dst, const void* src, size_t bytes) = 0;
  // Runs every segment of `plan` (device/copy_plan.h) as one kernel launch.
  // The plan is copied: it may be destroyed when Launch returns.
  virtual Status Launch(const CopyPlan& plan) = 0;
  // Device memory in stream order: usable by work enqueued after Allocate
  // returns, and given back once the work enqueued before Free has run.
  virtual Result<void*> Allocate(size_t bytes) = 0;
  virtual void Free(void* data) = 0;
  // Blocks the calling thread until all work enqueued so far has run.
  virtual Status Synchronize() = 0;
};

// Blocks the calling thread until `event` has fired, polling (a short spin,
// then sleeps that grow to 1 ms). Fails with kAborted after
// `timeout_seconds` (0: never), or once `*aborted` is true (null: never); `what` names the wait in those messages ("the
// copy of tensor 'x' to host memory").
Status WaitForEvent(DeviceEvent& event, double timeout_seconds, const std::atomic<bool>* aborted,
                    const std::string& what);

// An Allocator (accord/tensor.h) of device memory from `api`, freed when
// the last reference in `keep_alive` goes (FreeDevice waits for the
// device's queued work first). The default for outputs of CUDA tensors when
// the caller gives no allocator.
Allocator DeviceMemoryAllocator(std::shared_ptr<std::vector<std::shared_ptr<void>>> keep_alive, DeviceApi* api);

// One implementation (CUDA or host) for the whole process.
class DeviceApi {
 public:
  virtual ~DeviceApi() = default;
  // "cuda" or "host emulation".
  virtual const char* name() const = 0;
  // "CUDA runtime 13.0, driver 13.0", for logs and --check-build.
  virtual std::string Version() const = 0;
  virtual int DeviceCount() const = 0;
  // Checks that `ordinal` names a device this process can use.
  Status CheckOrdinal(int ordinal) const;
  // The device the calling thread has selected (cudaGetDevice).
  virtual Result<int> CurrentDevice() const = 0;
  // Names the physical device, the same in every process that sees it
  // (its PCI bus id): two ranks on one host with the same identity share a
  // GPU.
  virtual Result<std::string> DeviceIdentity(int ordinal) const = 0;
  // A stream that does not synchronise with the legacy default stream.
  virtual Result<std::unique_ptr<DeviceStream>> CreateStream(int ordinal) = 0;
  virtual Result<std::unique_ptr<DeviceEvent>> CreateEvent(int ordinal) = 0;
  // Page-locked host memory (the staging buffers of the MPI path).
  virtual Result<void*> AllocateHost(size_t bytes) = 0;
  virtual void FreeHost(void* data) = 0;
  // Device memory outside any stream's order (outputs handed to users).
  // FreeDevice waits for the device's work first, so it may be called
  // while kernels that used the memory are still queued.
  virtual Result<void*> AllocateDevice(int ordinal, size_t bytes) = 0;
  virtual void FreeDevice(int ordinal, void* data) = 0;
};

}  // namespace accord
