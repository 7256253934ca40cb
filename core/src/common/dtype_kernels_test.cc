// Tests for common/dtype_kernels.h: ScaleCopy, FillZero, ReduceInto for
// every dtype, compared element by element with hand-computed values; and for
// the small descriptive functions of dtype.cc and status.cc.
#include "common/dtype_kernels.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "common/half.h"

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

namespace accord {
namespace {

template <typename T>
std::string Show(T value) {
  std::ostringstream out;
  if constexpr (sizeof(T) == 1) {
    out << static_cast<int>(value);
  } else {
    out.precision(17);
    out << value;
  }
  return out.str();
}

template <typename T>
bool SameValue(T expected, T got) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(expected)) return std::isnan(got);
    return expected == got && std::signbit(expected) == std::signbit(got);
  } else {
    return expected == got;
  }
}

// Checks every element; the message names the case, index, expected and got.
template <typename T>
void CheckElements(const std::string& what, const std::vector<T>& expected, const std::vector<T>& got) {
  REQUIRE(expected.size() == got.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    if (!SameValue(expected[i], got[i])) {
      FAIL_CHECK(what << ": index " << i << ": expected " << Show(expected[i]) << ", got " << Show(got[i]));
    }
  }
}

// The same for float16/bfloat16, stored as bits: compared as bits, shown as floats.
void CheckHalfElements(const std::string& what, const std::vector<uint16_t>& expected, const std::vector<uint16_t>& got,
                       float (*to_float)(uint16_t)) {
  REQUIRE(expected.size() == got.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    if (expected[i] != got[i]) {
      FAIL_CHECK(what << ": index " << i << ": expected " << to_float(expected[i]) << " (bits " << expected[i]
                      << "), got " << to_float(got[i]) << " (bits " << got[i] << ")");
    }
  }
}

// The kernels under test: the public functions, which use F16C for float16
// where the CPU has it, and the portable loops.
struct Kernels {
  const char* name;
  void (*scale)(const void*, void*, int64_t, DataType, double);
  void (*reduce)(void*, const void*, int64_t, DataType, ReduceOp);
};
constexpr Kernels kDispatched = {"dispatched", &ScaleCopy, &ReduceInto};
constexpr Kernels kPortable = {"portable", &kernels_internal::ScaleCopyPortable, &kernels_internal::ReduceIntoPortable};
constexpr Kernels kBothPaths[] = {kDispatched, kPortable};

template <typename T>
std::vector<T> Scaled(std::vector<T> src, DataType dtype, double factor, const Kernels& k = kDispatched) {
  std::vector<T> dst(src.size());
  k.scale(src.data(), dst.data(), static_cast<int64_t>(src.size()), dtype, factor);
  return dst;
}

template <typename T>
std::vector<T> ScaledInPlace(std::vector<T> data, DataType dtype, double factor, const Kernels& k = kDispatched) {
  k.scale(data.data(), data.data(), static_cast<int64_t>(data.size()), dtype, factor);
  return data;
}

template <typename T>
std::vector<T> Reduced(std::vector<T> inout, const std::vector<T>& in, DataType dtype, ReduceOp op,
                       const Kernels& k = kDispatched) {
  REQUIRE(inout.size() == in.size());
  k.reduce(inout.data(), in.data(), static_cast<int64_t>(in.size()), dtype, op);
  return inout;
}

// Checks ScaleCopy both out of place and in place.
template <typename T>
void CheckScale(const std::string& what, const std::vector<T>& src, DataType dtype, double factor,
                const std::vector<T>& expected) {
  CheckElements(what + " (copy)", expected, Scaled(src, dtype, factor));
  CheckElements(what + " (in place)", expected, ScaledInPlace(src, dtype, factor));
}

std::vector<uint16_t> ToHalf(const std::vector<float>& values) {
  std::vector<uint16_t> bits;
  for (float v : values) bits.push_back(FloatToHalf(v));
  return bits;
}

