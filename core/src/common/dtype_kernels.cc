// Element-wise kernels over every DataType; see dtype_kernels.h.
//
// Structure: a switch on dtype (and op) picks a template instantiation once
// per call; the loops themselves contain no switch, so the compiler can
// vectorise the float32/float64/integer ones. Loops are written twice, for
// distinct buffers (restrict pointers) and for in-place use, so that neither
// needs a runtime alias check.
#include "common/dtype_kernels.h"

#include <cstring>
#include <limits>
#include <type_traits>

#include "common/half.h"

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

template <typename S, typename Fn>
void MapDistinct(const S* __restrict src, S* __restrict dst, int64_t n, Fn fn) {
  for (int64_t i = 0; i < n; ++i) dst[i] = fn(src[i]);
}

template <typename S, typename Fn>
void MapInPlace(S* data, int64_t n, Fn fn) {
  for (int64_t i = 0; i < n; ++i) data[i] = fn(data[i]);
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
  for (int64_t i = 0; i < n; ++i) inout[i] = fn(inout[i], in[i]);
}

template <typename S, typename Fn>
void CombineInPlace(S* inout, int64_t n, Fn fn) {
  for (int64_t i = 0; i < n; ++i) inout[i] = fn(inout[i], inout[i]);
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
  Map<typename Codec::Storage>(src, dst, n, [f](typename Codec::Storage v) {
    return Codec::Store(Codec::Load(v) * f);
  });
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
  Map<T>(src, dst, n, [factor](T v) {
    return TruncateSaturate<T>(static_cast<double>(v) * factor);
  });
}

// ------------------------------------------------------------------ reduce ops

// Integer Sum/Product are done in an unsigned type at least as wide as
// `unsigned int`, so that they wrap instead of overflowing (and small types
// are not promoted to a signed int that could overflow in a product).
template <typename T>
using WrapType = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned,
                                    std::make_unsigned_t<T>>;

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
  Combine<Storage>(inout, in, n, [op](Storage a, Storage b) {
    return Codec::Store(op(Codec::Load(a), Codec::Load(b)));
  });
}

template <typename Codec>
void ReduceWithCodec(void* inout, const void* in, int64_t n, ReduceOp op) {
  switch (op) {
    case ReduceOp::kAverage:  // a caller error (see header); behave as Sum
    case ReduceOp::kSum: ReduceLoop<Codec>(inout, in, n, SumOp{}); return;
    case ReduceOp::kMin: ReduceLoop<Codec>(inout, in, n, MinOp{}); return;
    case ReduceOp::kMax: ReduceLoop<Codec>(inout, in, n, MaxOp{}); return;
    case ReduceOp::kProduct: ReduceLoop<Codec>(inout, in, n, ProductOp{}); return;
  }
}

void ReduceBool(void* inout, const void* in, int64_t n, ReduceOp op) {
  if (op == ReduceOp::kMin || op == ReduceOp::kProduct) {
    Combine<uint8_t>(inout, in, n, [](uint8_t a, uint8_t b) {
      return static_cast<uint8_t>((a != 0) & (b != 0));
    });
  } else {  // Sum, Max (and Average, a caller error)
    Combine<uint8_t>(inout, in, n, [](uint8_t a, uint8_t b) {
      return static_cast<uint8_t>((a | b) != 0);
    });
  }
}

}  // namespace

void ScaleCopy(const void* src, void* dst, int64_t n, DataType dtype, double factor) {
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
    case DataType::kFloat16: return ScaleFloating<HalfCodec>(src, dst, n, factor);
    case DataType::kBFloat16: return ScaleFloating<BFloat16Codec>(src, dst, n, factor);
    case DataType::kFloat32: return ScaleFloating<PlainCodec<float>>(src, dst, n, factor);
    case DataType::kFloat64: return ScaleFloating<PlainCodec<double>>(src, dst, n, factor);
    case DataType::kBool: return;  // copied above
  }
}

void FillZero(void* dst, int64_t n, DataType dtype) {
  // All-zero bytes are 0, +0.0 and false in every supported dtype.
  if (n > 0) std::memset(dst, 0, static_cast<size_t>(n) * DataTypeSize(dtype));
}

void ReduceInto(void* inout, const void* in, int64_t n, DataType dtype, ReduceOp op) {
  if (n <= 0) return;
  switch (dtype) {
    case DataType::kUInt8: return ReduceWithCodec<PlainCodec<uint8_t>>(inout, in, n, op);
    case DataType::kInt8: return ReduceWithCodec<PlainCodec<int8_t>>(inout, in, n, op);
    case DataType::kInt16: return ReduceWithCodec<PlainCodec<int16_t>>(inout, in, n, op);
    case DataType::kInt32: return ReduceWithCodec<PlainCodec<int32_t>>(inout, in, n, op);
    case DataType::kInt64: return ReduceWithCodec<PlainCodec<int64_t>>(inout, in, n, op);
    case DataType::kFloat16: return ReduceWithCodec<HalfCodec>(inout, in, n, op);
    case DataType::kBFloat16: return ReduceWithCodec<BFloat16Codec>(inout, in, n, op);
    case DataType::kFloat32: return ReduceWithCodec<PlainCodec<float>>(inout, in, n, op);
    case DataType::kFloat64: return ReduceWithCodec<PlainCodec<double>>(inout, in, n, op);
    case DataType::kBool: return ReduceBool(inout, in, n, op);
  }
}

}  // namespace accord
