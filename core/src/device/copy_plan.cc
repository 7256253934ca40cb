#include "device/copy_plan.h"

namespace accord {

void CopyPlan::Add(const void* src, void* dst, int64_t count) {
  if (count <= 0) return;
  const int64_t per_chunk = kCopyChunkBytes / static_cast<int64_t>(ElementBytes(dtype));
  segments.push_back({src, dst, count, num_chunks});
  num_chunks += (count + per_chunk - 1) / per_chunk;
}

CopyLaunch MakeCopyLaunch(const CopyPlan& plan, const CopySegment* segments) {
  CopyLaunch launch;
  launch.segments = segments;
  launch.num_segments = static_cast<int32_t>(plan.segments.size());
  launch.dtype = plan.dtype;
  launch.plain = IsPlainScale(plan.dtype, plan.factor, plan.divisor);
  launch.divisor = plan.divisor;
  launch.factor = plan.factor;
  launch.scale64 = plan.factor / plan.divisor;
  launch.scale32 = DeviceScale32(plan.dtype, launch.scale64);
  return launch;
}

}  // namespace accord