std::vector<uint16_t> ToBFloat16(const std::vector<float>& values) {
  std::vector<uint16_t> bits;
  for (float v : values) bits.push_back(FloatToBFloat16(v));
  return bits;
}

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

TEST_CASE("ScaleCopy rounds integers toward zero", "[kernels]") {
  CheckScale<int32_t>("int32 x0.5", {7, -7, 1, -1, 100, 0}, DataType::kInt32, 0.5, {3, -3, 0, 0, 50, 0});
  CheckScale<int32_t>("int32 x0.999", {1001, -1001}, DataType::kInt32, 0.999, {999, -999});
  CheckScale<int8_t>("int8 x0.5", {7, -7, 127, -128}, DataType::kInt8, 0.5, {3, -3, 63, -64});
  CheckScale<uint8_t>("uint8 x0.5", {7, 255, 1}, DataType::kUInt8, 0.5, {3, 127, 0});
  CheckScale<int16_t>("int16 x1.5", {7, -7}, DataType::kInt16, 1.5, {10, -10});
  CheckScale<int64_t>("int64 x0.5", {7, -7, int64_t{1} << 40}, DataType::kInt64, 0.5, {3, -3, int64_t{1} << 39});
  CheckScale<int32_t>("int32 x-0.25", {9, -9}, DataType::kInt32, -0.25, {-2, 2});
}

TEST_CASE("ScaleCopy saturates integers at their limits", "[kernels]") {
  constexpr int32_t kI32Max = std::numeric_limits<int32_t>::max();
  constexpr int32_t kI32Min = std::numeric_limits<int32_t>::min();
  constexpr int64_t kI64Max = std::numeric_limits<int64_t>::max();
  constexpr int64_t kI64Min = std::numeric_limits<int64_t>::min();
  CheckScale<int8_t>("int8 x2", {100, -100, 63, -64}, DataType::kInt8, 2.0, {127, -128, 126, -128});
  CheckScale<uint8_t>("uint8 x2", {200, 100}, DataType::kUInt8, 2.0, {255, 200});
  CheckScale<uint8_t>("uint8 x-1", {7, 0}, DataType::kUInt8, -1.0, {0, 0});
  CheckScale<int16_t>("int16 x2", {30000, -30000}, DataType::kInt16, 2.0, {32767, -32768});
  CheckScale<int32_t>("int32 x3", {kI32Max, kI32Min}, DataType::kInt32, 3.0, {kI32Max, kI32Min});
  CheckScale<int32_t>("int32 x-1", {kI32Min, kI32Max}, DataType::kInt32, -1.0, {kI32Max, -kI32Max});
  CheckScale<int32_t>("int32 x0.5", {kI32Max, kI32Min}, DataType::kInt32, 0.5, {1073741823, -1073741824});
  CheckScale<int64_t>("int64 x2", {kI64Max, kI64Min, 5}, DataType::kInt64, 2.0, {kI64Max, kI64Min, 10});
  CheckScale<int64_t>("int64 x-1", {kI64Min}, DataType::kInt64, -1.0, {kI64Max});
  CheckScale<int32_t>("int32 xNaN", {5, -5}, DataType::kInt32, kNaN, {0, 0});
  CheckScale<int64_t>("int64 xinf", {5, -5, 0}, DataType::kInt64, HUGE_VAL, {kI64Max, kI64Min, 0});
}

TEST_CASE("ScaleCopy with factor 1 copies exactly", "[kernels]") {
  constexpr int64_t kBig = std::numeric_limits<int64_t>::max() - 1;  // not exact in double
  CheckScale<int64_t>("int64 x1", {kBig, -kBig, 3}, DataType::kInt64, 1.0, {kBig, -kBig, 3});
  CheckScale<uint8_t>("bool x1", {0, 1, 1, 0}, DataType::kBool, 1.0, {0, 1, 1, 0});
  const std::vector<uint16_t> nan_bits = {0x7C01, 0xFE00, 0x3C00};  // NaN payloads kept
  CheckHalfElements("float16 x1", nan_bits, Scaled(nan_bits, DataType::kFloat16, 1.0), HalfToFloat);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  CheckScale<float>("float32 x1", {1.5f, -0.0f, nan}, DataType::kFloat32, 1.0, {1.5f, -0.0f, nan});
}

