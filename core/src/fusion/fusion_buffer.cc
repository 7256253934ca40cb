#include "fusion/fusion_buffer.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>

namespace accord {

void* FusionBuffer::Get(size_t bytes) {
  if (bytes <= capacity_ && data_) return data_;
  Release();
  // At least one unit: a batch of empty tensors (0 bytes) still gets mapped memory.
  const size_t size = std::max<size_t>(1, (bytes + kUnit - 1) / kUnit) * kUnit;
  // Map one unit more than needed and trim both ends, so that the memory
  // starts on a 2 MiB boundary (huge pages need it).
  const size_t mapped = size + kUnit;
  void* raw = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const uintptr_t start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (start + kUnit - 1) / kUnit * kUnit;
  if (aligned > start) munmap(raw, aligned - start);
  const uintptr_t end = start + mapped;
  if (end > aligned + size) munmap(reinterpret_cast<void*>(aligned + size), end - (aligned + size));
  data_ = reinterpret_cast<char*>(aligned);
  capacity_ = size;
#ifdef MADV_HUGEPAGE
  advised_ = madvise(data_, capacity_, MADV_HUGEPAGE) == 0;
#endif
  return data_;
}

void FusionBuffer::Release() {
  if (data_) munmap(data_, capacity_);
  data_ = nullptr;
  capacity_ = 0;
  advised_ = false;
}

}  // namespace accord
