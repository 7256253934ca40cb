// CopyPlan: the work of one launch of the batched pack/unpack kernel, and
// the code that does it for one chunk, shared by the CUDA kernel
// (backends/cuda/copy_kernel.cu) and its host emulation (host_device.cc).
//
// The GPU path packs the tensors of a fused response into the device fusion
// buffer with the prescale factor applied, and unpacks the results with the
// postscale factor and an Average's division applied. Each is one CopyPlan:
// a list of segments (source, destination, element count; a null source
// writes zeros, the part of a rank that has joined) that one kernel launch
// runs, however many tensors there are.
//
// The work is cut into chunks of kCopyChunkBytes. Segment s owns the chunks
// [first_chunk, first_chunk + its chunk count); a CUDA block runs one chunk
// and finds its segment by binary search, so long and short segments share
// one launch without a per-tensor launch or copy.
//
// Arithmetic is that of the CPU path (common/dtype_kernels.h,
// ops/collective_ops.h ScaleDivideCopy), element for element: float16 and
// bfloat16 are scaled in float and rounded to nearest-even, float32 in
// float, float64 in double, integers in double rounded toward zero and
// saturated; an unscaled copy (IsPlainScale) copies the bytes. Since the
// code is the same (common/half.h compiles for the GPU too), the GPU path's
// results are bit-identical to the CPU path's.
#pragma once

#include <cstdint>
#include <vector>

#include "accord/tensor.h"
#include "common/dtype_size.h"
#include "common/half.h"
#include "common/host_device.h"

namespace accord {

inline constexpr int64_t kCopyChunkBytes = 16384;

struct CopySegment {
  const void* src;      // null: write zeros
  void* dst;
  int64_t count;        // elements
  int64_t first_chunk;  // set by CopyPlan::Add
};

// Whether scaling by factor / divisor (ops/collective_ops.h
// ScaleDivideCopy) leaves every element's bytes as they are: the kernel then
// copies bytes instead of converting elements. Mirrors the CPU path's test.
ACCORD_HOST_DEVICE inline bool IsPlainScale(DataType dtype, double factor, int divisor) {
  switch (dtype) {
    case DataType::kBool:
      return true;
    case DataType::kFloat16:
    case DataType::kBFloat16:
    case DataType::kFloat32:
    case DataType::kFloat64:
      return factor / divisor == 1.0;
    default:
      return divisor == 1 && factor == 1.0;
  }
}

struct CopyPlan {
  DataType dtype = DataType::kFloat32;
  double factor = 1.0;  // every element is multiplied by factor / divisor
  int divisor = 1;
  std::vector<CopySegment> segments;
  int64_t num_chunks = 0;

