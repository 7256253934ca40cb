// SegmentTable: how the segments of a CopyPlan reach the device, for the
// pack/unpack kernel of one stream.
//
// A kernel's parameters hold a few kilobytes and a plan may have thousands
// of segments, so they travel through device memory. Upload, for one plan:
//   1. takes a page-locked staging slot whose last upload has been read,
//      and writes the segments into it;
//   2. enqueues the copy of the slot into the stream's device table, and
//      records the slot's event after it;
//   3. returns the table, for the kernel enqueued next on the same stream.
// The tables of the last LayoutCache::kEntries lists (of up to
// kMaxSegments) stay on the device (device/layout_cache.h): a plan whose
// segments equal one of them launches on that table, with no upload and no
// host work but the comparison. That is the common case: a fused batch
// packed step after step has the same layout. A new list is uploaded into
// the table of the least recently used one; a longer list into a table
// of its own that every such upload reuses. Stream order runs each upload
// after the kernels before it have read the table it overwrites. Tables
// grow in stream order (cudaFreeAsync, then cudaMallocAsync).
//
// Why staging slots: the plan's own (pageable) memory is gone when Launch
// returns, and cudaMemcpyAsync does not say when it is done reading
// pageable memory; a page-locked slot is read by the copy itself, and its
// event says when. Uploads on one stream fire in order, so only the oldest
// slot needs checking. When it is still in use (the stream is held up, e.g.
// waiting for a producer), a new slot is added rather than the thread
// blocked, since enqueueing must not wait for queued work (device/device.h);
// only past kMaxSlots slots in flight does Upload wait for the oldest.
//
// Owned by a CudaStream and called only by the thread feeding it, with the
// stream's device current. Not copyable or movable.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <vector>

#include "accord/status.h"
#include "device/copy_plan.h"
#include "device/cuda/cuda_device.h"
#include "device/layout_cache.h"

namespace accord {

class SegmentTable {
 public:
  // Uploads made past this many, all still in flight, wait for the oldest.
  static constexpr size_t kMaxSlots = 64;

  // For `stream` (not owned: it must outlive the table) on device `ordinal`.
  SegmentTable(int ordinal, cudaStream_t stream) : ordinal_(ordinal), stream_(stream) {}
  // Waits until every upload has read its slot, then gives the device table
  // back in stream order. Never throws; failures are logged.
  ~SegmentTable();
  SegmentTable(const SegmentTable&) = delete;
  SegmentTable& operator=(const SegmentTable&) = delete;

  // Enqueues the upload of `plan`'s segments unless the device holds them
  // already; the table returned holds them for work enqueued on the stream
  // before the next Upload.
  Result<const CopySegment*> Upload(const CopyPlan& plan);

 private:
  struct FreePinned {
    void operator()(CopySegment* data) const noexcept;
  };
  struct Slot {
    std::unique_ptr<CopySegment[], FreePinned> host;
    size_t capacity;     // segments
    CudaEvent uploaded;  // recorded after the copy that reads `host`
  };

  struct DeviceTable {
    CopySegment* data = nullptr;
    size_t capacity = 0;  // segments
  };

  // Makes `table` hold at least `count` segments.
  Status Reserve(DeviceTable* table, size_t count);
  // Copies `plan`'s segments into `table`, in stream order.
  Status UploadInto(DeviceTable* table, const CopyPlan& plan);
  // A slot free for reuse, holding at least `count` segments.
  Result<Slot*> NextSlot(size_t count);

  int ordinal_;
  cudaStream_t stream_;
  LayoutCache layouts_;
  std::vector<DeviceTable> kept_;  // by LayoutCache entry
  DeviceTable long_;               // for lists too long to keep
  // A ring, oldest upload first from next_.
  std::vector<Slot> slots_;
  size_t next_ = 0;
};

}  // namespace accord
