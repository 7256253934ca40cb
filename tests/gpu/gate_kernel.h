// Gate: holds CUDA streams until the test opens it, the GPU counterpart of
// the Gate of core/src/device/host/host_device_test.cc. Hold() enqueues a
// one-thread kernel that spins on a flag in mapped page-locked memory, so
// the work after it on that stream (and any stream waiting for it) stays
// queued; Open() sets the flag from the host.
//
// A held kernel gives up after `timeout_seconds`, so a test that forgets to
// open, or deadlocks, fails (timed_out()) instead of hanging the GPU. Create
// a gate before holding anything: page-locked allocation may synchronise.
// Open() may be called from any thread; the rest from the test's thread.
#pragma once

#include <cuda_runtime_api.h>

namespace accord_test {

class Gate {
 public:
  explicit Gate(double timeout_seconds = 20.0);
  // Opens the gate and waits for the device, then frees the flag.
  ~Gate();
  Gate(const Gate&) = delete;
  Gate& operator=(const Gate&) = delete;

  // Enqueues a kernel on `stream` that runs until the gate opens.
  void Hold(cudaStream_t stream);
  void Open();
  // Whether a held kernel gave up waiting.
  bool timed_out() const;

 private:
  struct Flags {
    int open;
    int timed_out;
  };
  volatile Flags* host_ = nullptr;
  Flags* device_ = nullptr;
  unsigned long long timeout_ns_;
};

}  // namespace accord_test
