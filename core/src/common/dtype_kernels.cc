// Element-wise kernels over every DataType; see dtype_kernels.h.
//
// Structure: a switch on dtype (and op) picks a template instantiation once
// per call; the loops themselves contain no switch, so the compiler can
// vectorise them. Loops are written twice, for distinct buffers (restrict
// pointers) and for in-place use, so that neither needs a runtime alias check.
//
// float16 has a second implementation for x86 CPUs with AVX and F16C (most
// made since 2012), chosen at run time: the build does not assume the
// instruction set, and the portable conversions in half.h are ~20-40x slower.
#include "common/dtype_kernels.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "common/half.h"

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define ACCORD_F16C_DISPATCH 1
#include <cpuid.h>
#include <immintrin.h>
#else
#define ACCORD_F16C_DISPATCH 0
#endif

namespace accord {
namespace {

// ------------------------------------------------------------------ codecs
// A codec says how an element is stored and in which type it is computed.

template <typename T>
struct PlainCodec {
  using Storage = T;
  using Compute = T;
  static T Load(T value) { return value; }
  static T Store(T value) { return value; }
};

struct HalfCodec {
  using Storage = uint16_t;
  using Compute = float;
  static float Load(uint16_t value) { return HalfToFloat(value); }
  static uint16_t Store(float value) { return FloatToHalf(value); }
};

struct BFloat16Codec {
  using Storage = uint16_t;
  using Compute = float;
  static float Load(uint16_t value) { return BFloat16ToFloat(value); }
  static uint16_t Store(float value) { return FloatToBFloat16(value); }
};

// ------------------------------------------------------------------ loops
//
// Each loop runs over whole blocks of kBlock elements, then the tail. The
// block loop has a constant trip count, which GCC vectorises even at -O2
// (whose "very cheap" cost model rejects loops that would need a scalar
// epilogue); at -O3 it makes no difference.

constexpr int64_t kBlock = 32;

template <typename S, typename Fn>
void MapDistinct(const S* __restrict src, S* __restrict dst, int64_t n, Fn fn) {
  int64_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    for (int64_t j = 0; j < kBlock; ++j) dst[i + j] = fn(src[i + j]);
  }
  for (; i < n; ++i) dst[i] = fn(src[i]);
}

template <typename S, typename Fn>
void MapInPlace(S* __restrict data, int64_t n, Fn fn) {
  int64_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    for (int64_t j = 0; j < kBlock; ++j) data[i + j] = fn(data[i + j]);
  }
  for (; i < n; ++i) data[i] = fn(data[i]);
}

// dst[i] = fn(src[i]); src == dst allowed.
template <typename S, typename Fn>
void Map(const void* src, void* dst, int64_t n, Fn fn) {
  if (src == dst) {
    MapInPlace(static_cast<S*>(dst), n, fn);
  } else {
    MapDistinct(static_cast<const S*>(src), static_cast<S*>(dst), n, fn);
  }
}

template <typename S, typename Fn>
void CombineDistinct(S* __restrict inout, const S* __restrict in, int64_t n, Fn fn) {
  int64_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    for (int64_t j = 0; j < kBlock; ++j) inout[i + j] = fn(inout[i + j], in[i + j]);
  }
  for (; i < n; ++i) inout[i] = fn(inout[i], in[i]);
}

// in == inout: inout[i] = fn(inout[i], inout[i]).
template <typename S, typename Fn>
void CombineInPlace(S* __restrict inout, int64_t n, Fn fn) {
  MapInPlace(inout, n, [fn](S v) { return fn(v, v); });
}

// inout[i] = fn(inout[i], in[i]); in == inout allowed.
template <typename S, typename Fn>
void Combine(void* inout, const void* in, int64_t n, Fn fn) {
  if (in == inout) {
    CombineInPlace(static_cast<S*>(inout), n, fn);
  } else {
    CombineDistinct(static_cast<S*>(inout), static_cast<const S*>(in), n, fn);
  }
}

// ------------------------------------------------------------------ scaling

template <typename Codec>
void ScaleFloating(const void* src, void* dst, int64_t n, double factor) {
  using Compute = typename Codec::Compute;
  const Compute f = static_cast<Compute>(factor);
  Map<typename Codec::Storage>(src, dst, n,
                               [f](typename Codec::Storage v) { return Codec::Store(Codec::Load(v) * f); });
}

// Truncates v toward zero into T, saturating at T's limits; NaN becomes 0.
template <typename T>
T TruncateSaturate(double v) {
  constexpr double kLowest = static_cast<double>(std::numeric_limits<T>::lowest());
  v = (v == v) ? v : 0.0;
  v = v < kLowest ? kLowest : v;
  if constexpr (sizeof(T) < 8) {
    // T's maximum is exact in double: clamp, then the cast truncates.
    constexpr double kMax = static_cast<double>(std::numeric_limits<T>::max());
    v = v > kMax ? kMax : v;
    return static_cast<T>(v);
  } else {
    // int64's maximum is not a double; 2^63 is the first value out of range.
    constexpr double kTooBig = 9223372036854775808.0;
    return v >= kTooBig ? std::numeric_limits<T>::max() : static_cast<T>(v);
  }
}

