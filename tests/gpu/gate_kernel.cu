#include "gate_kernel.h"

#include <cstdio>
#include <cstdlib>

namespace accord_test {
namespace {

// Aborts the test program: a gate that cannot be made or held leaves the
// test meaningless.
void Check(cudaError_t rc, const char* what) {
  if (rc == cudaSuccess) return;
  std::fprintf(stderr, "%s failed: %s\n", what, cudaGetErrorString(rc));
  std::abort();
}

__device__ unsigned long long NowNs() {
  unsigned long long now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  return now;
}

__global__ void HoldKernel(volatile int* open, int* timed_out, unsigned long long timeout_ns) {
  const unsigned long long start = NowNs();
  while (*open == 0) {
    if (NowNs() - start > timeout_ns) {
      *timed_out = 1;
      __threadfence_system();
      return;
    }
    __nanosleep(10000);
  }
}

}  // namespace

Gate::Gate(double timeout_seconds) : timeout_ns_(static_cast<unsigned long long>(timeout_seconds * 1e9)) {
  void* host = nullptr;
  Check(cudaHostAlloc(&host, sizeof(Flags), cudaHostAllocMapped | cudaHostAllocPortable), "cudaHostAlloc");
  host_ = static_cast<volatile Flags*>(host);
  host_->open = 0;
  host_->timed_out = 0;
  void* device = nullptr;
  Check(cudaHostGetDevicePointer(&device, host, 0), "cudaHostGetDevicePointer");
  device_ = static_cast<Flags*>(device);
}

Gate::~Gate() {
  Open();
  // Reported, not aborted on: the test has its verdict already.
  const cudaError_t synced = cudaDeviceSynchronize();
  if (synced != cudaSuccess) std::fprintf(stderr, "cudaDeviceSynchronize failed: %s\n", cudaGetErrorString(synced));
  const cudaError_t freed = cudaFreeHost(const_cast<Flags*>(host_));
  if (freed != cudaSuccess) std::fprintf(stderr, "cudaFreeHost failed: %s\n", cudaGetErrorString(freed));
}

void Gate::Hold(cudaStream_t stream) {
  HoldKernel<<<1, 1, 0, stream>>>(&device_->open, &device_->timed_out, timeout_ns_);
  Check(cudaGetLastError(), "launching the gate kernel");
}

void Gate::Open() { host_->open = 1; }

bool Gate::timed_out() const { return host_->timed_out != 0; }

}  // namespace accord_test
