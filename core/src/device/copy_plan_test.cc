// Tests for device/copy_plan.h: the code of the batched pack/unpack kernel,
// run on the CPU. Every dtype, odd sizes and misaligned segments, zero
// segments, and scale factors, checked byte for byte against the CPU data
// path's own scaling (ScaleDivideCopy), with a float16 factor rounded to
// float16 first, as Horovod's GPU path rounds it (DeviceScale32). The kernel's lane striding is run
// with several lanes too, one after another, as CUDA threads would split it.
#include "device/copy_plan.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "common/dtype_kernels.h"
#include "ops/collective_ops.h"

namespace accord {
namespace {

const DataType kAllTypes[] = {DataType::kUInt8,   DataType::kInt8,    DataType::kInt16,    DataType::kInt32,
                              DataType::kInt64,   DataType::kFloat16, DataType::kBFloat16, DataType::kFloat32,
                              DataType::kFloat64, DataType::kBool};

// Random bytes: every bit pattern, so NaNs, infinities and subnormals of the
// floating types come up too. bool gets 0/1.
std::vector<unsigned char> RandomBytes(size_t n, DataType dtype, std::mt19937_64& rng) {
  std::vector<unsigned char> bytes(n);
  for (auto& b : bytes) b = static_cast<unsigned char>(rng());
  if (dtype == DataType::kBool) {
    for (auto& b : bytes) b &= 1;
  }
  return bytes;
}

// Runs every chunk of `plan` the way the kernel does, with `lanes` lanes
// taken one after another.
void RunPlan(const CopyPlan& plan, int lanes) {
  const CopyLaunch launch = MakeCopyLaunch(plan, plan.segments.data());
  for (int64_t chunk = 0; chunk < plan.num_chunks; ++chunk) {
    for (int lane = 0; lane < lanes; ++lane) RunCopyChunk(launch, chunk, lane, lanes);
  }
}

bool IsNaNAt(const unsigned char* p, DataType dtype) {
  switch (dtype) {
    case DataType::kFloat16: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      return (v & 0x7C00u) == 0x7C00u && (v & 0x3FFu) != 0;
    }
    case DataType::kBFloat16: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      return (v & 0x7F80u) == 0x7F80u && (v & 0x7Fu) != 0;
    }
    case DataType::kFloat32: {
      float v;
      std::memcpy(&v, p, 4);
      return std::isnan(v);
    }
    case DataType::kFloat64: {
      double v;
      std::memcpy(&v, p, 8);
      return std::isnan(v);
    }
    default: return false;
  }
}

// The first element where got differs from expected (both NaN counts as
// equal: the F16C path of ScaleCopy quietens NaNs the portable code keeps),
// or -1.
int64_t FirstDifference(const std::vector<unsigned char>& expected, const std::vector<unsigned char>& got,
                        DataType dtype) {
  const size_t element = DataTypeSize(dtype);
  for (size_t i = 0; i < expected.size(); i += element) {
    if (std::memcmp(&expected[i], &got[i], element) == 0) continue;
    if (IsNaNAt(&expected[i], dtype) && IsNaNAt(&got[i], dtype)) continue;
    return static_cast<int64_t>(i / element);
  }
  return -1;
}

struct Scale {
  double factor;
  int divisor;
};

// The CPU path's scaling (ScaleDivideCopy) with the factor a device copy
// takes: float16's rounded to float16 first (DeviceScale32).
void DeviceScaling(const void* src, void* dst, int64_t n, DataType dtype, double factor, int divisor) {
  if (dtype == DataType::kFloat16 && !IsPlainScale(dtype, factor, divisor)) {
    ScaleCopy(src, dst, n, dtype, DeviceScale32(dtype, factor / divisor));
  } else {
    ScaleDivideCopy(src, dst, n, dtype, factor, divisor);
  }
}