template <typename T>
void ScaleInteger(const void* src, void* dst, int64_t n, double factor) {
  Map<T>(src, dst, n, [factor](T v) { return TruncateSaturate<T>(static_cast<double>(v) * factor); });
}

// ------------------------------------------------------------------ reduce ops

// Integer Sum/Product are done in an unsigned type at least as wide as
// `unsigned int`, so that they wrap instead of overflowing (and small types
// are not promoted to a signed int that could overflow in a product).
template <typename T>
using WrapType = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;

struct SumOp {
  template <typename T>
  T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>) {
      return static_cast<T>(static_cast<WrapType<T>>(a) + static_cast<WrapType<T>>(b));
    } else {
      return a + b;
    }
  }
};

struct ProductOp {
  template <typename T>
  T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>) {
      return static_cast<T>(static_cast<WrapType<T>>(a) * static_cast<WrapType<T>>(b));
    } else {
      return a * b;
    }
  }
};

// Floating Min/Max let NaN win from either side: a NaN `a` is kept by the
// IsNaN test, a NaN `b` because the comparison with it is false.
template <typename T>
bool IsNaN(T value) {
  if constexpr (std::is_floating_point_v<T>) {
    return value != value;
  } else {
    return false;
  }
}

struct MinOp {
  template <typename T>
  T operator()(T a, T b) const {
    return (a < b || IsNaN(a)) ? a : b;
  }
};

struct MaxOp {
  template <typename T>
  T operator()(T a, T b) const {
    return (a > b || IsNaN(a)) ? a : b;
  }
};

template <typename Codec, typename Op>
void ReduceLoop(void* inout, const void* in, int64_t n, Op op) {
  using Storage = typename Codec::Storage;
  Combine<Storage>(inout, in, n,
                   [op](Storage a, Storage b) { return Codec::Store(op(Codec::Load(a), Codec::Load(b))); });
}

template <typename Codec>
void ReduceWithCodec(void* inout, const void* in, int64_t n, ReduceOp op) {
  switch (op) {
    case ReduceOp::kAverage:  // caller errors (see header); behave as Sum
    case ReduceOp::kAdasum:
    case ReduceOp::kSum: ReduceLoop<Codec>(inout, in, n, SumOp{}); return;
    case ReduceOp::kMin: ReduceLoop<Codec>(inout, in, n, MinOp{}); return;
    case ReduceOp::kMax: ReduceLoop<Codec>(inout, in, n, MaxOp{}); return;
    case ReduceOp::kProduct: ReduceLoop<Codec>(inout, in, n, ProductOp{}); return;
  }
}

void ReduceBool(void* inout, const void* in, int64_t n, ReduceOp op) {
  if (op == ReduceOp::kMin || op == ReduceOp::kProduct) {
    Combine<uint8_t>(inout, in, n, [](uint8_t a, uint8_t b) { return static_cast<uint8_t>((a != 0) & (b != 0)); });
  } else {  // Sum, Max (and Average or Adasum, caller errors)
    Combine<uint8_t>(inout, in, n, [](uint8_t a, uint8_t b) { return static_cast<uint8_t>((a | b) != 0); });
  }
}

// ------------------------------------------------------------------ F16C
//
// float16 loops with the F16C conversions, 8 elements at a time; the tail
// (n % 8) uses the portable code. The results are bit-identical to the
// portable loops (the hardware rounds to nearest-even too, whatever the MXCSR
// says), except that a signalling NaN comes back quiet. Min/Max blend in `a`
// where it is NaN, because vminps/vmaxps return the second operand whenever
// either is NaN: together that is MinOp/MaxOp exactly.
#if ACCORD_F16C_DISPATCH
#define ACCORD_TARGET_F16C __attribute__((target("avx,f16c")))

ACCORD_TARGET_F16C inline __m256 LoadHalf8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

ACCORD_TARGET_F16C inline void StoreHalf8(uint16_t* p, __m256 v) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

ACCORD_TARGET_F16C void ScaleHalfF16c(const void* src, void* dst, int64_t n, double factor) {
  const auto* s = static_cast<const uint16_t*>(src);
  auto* d = static_cast<uint16_t*>(dst);
  const float f = static_cast<float>(factor);
  const __m256 vf = _mm256_set1_ps(f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) StoreHalf8(d + i, _mm256_mul_ps(LoadHalf8(s + i), vf));
  for (; i < n; ++i) d[i] = FloatToHalf(HalfToFloat(s[i]) * f);
}