TEST_CASE("ScaleCopy on floating types", "[kernels]") {
  CheckScale<float>("float32 x0.25", {4.0f, -2.0f, 0.0f, 1e30f}, DataType::kFloat32, 0.25,
                    {1.0f, -0.5f, 0.0f, 2.5e29f});
  CheckScale<double>("float64 x0.1", {10.0, -20.0, 3.0}, DataType::kFloat64, 0.1, {10.0 * 0.1, -20.0 * 0.1, 3.0 * 0.1});
  // float32 computes in float: the factor is rounded to float first.
  CheckScale<float>("float32 x0.1", {3.0f}, DataType::kFloat32, 0.1, {3.0f * 0.1f});
  CheckScale<double>("float64 x-inf", {1.0, -1.0}, DataType::kFloat64, -HUGE_VAL, {-HUGE_VAL, HUGE_VAL});
}

// Repeats `v` so that a buffer is long enough for the 8-wide F16C loop and a tail.
std::vector<uint16_t> Tile(const std::vector<uint16_t>& v, int times = 5) {
  std::vector<uint16_t> out;
  for (int t = 0; t < times; ++t) out.insert(out.end(), v.begin(), v.end());
  return out;
}

// ScaleCopy(input x factor) == expected, out of place and in place, on a
// tiled buffer.
void CheckScaleHalf(const Kernels& k, const std::string& what, DataType dtype, const std::vector<uint16_t>& input,
                    double factor, const std::vector<uint16_t>& expected) {
  float (*to_float)(uint16_t) = dtype == DataType::kFloat16 ? HalfToFloat : BFloat16ToFloat;
  const std::string name = std::string(k.name) + " " + what;
  CheckHalfElements(name, Tile(expected), Scaled(Tile(input), dtype, factor, k), to_float);
  CheckHalfElements(name + " (in place)", Tile(expected), ScaledInPlace(Tile(input), dtype, factor, k), to_float);
}

TEST_CASE("ScaleCopy on float16 and bfloat16", "[kernels]") {
  const float e = std::ldexp(1.0f, -11);
  for (const Kernels& k : kBothPaths) {
    CheckScaleHalf(k, "float16 x0.5", DataType::kFloat16, ToHalf({3.0f, -1.0f, 60000.0f, 1.0f, 1.0f + 2 * e}), 0.5,
                   ToHalf({1.5f, -0.5f, 30000.0f, 0.5f, 0.5f + e}));
    // 60000 * 2 overflows float16; (1 + 2^-10) * 2 is exact.
    CheckScaleHalf(k, "float16 x2", DataType::kFloat16, ToHalf({60000.0f, -60000.0f, 1.0f + 2 * e}), 2.0,
                   {0x7C00, 0xFC00, FloatToHalf(2.0f + 4 * e)});
    // 1 * (1 + 2^-11 + 2^-20) is just above the tie: rounds up to 1 + 2^-10.
    CheckScaleHalf(k, "float16 round up", DataType::kFloat16, ToHalf({1.0f}),
                   1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -20), {0x3C01});
    // 1 * (1 + 2^-11) is a tie: ties go to even (1.0).
    CheckScaleHalf(k, "float16 tie", DataType::kFloat16, ToHalf({1.0f}), 1.0 + std::ldexp(1.0, -11), {0x3C00});

    CheckScaleHalf(k, "bfloat16 x0.5", DataType::kBFloat16, ToBFloat16({3.0f, -1.0f, 1e38f, 256.0f}), 0.5,
                   ToBFloat16({1.5f, -0.5f, 5e37f, 128.0f}));
    // 1 * (1 + 2^-8) is a tie between 1 and 1 + 2^-7: even is 1.
    CheckScaleHalf(k, "bfloat16 tie", DataType::kBFloat16, ToBFloat16({1.0f}), 1.0 + std::ldexp(1.0, -8), {0x3F80});
  }
}