TEST_CASE("a plan's segments own consecutive chunks") {
  CopyPlan plan;
  plan.dtype = DataType::kFloat32;  // 4096 elements a chunk
  std::vector<float> a(1), b(4096), c(4097), d(10000);
  plan.Add(a.data(), a.data(), 1);
  plan.Add(b.data(), b.data(), 0);  // nothing added
  plan.Add(b.data(), b.data(), 4096);
  plan.Add(c.data(), c.data(), 4097);
  plan.Add(d.data(), d.data(), 10000);
  REQUIRE(plan.segments.size() == 4);
  CHECK(plan.segments[0].first_chunk == 0);
  CHECK(plan.segments[1].first_chunk == 1);
  CHECK(plan.segments[2].first_chunk == 2);
  CHECK(plan.segments[3].first_chunk == 4);
  CHECK(plan.num_chunks == 7);
  const int32_t expected[] = {0, 1, 2, 2, 3, 3, 3};
  for (int64_t chunk = 0; chunk < plan.num_chunks; ++chunk) {
    INFO("chunk " << chunk);
    CHECK(SegmentOfChunk(plan.segments.data(), 4, chunk) == expected[chunk]);
  }
  CHECK(CopyPlan{}.empty());
}

TEST_CASE("the pack/unpack kernel matches the CPU path's scaling for every dtype, byte for byte") {
  std::mt19937_64 rng(20261125);
  const Scale scales[] = {{1.0, 1}, {0.5, 1}, {1.0, 3}, {2.0, 2}, {-1.75, 1}, {3.0, 4}, {1e-3, 1}, {1e6, 7}};
  // Odd sizes around the chunk boundaries, and byte offsets that misalign
  // source and destination differently, or alike (the kernel then moves 16
  // bytes at a time between an unaligned head and tail).
  const int64_t sizes[] = {1, 3, 7, 1000, 4095, 4097, 8193, 16385};
  for (DataType dtype : kAllTypes) {
    const size_t element = DataTypeSize(dtype);
    for (const Scale& scale : scales) {
      if (dtype == DataType::kBool && (scale.factor != 1.0 || scale.divisor != 1)) continue;  // refused earlier
      for (auto [lanes, alike] : {std::pair{1, false}, std::pair{5, false}, std::pair{1, true}, std::pair{5, true}}) {
        INFO(DataTypeName(dtype) << " factor " << scale.factor << " divisor " << scale.divisor << " lanes " << lanes
                                 << (alike ? ", aligned alike" : ""));
        CopyPlan plan;
        plan.dtype = dtype;
        plan.factor = scale.factor;
        plan.divisor = scale.divisor;
        std::vector<std::vector<unsigned char>> sources, outputs, expected;
        std::vector<size_t> src_offsets, dst_offsets;
        for (size_t k = 0; k < std::size(sizes); ++k) {
          const int64_t n = sizes[k];
          const size_t src_off = element * (k % 3), dst_off = alike ? src_off : element * ((k + 1) % 5);
          sources.push_back(RandomBytes(n * element + src_off, dtype, rng));
          outputs.emplace_back(n * element + dst_off, 0xAB);
          expected.emplace_back(n * element);
          DeviceScaling(sources[k].data() + src_off, expected[k].data(), n, dtype, scale.factor, scale.divisor);
          src_offsets.push_back(src_off);
          dst_offsets.push_back(dst_off);
        }
        for (size_t k = 0; k < sources.size(); ++k) {
          plan.Add(sources[k].data() + src_offsets[k], outputs[k].data() + dst_offsets[k], sizes[k]);
        }
        RunPlan(plan, lanes);
        for (size_t k = 0; k < sources.size(); ++k) {
          std::vector<unsigned char> got(outputs[k].begin() + dst_offsets[k], outputs[k].end());
          const int64_t at = FirstDifference(expected[k], got, dtype);
          INFO("segment " << k << " of " << sizes[k] << " elements: first difference at element " << at);
          CHECK(at == -1);
          // The bytes before the destination are untouched.
          for (size_t i = 0; i < dst_offsets[k]; ++i) CHECK(outputs[k][i] == 0xAB);
        }
      }
    }
  }
}