template <ReduceOp kOp, typename ScalarOp>
ACCORD_TARGET_F16C void ReduceHalfF16c(void* inout, const void* in, int64_t n, ScalarOp op) {
  auto* io = static_cast<uint16_t*>(inout);
  const auto* other = static_cast<const uint16_t*>(in);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 a = LoadHalf8(io + i);
    const __m256 b = LoadHalf8(other + i);
    __m256 r;
    if constexpr (kOp == ReduceOp::kMin) {
      r = _mm256_blendv_ps(_mm256_min_ps(a, b), a, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
    } else if constexpr (kOp == ReduceOp::kMax) {
      r = _mm256_blendv_ps(_mm256_max_ps(a, b), a, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
    } else if constexpr (kOp == ReduceOp::kProduct) {
      r = _mm256_mul_ps(a, b);
    } else {
      r = _mm256_add_ps(a, b);
    }
    StoreHalf8(io + i, r);
  }
  for (; i < n; ++i) io[i] = FloatToHalf(op(HalfToFloat(io[i]), HalfToFloat(other[i])));
}

void ReduceHalfWithF16c(void* inout, const void* in, int64_t n, ReduceOp op) {
  switch (op) {
    case ReduceOp::kAverage:
    case ReduceOp::kAdasum:
    case ReduceOp::kSum: return ReduceHalfF16c<ReduceOp::kSum>(inout, in, n, SumOp{});
    case ReduceOp::kMin: return ReduceHalfF16c<ReduceOp::kMin>(inout, in, n, MinOp{});
    case ReduceOp::kMax: return ReduceHalfF16c<ReduceOp::kMax>(inout, in, n, MaxOp{});
    case ReduceOp::kProduct: return ReduceHalfF16c<ReduceOp::kProduct>(inout, in, n, ProductOp{});
  }
}

// CPUID leaf 1 says whether the CPU has AVX and F16C; XCR0 says whether the
// OS saves the AVX registers. (__builtin_cpu_supports("f16c") would do, but
// not every clang knows that feature name.)
bool CpuHasF16c() {
  static const bool has = [] {
    constexpr unsigned kOsXsave = 1u << 27, kAvx = 1u << 28, kF16c = 1u << 29;
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return false;
    if ((ecx & (kOsXsave | kAvx | kF16c)) != (kOsXsave | kAvx | kF16c)) return false;
    unsigned xcr0 = 0, xcr0_high = 0;
    __asm__("xgetbv" : "=a"(xcr0), "=d"(xcr0_high) : "c"(0));
    return (xcr0 & 0x6u) == 0x6u;  // SSE and AVX state enabled
  }();
  return has;
}
#else
void ScaleHalfF16c(const void*, void*, int64_t, double) {}
void ReduceHalfWithF16c(void*, const void*, int64_t, ReduceOp) {}
bool CpuHasF16c() { return false; }
#endif

// ------------------------------------------------------------------ dispatch

void ScaleCopyImpl(const void* src, void* dst, int64_t n, DataType dtype, double factor, bool use_f16c) {
  if (n <= 0) return;
  if (factor == 1.0 || dtype == DataType::kBool) {
    if (src != dst) std::memmove(dst, src, static_cast<size_t>(n) * DataTypeSize(dtype));
    return;
  }
  switch (dtype) {
    case DataType::kUInt8: return ScaleInteger<uint8_t>(src, dst, n, factor);
    case DataType::kInt8: return ScaleInteger<int8_t>(src, dst, n, factor);
    case DataType::kInt16: return ScaleInteger<int16_t>(src, dst, n, factor);
    case DataType::kInt32: return ScaleInteger<int32_t>(src, dst, n, factor);
    case DataType::kInt64: return ScaleInteger<int64_t>(src, dst, n, factor);
    case DataType::kFloat16:
      if (use_f16c) return ScaleHalfF16c(src, dst, n, factor);
      return ScaleFloating<HalfCodec>(src, dst, n, factor);
    case DataType::kBFloat16: return ScaleFloating<BFloat16Codec>(src, dst, n, factor);
    case DataType::kFloat32: return ScaleFloating<PlainCodec<float>>(src, dst, n, factor);
    case DataType::kFloat64: return ScaleFloating<PlainCodec<double>>(src, dst, n, factor);
    case DataType::kBool: return;  // copied above
  }
}

void ReduceIntoImpl(void* inout, const void* in, int64_t n, DataType dtype, ReduceOp op, bool use_f16c) {
  if (n <= 0) return;
  switch (dtype) {
    case DataType::kUInt8: return ReduceWithCodec<PlainCodec<uint8_t>>(inout, in, n, op);
    case DataType::kInt8: return ReduceWithCodec<PlainCodec<int8_t>>(inout, in, n, op);
    case DataType::kInt16: return ReduceWithCodec<PlainCodec<int16_t>>(inout, in, n, op);
    case DataType::kInt32: return ReduceWithCodec<PlainCodec<int32_t>>(inout, in, n, op);
    case DataType::kInt64: return ReduceWithCodec<PlainCodec<int64_t>>(inout, in, n, op);
    case DataType::kFloat16:
      if (use_f16c) return ReduceHalfWithF16c(inout, in, n, op);
      return ReduceWithCodec<HalfCodec>(inout, in, n, op);
    case DataType::kBFloat16: return ReduceWithCodec<BFloat16Codec>(inout, in, n, op);
    case DataType::kFloat32: return ReduceWithCodec<PlainCodec<float>>(inout, in, n, op);
    case DataType::kFloat64: return ReduceWithCodec<PlainCodec<double>>(inout, in, n, op);
    case DataType::kBool: return ReduceBool(inout, in, n, op);
  }
}

// ------------------------------------------------------------------ Adasum

// Calls fn(codec) for a floating dtype; does nothing for the others.
template <typename Fn>
void WithFloatingCodec(DataType dtype, Fn&& fn) {
  switch (dtype) {
    case DataType::kFloat16: return fn(HalfCodec{});
    case DataType::kBFloat16: return fn(BFloat16Codec{});
    case DataType::kFloat32: return fn(PlainCodec<float>{});
    case DataType::kFloat64: return fn(PlainCodec<double>{});
    default: return;
  }
}

template <typename Codec>
double ToDouble(typename Codec::Storage value) {
  return static_cast<double>(Codec::Load(value));
}

}  // namespace

