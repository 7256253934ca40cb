// CopyPlan: the work of one launch of the batched pack/unpack kernel, and
// the code that does it for one chunk, shared by the CUDA kernel
// (device/cuda/copy_kernel.cu) and its host emulation (device/host/host_device.cc).
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
// saturated; an unscaled copy (IsPlainScale) copies the bytes. The code is
// the same (common/half.h compiles for the GPU too, converting float16 with
// the GPU's converters, which round alike). One difference, Horovod's: the
// factor of a float16 copy is first rounded to float16, as Horovod's GPU
// scale kernel takes it (DeviceScale32), so the GPU path scales float16 as
// Horovod's GPU path does, and the CPU path as Horovod's CPU path does
// (docs/decisions.md).
#pragma once

#include <cstdint>
#include <vector>

#include "accord/tensor.h"
#include "common/dtype_size.h"
#include "common/half.h"
#include "common/nvcc_annotations.h"

namespace accord {

inline constexpr int64_t kCopyChunkBytes = 16384;

struct CopySegment {
  const void* src;  // null: write zeros
  void* dst;
  int64_t count;        // elements
  int64_t first_chunk;  // set by CopyPlan::Add
};

// Whether scaling by factor / divisor (ops/collective_ops.h
// ScaleDivideCopy) leaves every element's bytes as they are: the kernel then
// copies bytes instead of converting elements. Mirrors the CPU path's test.
ACCORD_HOST_DEVICE inline bool IsPlainScale(DataType dtype, double factor, int divisor) {
  switch (dtype) {
    case DataType::kBool: return true;
    case DataType::kFloat16:
    case DataType::kBFloat16:
    case DataType::kFloat32:
    case DataType::kFloat64: return factor / divisor == 1.0;
    default: return divisor == 1 && factor == 1.0;
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
  float scale32;   // DeviceScale32(dtype, factor / divisor): float16, bfloat16, float32
  double scale64;  // factor / divisor: float64
};

CopyLaunch MakeCopyLaunch(const CopyPlan& plan, const CopySegment* segments);

// The float a copy of `dtype` multiplies by, for the scale factor / divisor
// `scale`: the float nearest it, and for float16 the float16 nearest that,
// as Horovod's GPU scale kernel rounds its factor. Where float16 has no
// such value (it would be 0 or inf: |scale| beyond 65504 or under 2^-25),
// the float is kept instead of Horovod's zeros and infinities. bfloat16,
// which Horovod does not scale, keeps the float too (1/3 rounded to
// bfloat16 is 0.2% off).
inline float DeviceScale32(DataType dtype, double scale) {
  const float f = static_cast<float>(scale);
  if (dtype != DataType::kFloat16) return f;
  const float h = HalfToFloat(FloatToHalf(f));
  return (h == 0.0f && f != 0.0f) || h - h != 0.0f ? f : h;
}

// The kernel's code paths, one per kind of element work. The CUDA kernel is
// compiled once for each, so that each path gets the registers it needs: a
// kernel's occupancy is set by its hungriest path, and the scaled integer
// and float16 paths need several times the registers of a plain copy.
enum class CopyPath : int { kBytes, kFloat16, kBFloat16, kFloat32, kFloat64, kInteger };
inline constexpr int kNumCopyPaths = 6;

// The path of a launch: bytes for an unscaled copy, else its dtype's.
ACCORD_HOST_DEVICE inline CopyPath PathOf(const CopyLaunch& l) {
  if (l.plain) return CopyPath::kBytes;
  switch (l.dtype) {
    case DataType::kFloat16: return CopyPath::kFloat16;
    case DataType::kBFloat16: return CopyPath::kBFloat16;
    case DataType::kFloat32: return CopyPath::kFloat32;
    case DataType::kFloat64: return CopyPath::kFloat64;
    case DataType::kBool: return CopyPath::kBytes;  // always plain
    default: return CopyPath::kInteger;
  }
}

namespace copy_internal {

// 16 bytes moved as one access where both ends are aligned.
struct alignas(16) Word16 {
  uint64_t lo, hi;
};

// How many words a lane loads before it stores any. A store may alias a
// later load as far as the compiler knows, so a lane that stored after each
// load would wait for every load in turn; loading a group first keeps that
// many in flight, which a copy bound by memory bandwidth needs.
inline constexpr int kWordsInFlight = 4;

// dst[i] = f(src[i]) for the i in [0, n) of lane `lane` of `lanes`: words
// lane, lane + lanes, ... so that neighbouring lanes touch neighbouring
// words (one coalesced access per warp on the GPU).
template <typename Word, typename F>
ACCORD_HOST_DEVICE inline void MapWords(const Word* src, Word* dst, int64_t n, int lane, int lanes, const F& f) {
  const int64_t stride = static_cast<int64_t>(lanes) * kWordsInFlight;
  for (int64_t base = lane; base < n; base += stride) {
    Word w[kWordsInFlight];
    ACCORD_UNROLL
    for (int u = 0; u < kWordsInFlight; ++u) {
      const int64_t i = base + static_cast<int64_t>(u) * lanes;
      if (i < n) w[u] = src[i];
    }
    ACCORD_UNROLL
    for (int u = 0; u < kWordsInFlight; ++u) {
      const int64_t i = base + static_cast<int64_t>(u) * lanes;
      if (i < n) dst[i] = f(w[u]);
    }
  }
}

struct Identity {
  template <typename Word>
  ACCORD_HOST_DEVICE Word operator()(const Word& w) const {
    return w;
  }
};

// Applies an element function to each element packed in a Word.
template <typename Word, typename T, typename F>
struct OnEachElement {
  F f;
  ACCORD_HOST_DEVICE Word operator()(const Word& w) const {
    constexpr int kPerWord = static_cast<int>(sizeof(Word) / sizeof(T));
    T e[kPerWord];
    __builtin_memcpy(e, &w, sizeof(w));
    ACCORD_UNROLL
    for (int k = 0; k < kPerWord; ++k) e[k] = f(e[k]);
    Word out;
    __builtin_memcpy(&out, e, sizeof(out));
    return out;
  }
};

// dst[i] = f(src[i]) for i in [0, n), lane `lane` of `lanes` doing its
// share: accesses of a Word (16 bytes unless given) where source and
// destination are aligned alike to its size (the unaligned head and tail
// element by element), else element by element. f sees each element once
// whichever way, so the results are the same.
template <typename Word = Word16, typename T, typename F>
ACCORD_HOST_DEVICE inline void MapElements(const T* src, T* dst, int64_t n, int lane, int lanes, const F& f) {
  constexpr uintptr_t kWordBytes = sizeof(Word);
  constexpr int64_t kPerWord = static_cast<int64_t>(kWordBytes / sizeof(T));
  const uintptr_t s = reinterpret_cast<uintptr_t>(src);
  const uintptr_t d = reinterpret_cast<uintptr_t>(dst);
  if (((s ^ d) & (kWordBytes - 1)) != 0 || s % sizeof(T) != 0) {
    MapWords(src, dst, n, lane, lanes, f);
    return;
  }
  int64_t head = static_cast<int64_t>(((kWordBytes - (s & (kWordBytes - 1))) & (kWordBytes - 1)) / sizeof(T));
  if (head > n) head = n;
  for (int64_t i = lane; i < head; i += lanes) dst[i] = f(src[i]);
  const int64_t words = (n - head) / kPerWord;
  MapWords(reinterpret_cast<const Word*>(src + head), reinterpret_cast<Word*>(dst + head), words, lane, lanes,
           OnEachElement<Word, T, F>{f});
  for (int64_t i = head + words * kPerWord + lane; i < n; i += lanes) dst[i] = f(src[i]);
}

// Copies n bytes; lane `lane` of `lanes` does its share. 16-byte accesses
// when source and destination are aligned alike, else 4-byte where they are
// aligned alike to 4, else bytes.
ACCORD_HOST_DEVICE inline void CopyBytes(const char* src, char* dst, int64_t n, int lane, int lanes) {
  const uintptr_t s = reinterpret_cast<uintptr_t>(src);
  const uintptr_t d = reinterpret_cast<uintptr_t>(dst);
  if (((s ^ d) & 15) == 0) return MapElements<Word16>(src, dst, n, lane, lanes, Identity{});
  MapElements<uint32_t>(src, dst, n, lane, lanes, Identity{});
}

// Zeroes n bytes, 16 at a time from the first aligned byte.
ACCORD_HOST_DEVICE inline void ZeroBytes(char* dst, int64_t n, int lane, int lanes) {
  const uintptr_t d = reinterpret_cast<uintptr_t>(dst);
  int64_t head = static_cast<int64_t>((16 - (d & 15)) & 15);
  if (head > n) head = n;
  for (int64_t i = lane; i < head; i += lanes) dst[i] = 0;
  const int64_t words = (n - head) / 16;
  Word16* wd = reinterpret_cast<Word16*>(dst + head);
  for (int64_t i = lane; i < words; i += lanes) wd[i] = Word16{0, 0};
  for (int64_t i = head + words * 16 + lane; i < n; i += lanes) dst[i] = 0;
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

// The element functions of ScaleElements, one per kind of dtype.
struct ScaleHalf {
  float scale;
  ACCORD_HOST_DEVICE uint16_t operator()(uint16_t v) const { return FloatToHalf(HalfToFloat(v) * scale); }
};

struct ScaleBFloat16 {
  float scale;
  ACCORD_HOST_DEVICE uint16_t operator()(uint16_t v) const { return FloatToBFloat16(BFloat16ToFloat(v) * scale); }
};

template <typename T, typename Scale>
struct ScaleFloating {
  Scale scale;
  ACCORD_HOST_DEVICE T operator()(T v) const { return v * scale; }
};

template <typename T>
struct ScaleInteger {
  double factor;
  int32_t divisor;
  double lowest, max;
  ACCORD_HOST_DEVICE T operator()(T v) const {
    return TruncateSaturate<T>(static_cast<double>(v) * factor / divisor, lowest, max);
  }
};

template <typename T>
ACCORD_HOST_DEVICE inline void ScaleIntegers(const T* src, T* dst, int64_t n, const CopyLaunch& l, double lowest,
                                             double max, int lane, int lanes) {
  MapElements(src, dst, n, lane, lanes, ScaleInteger<T>{l.factor, l.divisor, lowest, max});
}

// Elements [begin, end) of one segment, converted by path P's arithmetic
// (the launch's dtype must be P's).
template <CopyPath P>
ACCORD_HOST_DEVICE inline void ScaleElements(const CopyLaunch& l, const void* src, void* dst, int64_t begin,
                                             int64_t end, int lane, int lanes) {
  const int64_t n = end - begin;
  if constexpr (P == CopyPath::kFloat16) {
    MapElements(static_cast<const uint16_t*>(src) + begin, static_cast<uint16_t*>(dst) + begin, n, lane, lanes,
                ScaleHalf{l.scale32});
  } else if constexpr (P == CopyPath::kBFloat16) {
    MapElements(static_cast<const uint16_t*>(src) + begin, static_cast<uint16_t*>(dst) + begin, n, lane, lanes,
                ScaleBFloat16{l.scale32});
  } else if constexpr (P == CopyPath::kFloat32) {
    MapElements(static_cast<const float*>(src) + begin, static_cast<float*>(dst) + begin, n, lane, lanes,
                ScaleFloating<float, float>{l.scale32});
  } else if constexpr (P == CopyPath::kFloat64) {
    MapElements(static_cast<const double*>(src) + begin, static_cast<double*>(dst) + begin, n, lane, lanes,
                ScaleFloating<double, double>{l.scale64});
  } else if constexpr (P == CopyPath::kInteger) {
    switch (l.dtype) {
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
      default: return;  // not an integer: PathOf never gives this path
    }
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

// Runs chunk `chunk` of a launch whose path (PathOf) is P; lane `lane` of
// `lanes` does its share (the CUDA kernel: a block per chunk, a lane per
// thread; the host: one lane). A segment without a source is zeroed on
// every path.
template <CopyPath P>
ACCORD_HOST_DEVICE inline void RunCopyChunkOn(const CopyLaunch& l, int64_t chunk, int lane, int lanes) {
  const CopySegment& seg = l.segments[SegmentOfChunk(l.segments, l.num_segments, chunk)];
  const int64_t element = static_cast<int64_t>(ElementBytes(l.dtype));
  const int64_t per_chunk = kCopyChunkBytes / element;
  const int64_t begin = (chunk - seg.first_chunk) * per_chunk;
  const int64_t end = begin + per_chunk < seg.count ? begin + per_chunk : seg.count;
  char* dst = static_cast<char*>(seg.dst);
  if (!seg.src) {
    copy_internal::ZeroBytes(dst + begin * element, (end - begin) * element, lane, lanes);
    return;
  }
  if constexpr (P == CopyPath::kBytes) {
    copy_internal::CopyBytes(static_cast<const char*>(seg.src) + begin * element, dst + begin * element,
                             (end - begin) * element, lane, lanes);
  } else {
    copy_internal::ScaleElements<P>(l, seg.src, seg.dst, begin, end, lane, lanes);
  }
}

// RunCopyChunkOn for the launch's own path.
ACCORD_HOST_DEVICE inline void RunCopyChunk(const CopyLaunch& l, int64_t chunk, int lane, int lanes) {
  switch (PathOf(l)) {
    case CopyPath::kBytes: return RunCopyChunkOn<CopyPath::kBytes>(l, chunk, lane, lanes);
    case CopyPath::kFloat16: return RunCopyChunkOn<CopyPath::kFloat16>(l, chunk, lane, lanes);
    case CopyPath::kBFloat16: return RunCopyChunkOn<CopyPath::kBFloat16>(l, chunk, lane, lanes);
    case CopyPath::kFloat32: return RunCopyChunkOn<CopyPath::kFloat32>(l, chunk, lane, lanes);
    case CopyPath::kFloat64: return RunCopyChunkOn<CopyPath::kFloat64>(l, chunk, lane, lanes);
    case CopyPath::kInteger: return RunCopyChunkOn<CopyPath::kInteger>(l, chunk, lane, lanes);
  }
}

}  // namespace accord