// Long buffers exercise the vectorised loop bodies and their tails.
TEST_CASE("ScaleCopy on long buffers", "[kernels]") {
  for (int64_t n : {1, 7, 64, 1001}) {
    std::vector<int32_t> ints(n), expected_ints(n);
    std::vector<float> floats(n), expected_floats(n);
    for (int64_t i = 0; i < n; ++i) {
      ints[i] = static_cast<int32_t>(i * 3 - 500);
      expected_ints[i] = ints[i] / 2;  // C++ integer division truncates toward zero
      floats[i] = static_cast<float>(i) - 10.5f;
      expected_floats[i] = floats[i] * 0.5f;
    }
    const std::string size = " n=" + std::to_string(n);
    CheckScale("int32 x0.5" + size, ints, DataType::kInt32, 0.5, expected_ints);
    CheckScale("float32 x0.5" + size, floats, DataType::kFloat32, 0.5, expected_floats);
  }
}

TEST_CASE("ScaleCopy and ReduceInto do nothing for n = 0", "[kernels]") {
  int32_t value = 42;
  ScaleCopy(&value, &value, 0, DataType::kInt32, 2.0);
  ReduceInto(&value, &value, 0, DataType::kInt32, ReduceOp::kSum);
  FillZero(&value, 0, DataType::kInt32);
  CHECK(value == 42);
}

TEST_CASE("FillZero writes zeros of every dtype", "[kernels]") {
  const DataType all[] = {DataType::kUInt8,   DataType::kInt8,    DataType::kInt16,    DataType::kInt32,
                          DataType::kInt64,   DataType::kFloat16, DataType::kBFloat16, DataType::kFloat32,
                          DataType::kFloat64, DataType::kBool};
  for (DataType dtype : all) {
    std::vector<unsigned char> bytes(5 * DataTypeSize(dtype) + 1, 0xAB);
    FillZero(bytes.data(), 5, dtype);
    for (size_t i = 0; i < bytes.size(); ++i) {
      const unsigned expected = i + 1 < bytes.size() ? 0x00 : 0xAB;  // the last byte is untouched
      if (bytes[i] != expected) {
        FAIL_CHECK(DataTypeName(dtype) << ": byte " << i << ": expected " << expected << ", got "
                                       << static_cast<unsigned>(bytes[i]));
      }
    }
  }
  std::vector<double> doubles = {1.0, -2.0};
  FillZero(doubles.data(), 2, DataType::kFloat64);
  CheckElements<double>("float64 zero", {0.0, 0.0}, doubles);
}

template <typename T>
void CheckReduce(const std::string& what, DataType dtype, ReduceOp op, const std::vector<T>& a, const std::vector<T>& b,
                 const std::vector<T>& expected) {
  const std::string name = what + " " + ReduceOpName(op);
  CheckElements(name, expected, Reduced(a, b, dtype, op));
  CheckElements(name + " (swapped)", expected, Reduced(b, a, dtype, op));  // every op commutes
}

