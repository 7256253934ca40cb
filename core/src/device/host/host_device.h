// The host implementation of the device seam (device/device.h): the GPU
// path's logic without a GPU.
//
// "Device" memory is host memory. A HostStream is an ordered work queue run
// by a thread of its own, so work really runs later than it is enqueued, in
// order, and unordered with other streams, as on a GPU. A HostEvent counts
// records and firings: Record enqueues a task that marks the capture fired;
// a stream's Wait enqueues a task that blocks that stream's thread until the
// capture it refers to has fired. Launch runs RunCopyChunk (copy_plan.h),
// the CUDA kernel's own code, over every chunk.
//
// Used by unit tests directly, and by the runtime for CUDA tensors when
// ACCORD_CUDA_HOST_EMULATION=1 (CPU-only CI runs every multi-rank GPU-path
// test that way). Tests may enqueue their own work (HostStream::Enqueue),
// e.g. a producer that writes a tensor late. Thread-safe like device.h says.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <thread>

#include "device/device.h"

namespace accord {

class HostDeviceApi;

class HostStream : public DeviceStream {
 public:
  HostStream(HostDeviceApi* api, int ordinal);
  // Runs the work still queued, except that waits for events that have not
  // fired give up (a stream destroyed mid-wait must not hang its owner).
  ~HostStream() override;
  HostStream(const HostStream&) = delete;
  HostStream& operator=(const HostStream&) = delete;

  int ordinal() const override { return ordinal_; }
  void* native() const override { return const_cast<HostStream*>(this); }
  Status Wait(DeviceEvent& event) override;
  Status Copy(void* dst, const void* src, size_t bytes) override;
  Status Launch(const CopyPlan& plan) override;
  Result<void*> Allocate(size_t bytes) override;
  void Free(void* data) override;
  Status Synchronize() override;

  // Appends `task` to the stream's work: it runs after everything enqueued
  // before it, on the stream's thread.
  void Enqueue(std::function<void()> task);
  // Whether the stream is being destroyed: tasks that block should return.
  bool closing() const;

 private:
  void Run();

  HostDeviceApi* api_;
  int ordinal_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  bool busy_ = false;  // a task is running
  bool closing_ = false;
  std::thread thread_;
};

class HostEvent : public DeviceEvent {
 public:
  explicit HostEvent(HostDeviceApi* api);
  Status RecordNative(void* native_stream) override;
  Result<bool> Query() override;
  Status BlockNative(void* native_stream) override;

 private:
  // Shared with the tasks that fire it and wait for it, which may outlive
  // the event.
  struct State {
    std::mutex mutex;
    std::condition_variable cv;
    uint64_t recorded = 0;  // captures made
    uint64_t fired = 0;     // the latest capture that has run
  };
  HostDeviceApi* api_;
  std::shared_ptr<State> state_;
};

class HostDeviceApi : public DeviceApi {
 public:
  // `device_count` emulated devices; each process's devices are its own.
  explicit HostDeviceApi(int device_count = 2);
  ~HostDeviceApi() override;

  const char* name() const override { return "host emulation"; }
  std::string Version() const override { return "host emulation (no GPU)"; }
  int DeviceCount() const override { return device_count_; }
  Result<int> CurrentDevice() const override { return 0; }
  // "<host>/<pid>/<ordinal>": no two processes share an emulated device.
  Result<std::string> DeviceIdentity(int ordinal) const override;
  Result<std::unique_ptr<DeviceStream>> CreateStream(int ordinal) override;
  Result<std::unique_ptr<DeviceEvent>> CreateEvent(int ordinal) override;
  Result<void*> AllocateHost(size_t bytes) override;
  void FreeHost(void* data) override;
  Result<void*> AllocateDevice(int ordinal, size_t bytes) override;
  // Waits for every stream's queued work first, as cudaFree does.
  void FreeDevice(int ordinal, void* data) override;

  // The stream a null native handle means (the legacy default stream).
  HostStream& DefaultStream();
  // The stream behind a native handle: one of this API's streams, or (null)
  // the default stream; kInvalidArgument for anything else.
  Result<HostStream*> StreamOf(void* native_stream);

 private:
  friend class HostStream;
  void Register(HostStream* stream);
  void Unregister(HostStream* stream);

  int device_count_;
  std::mutex mutex_;
  std::set<HostStream*> streams_;
  std::unique_ptr<HostStream> default_stream_;
};

}  // namespace accord
