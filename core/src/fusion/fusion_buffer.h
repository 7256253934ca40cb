// FusionBuffer: persistent scratch memory that fused collectives pack into.
// Grows on demand and never shrinks, so steady-state training allocates
// nothing. Coordinator thread only.
//
// The memory is mapped in whole 2 MiB units, aligned to 2 MiB, and offered
// to the kernel for transparent huge pages (madvise; a no-op where THP is
// off). MPI's shared-memory transport pins the peer's buffer page by page
// for its single-copy path, and packing touches every page: with 2 MiB pages
// a 4 MiB fused allreduce pins 2 pages instead of 1,024, and on the machines
// of docs/benchmarks.md it runs in half the time.
#pragma once

#include <cstddef>

namespace accord {

class FusionBuffer {
 public:
  static constexpr size_t kUnit = size_t{2} << 20;

  FusionBuffer() = default;
  FusionBuffer(const FusionBuffer&) = delete;
  FusionBuffer& operator=(const FusionBuffer&) = delete;
  ~FusionBuffer() { Release(); }

  // At least `bytes` of memory (aligned to kUnit), valid until the next
  // call. Null if the memory cannot be mapped.
  void* Get(size_t bytes);
  size_t capacity() const { return capacity_; }
  // Whether the kernel accepted the huge-page advice for the current memory.
  bool huge_pages_advised() const { return advised_; }

 private:
  void Release();

  char* data_ = nullptr;
  size_t capacity_ = 0;
  bool advised_ = false;
};

}  // namespace accord