TEMPLATE_TEST_CASE("ReduceInto on integers", "[kernels]", int8_t, uint8_t, int16_t, int32_t, int64_t) {
  using T = TestType;
  const DataType dtype = std::is_same_v<T, int8_t>    ? DataType::kInt8
                         : std::is_same_v<T, uint8_t> ? DataType::kUInt8
                         : std::is_same_v<T, int16_t> ? DataType::kInt16
                         : std::is_same_v<T, int32_t> ? DataType::kInt32
                                                      : DataType::kInt64;
  const std::string what = DataTypeName(dtype);
  const std::vector<T> a = {1, 5, 0, 9, 3};
  const std::vector<T> b = {2, 3, 7, 9, 0};
  CheckReduce<T>(what, dtype, ReduceOp::kSum, a, b, {3, 8, 7, 18, 3});
  CheckReduce<T>(what, dtype, ReduceOp::kMin, a, b, {1, 3, 0, 9, 0});
  CheckReduce<T>(what, dtype, ReduceOp::kMax, a, b, {2, 5, 7, 9, 3});
  CheckReduce<T>(what, dtype, ReduceOp::kProduct, a, b, {2, 15, 0, 81, 0});
  // Average is the caller's job; ReduceInto treats it as Sum.
  CheckReduce<T>(what, dtype, ReduceOp::kAverage, a, b, {3, 8, 7, 18, 3});
  if constexpr (std::is_signed_v<T>) {
    const std::vector<T> neg_a = {-4, 6, -1};
    const std::vector<T> neg_b = {3, -6, -2};
    CheckReduce<T>(what, dtype, ReduceOp::kSum, neg_a, neg_b, {-1, 0, -3});
    CheckReduce<T>(what, dtype, ReduceOp::kMin, neg_a, neg_b, {-4, -6, -2});
    CheckReduce<T>(what, dtype, ReduceOp::kMax, neg_a, neg_b, {3, 6, -1});
    CheckReduce<T>(what, dtype, ReduceOp::kProduct, neg_a, neg_b, {-12, -36, 2});
  }
  // Sum and Product wrap modulo 2^bits, like unsigned arithmetic.
  constexpr T kMax = std::numeric_limits<T>::max();
  constexpr T kMin = std::numeric_limits<T>::min();
  CheckReduce<T>(what + " wrap", dtype, ReduceOp::kSum, {kMax}, {1}, {kMin});
  CheckReduce<T>(what + " wrap", dtype, ReduceOp::kProduct, {kMax}, {2}, {static_cast<T>(kMax - 1 + kMin)});
  CheckReduce<T>(what + " limits", dtype, ReduceOp::kMin, {kMax}, {kMin}, {kMin});
  CheckReduce<T>(what + " limits", dtype, ReduceOp::kMax, {kMax}, {kMin}, {kMax});
}

TEST_CASE("ReduceInto wraps small-integer products without overflow", "[kernels]") {
  // 300 * 300 = 90000 = 65536 + 24464. In int16 the operands would be promoted
  // to int; here the kernel must do it in unsigned arithmetic.
  CheckReduce<int16_t>("int16", DataType::kInt16, ReduceOp::kProduct, {300, -300, -32768}, {300, 300, -1},
                       {24464, -24464, -32768});
  CheckReduce<int8_t>("int8", DataType::kInt8, ReduceOp::kSum, {100, -100}, {100, -100}, {-56, 56});
  CheckReduce<uint8_t>("uint8", DataType::kUInt8, ReduceOp::kSum, {200}, {100}, {44});
  CheckReduce<uint8_t>("uint8", DataType::kUInt8, ReduceOp::kProduct, {255}, {255}, {1});
  constexpr int64_t kI64Max = std::numeric_limits<int64_t>::max();
  CheckReduce<int64_t>("int64", DataType::kInt64, ReduceOp::kProduct, {kI64Max}, {kI64Max}, {1});
}

TEMPLATE_TEST_CASE("ReduceInto on float32 and float64", "[kernels]", float, double) {
  using T = TestType;
  const DataType dtype = std::is_same_v<T, float> ? DataType::kFloat32 : DataType::kFloat64;
  const std::string what = DataTypeName(dtype);
  const T nan = std::numeric_limits<T>::quiet_NaN();
  const T inf = std::numeric_limits<T>::infinity();
  const std::vector<T> a = {1.5, -2.0, 0.25, 1e30, -inf};
  const std::vector<T> b = {2.0, 3.0, -0.5, 1e30, 7.0};
  CheckReduce<T>(what, dtype, ReduceOp::kSum, a, b, {3.5, 1.0, -0.25, T(1e30) + T(1e30), -inf});
  CheckReduce<T>(what, dtype, ReduceOp::kMin, a, b, {1.5, -2.0, -0.5, 1e30, -inf});
  CheckReduce<T>(what, dtype, ReduceOp::kMax, a, b, {2.0, 3.0, 0.25, 1e30, 7.0});
  CheckReduce<T>(what, dtype, ReduceOp::kProduct, a, b, {3.0, -6.0, -0.125, T(1e30) * T(1e30), -inf});
  // NaN wins from either side, for every op.
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct}) {
    CheckReduce<T>(what + " NaN", dtype, op, {nan, 1.0}, {1.0, nan}, {nan, nan});
  }
}

