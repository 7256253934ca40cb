#include "fusion/device_fusion_buffer.h"

#include <algorithm>

namespace accord {

namespace {

// Sizes are rounded up to 2 MiB, so small growth steps reuse the memory.
constexpr size_t kUnit = size_t{2} << 20;

}  // namespace

DeviceFusionBuffer::~DeviceFusionBuffer() {
  if (data_) stream_->Free(data_);
}

Result<char*> DeviceFusionBuffer::Get(size_t bytes) {
  if (bytes <= capacity_) return data_;
  const size_t grown = (std::max(bytes, capacity_ + capacity_ / 2) + kUnit - 1) / kUnit * kUnit;
  ACCORD_ASSIGN_OR_RETURN(void* fresh, stream_->Allocate(grown));
  if (data_) stream_->Free(data_);
  data_ = static_cast<char*>(fresh);
  capacity_ = grown;
  return data_;
}

}  // namespace accord
