#include "device/cuda/segment_table.h"

#include <algorithm>
#include <cstring>

#include "common/logging.h"
#include "device/cuda/cuda_check.h"

namespace accord {
namespace {

// The fewest segments a table or slot is made for (2 KiB): most plans fit,
// so growth is rare.
constexpr size_t kMinSegments = 64;

size_t GrownCapacity(size_t current, size_t needed) { return std::max({needed, 2 * current, kMinSegments}); }

}  // namespace

void SegmentTable::FreePinned::operator()(CopySegment* data) const noexcept {
  const Status freed = ACCORD_CUDA_CHECK(cudaFreeHost(data));
  if (!freed.ok()) {
    ACCORD_LOG(kWarning) << "could not free a staging slot of the pack/unpack kernel: " << freed;
  }
}

SegmentTable::~SegmentTable() {
  for (Slot& slot : slots_) {
    const Status read = slot.uploaded.Synchronize();
    if (!read.ok()) {
      ACCORD_LOG(kWarning) << "waiting for the last segment upload failed: " << read;
    }
  }
  if (device_table_) {
    const Status freed = ACCORD_CUDA_CHECK(cudaFreeAsync(device_table_, stream_));
    if (!freed.ok()) {
      ACCORD_LOG(kWarning) << "could not free the device segment table: " << freed;
    }
  }
}

Result<const CopySegment*> SegmentTable::Upload(const CopyPlan& plan) {
  const size_t count = plan.segments.size();
  ACCORD_RETURN_IF_ERROR(ReserveDeviceTable(count));
  ACCORD_ASSIGN_OR_RETURN(Slot * slot, NextSlot(count));
  const size_t bytes = count * sizeof(CopySegment);
  std::memcpy(slot->host.get(), plan.segments.data(), bytes);
  ACCORD_RETURN_IF_ERROR(
      ACCORD_CUDA_CHECK(cudaMemcpyAsync(device_table_, slot->host.get(), bytes, cudaMemcpyHostToDevice, stream_)));
  ACCORD_RETURN_IF_ERROR(slot->uploaded.RecordNative(stream_));
  return static_cast<const CopySegment*>(device_table_);
}

Status SegmentTable::ReserveDeviceTable(size_t count) {
  if (count <= device_capacity_) return Status::OK();
  const size_t capacity = GrownCapacity(device_capacity_, count);
  if (device_table_) {
    // In stream order: the kernels enqueued before still read the old table.
    ACCORD_RETURN_IF_ERROR(ACCORD_CUDA_CHECK(cudaFreeAsync(device_table_, stream_)));
    device_table_ = nullptr;
    device_capacity_ = 0;
  }
  void* table = nullptr;
  ACCORD_RETURN_IF_ERROR(ACCORD_CUDA_CHECK(cudaMallocAsync(&table, capacity * sizeof(CopySegment), stream_)));
  device_table_ = static_cast<CopySegment*>(table);
  device_capacity_ = capacity;
  return Status::OK();
}

Result<SegmentTable::Slot*> SegmentTable::NextSlot(size_t count) {
  bool reusable = false;
  if (!slots_.empty()) {
    ACCORD_ASSIGN_OR_RETURN(reusable, slots_[next_].uploaded.Query());
  }
  if (!reusable) {
    if (slots_.size() < kMaxSlots) {
      // The new slot goes just before the oldest: the ring stays in upload
      // order.
      ACCORD_ASSIGN_OR_RETURN(CudaEvent event, CudaEvent::Create(ordinal_));
      slots_.insert(slots_.begin() + static_cast<std::ptrdiff_t>(next_), Slot{nullptr, 0, std::move(event)});
    } else {
      ACCORD_RETURN_IF_ERROR(slots_[next_].uploaded.Synchronize());
    }
  }
  Slot& slot = slots_[next_];
  next_ = (next_ + 1) % slots_.size();
  if (slot.capacity < count) {
    // The slot's last upload has been read: its memory may go.
    const size_t capacity = GrownCapacity(slot.capacity, count);
    slot.host.reset();
    slot.capacity = 0;
    void* host = nullptr;
    ACCORD_RETURN_IF_ERROR(
        ACCORD_CUDA_CHECK(cudaHostAlloc(&host, capacity * sizeof(CopySegment), cudaHostAllocDefault)));
    slot.host.reset(static_cast<CopySegment*>(host));
    slot.capacity = capacity;
  }
  return &slot;
}

}  // namespace accord