// ReduceInto(a, b) == ReduceInto(b, a) == expected on tiled buffers.
void CheckReduceHalf(const Kernels& k, const std::string& what, DataType dtype, ReduceOp op,
                     const std::vector<uint16_t>& a, const std::vector<uint16_t>& b,
                     const std::vector<uint16_t>& expected) {
  float (*to_float)(uint16_t) = dtype == DataType::kFloat16 ? HalfToFloat : BFloat16ToFloat;
  const std::string name = std::string(k.name) + " " + what + " " + ReduceOpName(op);
  CheckHalfElements(name, Tile(expected), Reduced(Tile(a), Tile(b), dtype, op, k), to_float);
  CheckHalfElements(name + " (swapped)", Tile(expected), Reduced(Tile(b), Tile(a), dtype, op, k), to_float);
}

TEST_CASE("ReduceInto on float16 computes in float and rounds back", "[kernels]") {
  const float e = std::ldexp(1.0f, -11);  // half an ulp of 1.0 in float16
  const std::vector<uint16_t> a = ToHalf({1.5f, -2.0f, 0.25f, 60000.0f, 1.0f, 3.0f});
  const std::vector<uint16_t> b = ToHalf({2.0f, 3.0f, -0.5f, 60000.0f, 2 * e, 2 * e});
  const DataType f16 = DataType::kFloat16;
  for (const Kernels& k : kBothPaths) {
    // 1 + 2^-10 is exact; 3 + 2^-10 is a tie between 3 and 3 + 2^-9: even is 3.
    CheckReduceHalf(k, "float16", f16, ReduceOp::kSum, a, b,
                    {FloatToHalf(3.5f), FloatToHalf(1.0f), FloatToHalf(-0.25f), 0x7C00, FloatToHalf(1.0f + 2 * e),
                     FloatToHalf(3.0f)});
    CheckReduceHalf(k, "float16", f16, ReduceOp::kMin, a, b, ToHalf({1.5f, -2.0f, -0.5f, 60000.0f, 2 * e, 2 * e}));
    CheckReduceHalf(k, "float16", f16, ReduceOp::kMax, a, b, ToHalf({2.0f, 3.0f, 0.25f, 60000.0f, 1.0f, 3.0f}));
    CheckReduceHalf(
        k, "float16", f16, ReduceOp::kProduct, a, b,
        {FloatToHalf(3.0f), FloatToHalf(-6.0f), FloatToHalf(-0.125f), 0x7C00, FloatToHalf(2 * e), FloatToHalf(6 * e)});
    // NaN wins from either side (compared as bits: both paths return 0x7E00).
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct}) {
      CheckReduceHalf(k, "float16 NaN", f16, op, {0x7E00, 0x3C00}, {0x3C00, 0x7E00}, {0x7E00, 0x7E00});
    }
  }
}

