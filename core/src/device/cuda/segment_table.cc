#include "device/cuda/segment_table.h"

#include <algorithm>
#include <cstring>
#include <optional>

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
  auto free_table = [this](const DeviceTable& table) {
    if (!table.data) return;
    const Status freed = ACCORD_CUDA_CHECK(cudaFreeAsync(table.data, stream_));
    if (!freed.ok()) {
      ACCORD_LOG(kWarning) << "could not free a device segment table: " << freed;
    }
  };
  for (const DeviceTable& table : kept_) free_table(table);
  free_table(long_);
}

Result<const CopySegment*> SegmentTable::Upload(const CopyPlan& plan) {
  const std::optional<LayoutCache::Slot> kept = layouts_.Find(plan.segments);
  if (kept && kept->hit) return static_cast<const CopySegment*>(kept_[kept->entry].data);
  DeviceTable* table = &long_;
  if (kept) {
    if (kept_.size() <= kept->entry) kept_.resize(kept->entry + 1);
    table = &kept_[kept->entry];
  }
  const Status uploaded = UploadInto(table, plan);
  if (!uploaded.ok()) {
    // The entry may hold part of the list, or another: not this one.
    if (kept) layouts_.Forget(kept->entry);
    return uploaded;
  }
  return static_cast<const CopySegment*>(table->data);
}

Status SegmentTable::UploadInto(DeviceTable* table, const CopyPlan& plan) {
  const size_t count = plan.segments.size();
  ACCORD_RETURN_IF_ERROR(Reserve(table, count));
  ACCORD_ASSIGN_OR_RETURN(Slot * slot, NextSlot(count));
  const size_t bytes = count * sizeof(CopySegment);
  std::memcpy(slot->host.get(), plan.segments.data(), bytes);
  ACCORD_RETURN_IF_ERROR(
      ACCORD_CUDA_CHECK(cudaMemcpyAsync(table->data, slot->host.get(), bytes, cudaMemcpyHostToDevice, stream_)));
  return slot->uploaded.RecordNative(stream_);
}

Status SegmentTable::Reserve(DeviceTable* table, size_t count) {
  if (count <= table->capacity) return Status::OK();
  const size_t capacity = GrownCapacity(table->capacity, count);
  if (table->data) {
    // In stream order: the kernels enqueued before still read the old table.
    ACCORD_RETURN_IF_ERROR(ACCORD_CUDA_CHECK(cudaFreeAsync(table->data, stream_)));
    table->data = nullptr;
    table->capacity = 0;
  }
  void* data = nullptr;
  ACCORD_RETURN_IF_ERROR(ACCORD_CUDA_CHECK(cudaMallocAsync(&data, capacity * sizeof(CopySegment), stream_)));
  table->data = static_cast<CopySegment*>(data);
  table->capacity = capacity;
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