  // Appends a segment of `count` elements (none: nothing is added).
  void Add(const void* src, void* dst, int64_t count);
  bool empty() const { return num_chunks == 0; }
};

// What one launch reads: the plan with its segments wherever the kernel can
// see them (device memory for CUDA), and the scale precomputed.
struct CopyLaunch {
  const CopySegment* segments;
  int32_t num_segments;
  DataType dtype;
  bool plain;
  int32_t divisor;
  double factor;
  float scale32;   // (float)(factor / divisor): float16, bfloat16, float32
  double scale64;  // factor / divisor: float64
};

CopyLaunch MakeCopyLaunch(const CopyPlan& plan, const CopySegment* segments);

namespace copy_internal {

// 16 bytes moved as one access where both ends are aligned.
struct alignas(16) Word16 {
  uint64_t lo, hi;
};

// Copies n bytes; lane `lane` of `lanes` does its share. 16-byte accesses
// when source and destination are aligned alike, else 4-byte, else bytes.
ACCORD_HOST_DEVICE inline void CopyBytes(const char* src, char* dst, int64_t n, int lane, int lanes) {
  const uintptr_t s = reinterpret_cast<uintptr_t>(src);
  const uintptr_t d = reinterpret_cast<uintptr_t>(dst);
  int64_t width = ((s ^ d) & 15) == 0 ? 16 : ((s ^ d) & 3) == 0 ? 4 : 1;
  int64_t head = static_cast<int64_t>((width - (s & (width - 1))) & (width - 1));
  if (head > n) head = n;
  for (int64_t i = lane; i < head; i += lanes) dst[i] = src[i];
  const int64_t words = (n - head) / width;
  if (width == 16) {
    const Word16* ws = reinterpret_cast<const Word16*>(src + head);
    Word16* wd = reinterpret_cast<Word16*>(dst + head);
    for (int64_t i = lane; i < words; i += lanes) wd[i] = ws[i];
  } else if (width == 4) {
    const uint32_t* ws = reinterpret_cast<const uint32_t*>(src + head);
    uint32_t* wd = reinterpret_cast<uint32_t*>(dst + head);
    for (int64_t i = lane; i < words; i += lanes) wd[i] = ws[i];
  } else {
    for (int64_t i = lane; i < words; i += lanes) dst[head + i] = src[head + i];
  }
  for (int64_t i = head + words * width + lane; i < n; i += lanes) dst[i] = src[i];
}

ACCORD_HOST_DEVICE inline void ZeroBytes(char* dst, int64_t n, int lane, int lanes) {
  for (int64_t i = lane; i < n; i += lanes) dst[i] = 0;
}

// v rounded toward zero into T, saturated at T's limits; NaN becomes 0
// (common/dtype_kernels.cc TruncateSaturate).
template <typename T>
ACCORD_HOST_DEVICE inline T TruncateSaturate(double v, double lowest, double max) {
  v = (v == v) ? v : 0.0;
  v = v < lowest ? lowest : v;
  if (sizeof(T) < 8) {
    v = v > max ? max : v;
    return static_cast<T>(v);
  }
  // int64's maximum is not a double; 2^63 is the first value out of range.
  return v >= 9223372036854775808.0 ? static_cast<T>(0x7FFFFFFFFFFFFFFFLL) : static_cast<T>(v);
}

template <typename T>
ACCORD_HOST_DEVICE inline void ScaleIntegers(const T* src, T* dst, int64_t n, const CopyLaunch& l, double lowest,
                                             double max, int lane, int lanes) {
  for (int64_t i = lane; i < n; i += lanes) {
    dst[i] = TruncateSaturate<T>(static_cast<double>(src[i]) * l.factor / l.divisor, lowest, max);
  }
}

// Elements [begin, end) of one segment, converted.
ACCORD_HOST_DEVICE inline void ScaleElements(const CopyLaunch& l, const void* src, void* dst, int64_t begin,
                                             int64_t end, int lane, int lanes) {
  const int64_t n = end - begin;
  switch (l.dtype) {
    case DataType::kFloat16: {
      const uint16_t* s = static_cast<const uint16_t*>(src) + begin;
      uint16_t* d = static_cast<uint16_t*>(dst) + begin;
      for (int64_t i = lane; i < n; i += lanes) d[i] = FloatToHalf(HalfToFloat(s[i]) * l.scale32);
      return;
    }
    case DataType::kBFloat16: {
      const uint16_t* s = static_cast<const uint16_t*>(src) + begin;
      uint16_t* d = static_cast<uint16_t*>(dst) + begin;
      for (int64_t i = lane; i < n; i += lanes) d[i] = FloatToBFloat16(BFloat16ToFloat(s[i]) * l.scale32);
      return;
    }
    case DataType::kFloat32: {
      const float* s = static_cast<const float*>(src) + begin;
      float* d = static_cast<float*>(dst) + begin;
      for (int64_t i = lane; i < n; i += lanes) d[i] = s[i] * l.scale32;
      return;
    }
    case DataType::kFloat64: {
      const double* s = static_cast<const double*>(src) + begin;
      double* d = static_cast<double*>(dst) + begin;
      for (int64_t i = lane; i < n; i += lanes) d[i] = s[i] * l.scale64;
      return;
    }
    case DataType::kUInt8:
      return ScaleIntegers(static_cast<const uint8_t*>(src) + begin, static_cast<uint8_t*>(dst) + begin, n, l, 0.0,
                           255.0, lane, lanes);
    case DataType::kInt8:
      return ScaleIntegers(static_cast<const int8_t*>(src) + begin, static_cast<int8_t*>(dst) + begin, n, l, -128.0,
                           127.0, lane, lanes);
    case DataType::kInt16:
      return ScaleIntegers(static_cast<const int16_t*>(src) + begin, static_cast<int16_t*>(dst) + begin, n, l,
                           -32768.0, 32767.0, lane, lanes);
    case DataType::kInt32:
      return ScaleIntegers(static_cast<const int32_t*>(src) + begin, static_cast<int32_t*>(dst) + begin, n, l,
                           -2147483648.0, 2147483647.0, lane, lanes);
    case DataType::kInt64:
      return ScaleIntegers(static_cast<const int64_t*>(src) + begin, static_cast<int64_t*>(dst) + begin, n, l,
                           -9223372036854775808.0, 9223372036854775807.0, lane, lanes);
    case DataType::kBool:
      return;  // always plain
  }
}

}  // namespace copy_internal

// The segment that owns `chunk`: the last one whose first_chunk <= chunk.
ACCORD_HOST_DEVICE inline int32_t SegmentOfChunk(const CopySegment* segments, int32_t count, int64_t chunk) {
  int32_t lo = 0, hi = count - 1;
  while (lo < hi) {
    const int32_t mid = lo + (hi - lo + 1) / 2;
    if (segments[mid].first_chunk <= chunk) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

// Runs chunk `chunk` of the launch; lane `lane` of `lanes` does its share
// (the CUDA kernel: a block per chunk, a lane per thread; the host: one lane).
ACCORD_HOST_DEVICE inline void RunCopyChunk(const CopyLaunch& l, int64_t chunk, int lane, int lanes) {
  const CopySegment& seg = l.segments[SegmentOfChunk(l.segments, l.num_segments, chunk)];
  const int64_t element = static_cast<int64_t>(ElementBytes(l.dtype));
  const int64_t per_chunk = kCopyChunkBytes / element;
  const int64_t begin = (chunk - seg.first_chunk) * per_chunk;
  const int64_t end = begin + per_chunk < seg.count ? begin + per_chunk : seg.count;
  char* dst = static_cast<char*>(seg.dst);
  if (!seg.src) {
    copy_internal::ZeroBytes(dst + begin * element, (end - begin) * element, lane, lanes);
  } else if (l.plain) {
    copy_internal::CopyBytes(static_cast<const char*>(seg.src) + begin * element, dst + begin * element,
                             (end - begin) * element, lane, lanes);
  } else {
    copy_internal::ScaleElements(l, seg.src, seg.dst, begin, end, lane, lanes);
  }
}

}  // namespace accord