// Every float16 value as `a`, against a spread of `b` values (zeros,
// subnormals, normals, the largest finite, inf, NaN), through both kernel
// paths, compared with the scalar conversions of half.h. The buffers are long
// enough that the F16C path runs its 8-wide loop as well as its tail.
TEST_CASE("float16 kernels agree with the scalar conversions on every value", "[kernels]") {
  INFO("this CPU uses F16C: " << kernels_internal::UsesF16c());
  const std::vector<uint16_t> b_values = {0x0000, 0x8000, 0x0001, 0x03FF, 0x0400, 0x3555, 0x3C00, 0xBC01,
                                          0x4248, 0x7BFF, 0xFBFF, 0x7C00, 0xFC00, 0x7E00, 0x1400, 0x0200};
  const auto same = [](uint16_t x, uint16_t y) {
    const bool x_nan = std::isnan(HalfToFloat(x));
    return x_nan ? std::isnan(HalfToFloat(y)) : x == y;  // a NaN may differ in its quiet bit
  };
  std::vector<uint16_t> all(65536);
  for (uint32_t i = 0; i < 65536; ++i) all[i] = static_cast<uint16_t>(i);
  int failures = 0;
  for (const Kernels& k : kBothPaths) {
    for (uint16_t b : b_values) {
      const std::vector<uint16_t> other(all.size(), b);
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct}) {
        const std::vector<uint16_t> got = Reduced(all, other, DataType::kFloat16, op, k);
        for (uint32_t i = 0; i < 65536; ++i) {
          const float x = HalfToFloat(all[i]);
          const float y = HalfToFloat(b);
          float r = x + y;
          if (op == ReduceOp::kMin) r = (x < y || std::isnan(x)) ? x : y;
          if (op == ReduceOp::kMax) r = (x > y || std::isnan(x)) ? x : y;
          if (op == ReduceOp::kProduct) r = x * y;
          const uint16_t expected = FloatToHalf(r);
          if (!same(expected, got[i]) && ++failures <= 10) {
            FAIL_CHECK(k.name << " " << ReduceOpName(op) << ": index " << i << " with b " << y << ": expected "
                              << HalfToFloat(expected) << " (bits " << expected << "), got " << HalfToFloat(got[i])
                              << " (bits " << got[i] << ")");
          }
        }
      }
    }
    for (double factor : {0.5, 1.0 / 3.0, 3.0, 1e-3, 1e5, -1.0}) {
      const std::vector<uint16_t> got = Scaled(all, DataType::kFloat16, factor, k);
      for (uint32_t i = 0; i < 65536; ++i) {
        const uint16_t expected = FloatToHalf(HalfToFloat(all[i]) * static_cast<float>(factor));
        if (!same(expected, got[i]) && ++failures <= 10) {
          FAIL_CHECK(k.name << " ScaleCopy x" << factor << ": index " << i << ": expected " << HalfToFloat(expected)
                            << ", got " << HalfToFloat(got[i]));
        }
      }
    }
  }
  CHECK(failures == 0);
}

#if defined(__x86_64__) || defined(__i386__)
// PyTorch's set_flush_denormal(True) turns on flush-to-zero and
// denormals-are-zero for the whole thread. float16 subnormals must still
// survive a round trip through float, on both kernel paths.
TEST_CASE("float16 kernels are exact with flush-to-zero and denormals-are-zero on", "[kernels]") {
  constexpr unsigned kFtzDaz = 0x8040;  // MXCSR bits 15 (FTZ) and 6 (DAZ)
  const unsigned saved = _mm_getcsr();
  _mm_setcsr(saved | kFtzDaz);
  std::vector<uint16_t> all(65536);
  for (uint32_t i = 0; i < 65536; ++i) all[i] = static_cast<uint16_t>(i);
  std::vector<std::string> failures;
  for (const Kernels& k : kBothPaths) {
    // max(a, a) == a: decode, compare, encode.
    const std::vector<uint16_t> got = Reduced(all, all, DataType::kFloat16, ReduceOp::kMax, k);
    for (uint32_t i = 0; i < 65536; ++i) {
      const bool nan = (i & 0x7C00) == 0x7C00 && (i & 0x3FF) != 0;
      const bool ok = nan ? std::isnan(HalfToFloat(got[i])) : got[i] == all[i];
      if (!ok && failures.size() < 10) {
        failures.push_back(std::string(k.name) + ": index " + std::to_string(i) + ": expected bits " +
                           std::to_string(i) + ", got " + std::to_string(got[i]));
      }
    }
  }
  // 2^-24 * 2^-23 underflows to zero; 2^-14 * 0.5 is the subnormal 2^-15.
  const std::vector<uint16_t> product =
      Reduced<uint16_t>(Tile({0x0001, 0x0400}), Tile({0x0002, 0x3800}), DataType::kFloat16, ReduceOp::kProduct);
  _mm_setcsr(saved);
  for (const std::string& failure : failures) FAIL_CHECK(failure);
  CheckHalfElements("product under FTZ/DAZ", Tile({0x0000, 0x0200}), product, HalfToFloat);
}
#endif