double MaxAbs(const void* a, int64_t n, DataType dtype) {
  double largest = 0.0;
  WithFloatingCodec(dtype, [&](auto codec) {
    using Codec = decltype(codec);
    const auto* x = static_cast<const typename Codec::Storage*>(a);
    for (int64_t i = 0; i < n; ++i) {
      const double v = std::fabs(ToDouble<Codec>(x[i]));
      largest = v > largest || v != v ? v : largest;  // a NaN stays: nothing compares greater
    }
  });
  return largest;
}

DotAndNorms ScaledDotAndNorms(const void* a, const void* b, int64_t n, DataType dtype, double scale) {
  DotAndNorms sums;
  WithFloatingCodec(dtype, [&](auto codec) {
    using Codec = decltype(codec);
    const auto* x = static_cast<const typename Codec::Storage*>(a);
    const auto* y = static_cast<const typename Codec::Storage*>(b);
    for (int64_t i = 0; i < n; ++i) {
      const double u = ToDouble<Codec>(x[i]) * scale;
      const double v = ToDouble<Codec>(y[i]) * scale;
      sums.dot += u * v;
      sums.a_norm2 += u * u;
      sums.b_norm2 += v * v;
    }
  });
  return sums;
}

void LinearCombination(const void* a, const void* b, void* out, int64_t n, DataType dtype, double ca, double cb) {
  WithFloatingCodec(dtype, [&](auto codec) {
    using Codec = decltype(codec);
    using Compute = typename Codec::Compute;
    const auto* x = static_cast<const typename Codec::Storage*>(a);
    const auto* y = static_cast<const typename Codec::Storage*>(b);
    auto* z = static_cast<typename Codec::Storage*>(out);
    for (int64_t i = 0; i < n; ++i) {
      z[i] = Codec::Store(static_cast<Compute>(ca * ToDouble<Codec>(x[i]) + cb * ToDouble<Codec>(y[i])));
    }
  });
}

void ScaleCopy(const void* src, void* dst, int64_t n, DataType dtype, double factor) {
  ScaleCopyImpl(src, dst, n, dtype, factor, CpuHasF16c());
}

void FillZero(void* dst, int64_t n, DataType dtype) {
  // All-zero bytes are 0, +0.0 and false in every supported dtype.
  if (n > 0) std::memset(dst, 0, static_cast<size_t>(n) * DataTypeSize(dtype));
}

void ReduceInto(void* inout, const void* in, int64_t n, DataType dtype, ReduceOp op) {
  ReduceIntoImpl(inout, in, n, dtype, op, CpuHasF16c());
}

namespace kernels_internal {

bool UsesF16c() { return CpuHasF16c(); }

void ScaleCopyPortable(const void* src, void* dst, int64_t n, DataType dtype, double factor) {
  ScaleCopyImpl(src, dst, n, dtype, factor, false);
}

void ReduceIntoPortable(void* inout, const void* in, int64_t n, DataType dtype, ReduceOp op) {
  ReduceIntoImpl(inout, in, n, dtype, op, false);
}

}  // namespace kernels_internal

}  // namespace accord