TEST_CASE("a float16 copy's factor is rounded to float16 where float16 has it, as Horovod's GPU path does") {
  CHECK(DeviceScale32(DataType::kFloat16, 1.0 / 3) == 0.333251953125f);  // float16's nearest to 1/3
  CHECK(DeviceScale32(DataType::kFloat16, 0.5) == 0.5f);
  CHECK(DeviceScale32(DataType::kFloat16, 0.1) == 0.0999755859375f);
  CHECK(DeviceScale32(DataType::kFloat16, 1.0 / 40000) == HalfToFloat(FloatToHalf(1.0f / 40000)));  // subnormal
  // Beyond float16's range the float stays (Horovod's factor would be inf or 0).
  CHECK(DeviceScale32(DataType::kFloat16, 1e6 / 7) == static_cast<float>(1e6 / 7));
  CHECK(DeviceScale32(DataType::kFloat16, 1e-9) == 1e-9f);
  // Other types take the float nearest the factor.
  CHECK(DeviceScale32(DataType::kBFloat16, 1.0 / 3) == static_cast<float>(1.0 / 3));
  CHECK(DeviceScale32(DataType::kFloat32, 1.0 / 3) == static_cast<float>(1.0 / 3));
  // A 3-rank average of float16 by the kernel: 1.25 / 3 is 1.25 x float16(1/3) = 0.41650390625,
  // where the CPU path's float factor gives 0.416748046875.
  CopyPlan plan;
  plan.dtype = DataType::kFloat16;
  plan.divisor = 3;
  std::vector<uint16_t> values = {FloatToHalf(1.25f), FloatToHalf(2.5f), FloatToHalf(-3.0f)}, out(3), cpu(3);
  plan.Add(values.data(), out.data(), 3);
  RunPlan(plan, 1);
  CHECK(HalfToFloat(out[0]) == 0.41650390625f);
  CHECK(HalfToFloat(out[1]) == 0.8330078125f);
  CHECK(HalfToFloat(out[2]) == -1.0f);
  ScaleDivideCopy(values.data(), cpu.data(), 3, DataType::kFloat16, 1.0, 3);
  CHECK(HalfToFloat(cpu[0]) == 0.416748046875f);
}

TEST_CASE("a segment without a source is filled with zeros, whatever the scale") {
  for (DataType dtype : kAllTypes) {
    INFO(DataTypeName(dtype));
    CopyPlan plan;
    plan.dtype = dtype;
    plan.factor = dtype == DataType::kBool ? 1.0 : 3.0;
    std::vector<unsigned char> out(4099 * DataTypeSize(dtype) + 1, 0x5A);
    plan.Add(nullptr, out.data() + 1, 4099);
    RunPlan(plan, 3);
    CHECK(out[0] == 0x5A);
    bool zero = true;
    for (size_t i = 1; i < out.size(); ++i) zero = zero && out[i] == 0;
    CHECK(zero);
  }
}

TEST_CASE("a plan scales in place") {
  std::vector<float> data(9000);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>(i) - 4500.0f;
  CopyPlan plan;
  plan.dtype = DataType::kFloat32;
  plan.factor = 0.25;
  plan.divisor = 2;
  plan.Add(data.data(), data.data(), static_cast<int64_t>(data.size()));
  RunPlan(plan, 4);
  for (size_t i = 0; i < data.size(); ++i) {
    INFO("element " << i);
    CHECK(data[i] == (static_cast<float>(i) - 4500.0f) * 0.125f);
  }
}

TEST_CASE("integer averages round toward zero and saturate, as on the CPU path") {
  std::vector<int8_t> in = {-128, -7, -1, 0, 1, 7, 127};
  std::vector<int8_t> out(in.size());
  CopyPlan plan;
  plan.dtype = DataType::kInt8;
  plan.factor = 3.0;
  plan.divisor = 2;
  plan.Add(in.data(), out.data(), static_cast<int64_t>(in.size()));
  RunPlan(plan, 1);
  const std::vector<int8_t> expected = {-128, -10, -1, 0, 1, 10, 127};
  CHECK(out == expected);
}

}  // namespace
}  // namespace accord