TEST_CASE("ReduceInto on bfloat16 computes in float and rounds back", "[kernels]") {
  // 256 + 1 is a tie between 256 and 258 (bfloat16 has 8 significant bits): even is 256.
  // 258 + 1 is a tie between 258 and 260: even is 260.
  const std::vector<uint16_t> a = ToBFloat16({1.5f, -2.0f, 256.0f, 258.0f, 3e38f});
  const std::vector<uint16_t> b = ToBFloat16({2.0f, 3.0f, 1.0f, 1.0f, 3e38f});
  const DataType bf16 = DataType::kBFloat16;
  for (const Kernels& k : kBothPaths) {
    CheckReduceHalf(k, "bfloat16", bf16, ReduceOp::kSum, a, b, ToBFloat16({3.5f, 1.0f, 256.0f, 260.0f, HUGE_VALF}));
    CheckReduceHalf(k, "bfloat16", bf16, ReduceOp::kMin, a, b, ToBFloat16({1.5f, -2.0f, 1.0f, 1.0f, 3e38f}));
    CheckReduceHalf(k, "bfloat16", bf16, ReduceOp::kMax, a, b, ToBFloat16({2.0f, 3.0f, 256.0f, 258.0f, 3e38f}));
    CheckReduceHalf(k, "bfloat16", bf16, ReduceOp::kProduct, a, b,
                    ToBFloat16({3.0f, -6.0f, 256.0f, 258.0f, HUGE_VALF}));
  }
}

TEST_CASE("ReduceInto on bool is logical OR / AND", "[kernels]") {
  const std::vector<uint8_t> a = {0, 0, 1, 1};
  const std::vector<uint8_t> b = {0, 1, 0, 1};
  CheckReduce<uint8_t>("bool", DataType::kBool, ReduceOp::kSum, a, b, {0, 1, 1, 1});
  CheckReduce<uint8_t>("bool", DataType::kBool, ReduceOp::kMax, a, b, {0, 1, 1, 1});
  CheckReduce<uint8_t>("bool", DataType::kBool, ReduceOp::kMin, a, b, {0, 0, 0, 1});
  CheckReduce<uint8_t>("bool", DataType::kBool, ReduceOp::kProduct, a, b, {0, 0, 0, 1});
}

TEST_CASE("ReduceInto in place (in == inout) and on long buffers", "[kernels]") {
  for (int64_t n : {1, 7, 64, 1001}) {
    std::vector<int64_t> ints(n), expected_ints(n);
    std::vector<float> acc(n), other(n), expected_sum(n), expected_max(n);
    for (int64_t i = 0; i < n; ++i) {
      ints[i] = i - 300;
      expected_ints[i] = 2 * (i - 300);
      acc[i] = static_cast<float>(i % 13) - 6.0f;
      other[i] = static_cast<float>(i % 7) - 3.0f;
      expected_sum[i] = acc[i] + other[i];
      expected_max[i] = std::max(acc[i], other[i]);
    }
    const std::string size = " n=" + std::to_string(n);
    ReduceInto(ints.data(), ints.data(), n, DataType::kInt64, ReduceOp::kSum);
    CheckElements("int64 Sum in place" + size, expected_ints, ints);
    CheckElements("float32 Sum" + size, expected_sum, Reduced(acc, other, DataType::kFloat32, ReduceOp::kSum));
    CheckElements("float32 Max" + size, expected_max, Reduced(acc, other, DataType::kFloat32, ReduceOp::kMax));
  }
}

}  // namespace
}  // namespace accord
