// FusionBuffer: persistent, 64-byte aligned scratch memory that fused
// collectives pack into. Grows on demand and never shrinks, so steady-state
// training allocates nothing. Coordinator thread only.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <memory>

namespace accord {

class FusionBuffer {
 public:
  // At least `bytes` of memory, valid until the next call.
  void* Get(size_t bytes) {
    if (bytes > capacity_) {
      capacity_ = (bytes + 4095) / 4096 * 4096;
      data_.reset(static_cast<char*>(std::aligned_alloc(64, capacity_)));
    }
    return data_.get();
  }
  size_t capacity() const { return capacity_; }

 private:
  struct Free {
    void operator()(char* p) const { std::free(p); }
  };
  std::unique_ptr<char, Free> data_;
  size_t capacity_ = 0;
};

}  // namespace accord
