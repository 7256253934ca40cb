// The batched pack/unpack kernel on a GPU (device/cuda/copy_kernel.cu, run
// through CudaStream::Launch), against the CPU path's own scaling
// (ops/collective_ops.h ScaleDivideCopy; a float16 factor rounded to float16
// first, device/copy_plan.h DeviceScale32), byte for byte: every dtype, odd
// sizes around the chunk boundaries, source and destination misaligned
// differently and alike, scale factors and averages, segments without a
// source, one launch of 3000 segments, and launches queued back to back
// whose segment tables must not overwrite one another. The bytes around
// every destination must stay as they were. A NaN on both sides counts as
// equal (the CPU path's F16C conversion quietens NaNs).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/dtype_kernels.h"
#include "common/half.h"
#include "device/copy_plan.h"
#include "device/cuda/cuda_device.h"
#include "gpu_test_util.h"
#include "ops/collective_ops.h"

namespace accord {
namespace {

using accord_test::CudaApi;
using accord_test::TestBytes;

const DataType kEveryType[] = {DataType::kUInt8,   DataType::kInt8,    DataType::kInt16,    DataType::kInt32,
                               DataType::kInt64,   DataType::kFloat16, DataType::kBFloat16, DataType::kFloat32,
                               DataType::kFloat64, DataType::kBool};

constexpr unsigned char kUntouched = 0xAB;

// One segment of a test plan: `count` elements from a source `src_shift`
// elements past a 16-byte boundary (none: zeros) to a destination
// `dst_shift` elements past one.
struct SegmentSpec {
  int64_t count;
  int src_shift;
  int dst_shift;
  bool has_source = true;
};

struct PlanSpec {
  DataType dtype;
  double factor = 1.0;
  int divisor = 1;
  std::vector<SegmentSpec> segments;
};

template <typename T>
bool NaNAt(const unsigned char* p) {
  T value;
  std::memcpy(&value, p, sizeof(value));
  return value != value;
}

bool IsNaNElement(DataType dtype, const unsigned char* p) {
  if (dtype == DataType::kFloat32) return NaNAt<float>(p);
  if (dtype == DataType::kFloat64) return NaNAt<double>(p);
  if (dtype != DataType::kFloat16 && dtype != DataType::kBFloat16) return false;
  uint16_t bits;
  std::memcpy(&bits, p, sizeof(bits));
  const float value = dtype == DataType::kFloat16 ? HalfToFloat(bits) : BFloat16ToFloat(bits);
  return value != value;
}

size_t AlignUp16(size_t n) { return (n + 15) / 16 * 16; }

// Where each segment of a spec lives in the source and destination arenas.
struct Layout {
  std::vector<size_t> src_at, dst_at;  // byte offsets
  size_t src_bytes = 0, dst_bytes = 0;
};

Layout LayOut(const PlanSpec& spec) {
  const size_t element = DataTypeSize(spec.dtype);
  Layout layout;
  for (const SegmentSpec& s : spec.segments) {
    const size_t bytes = static_cast<size_t>(s.count) * element;
    layout.src_at.push_back(layout.src_bytes + s.src_shift * element);
    layout.src_bytes = AlignUp16(layout.src_bytes + s.src_shift * element + bytes);
    // 16 bytes of gap before each destination, to catch writes out of bounds.
    layout.dst_at.push_back(layout.dst_bytes + 16 + s.dst_shift * element);
    layout.dst_bytes = AlignUp16(layout.dst_bytes + 16 + s.dst_shift * element + bytes);
  }
  layout.dst_bytes += 16;
  return layout;
}

// Runs `spec` in one launch on a GPU stream and checks every destination
// and every byte around them against the CPU path. The source arena holds
// random bytes, or `given`'s where it reaches.
void CheckOnGpu(DeviceApi& api, DeviceStream& stream, const PlanSpec& spec, std::mt19937_64& rng,
                const std::vector<unsigned char>& given = {}) {
  const size_t element = DataTypeSize(spec.dtype);
  const Layout layout = LayOut(spec);
  std::vector<unsigned char> src(layout.src_bytes + 1);
  for (unsigned char& b : src) b = static_cast<unsigned char>(spec.dtype == DataType::kBool ? rng() & 1 : rng());
  std::copy(given.begin(), given.begin() + static_cast<std::ptrdiff_t>(std::min(given.size(), src.size())),
            src.begin());
  std::vector<unsigned char> expected(layout.dst_bytes, kUntouched);
  TestBytes device_src(api, TestBytes::kDevice, src.size()), device_dst(api, TestBytes::kDevice, expected.size());
  REQUIRE(stream.Copy(device_src.get(), src.data(), src.size()).ok());
  REQUIRE(stream.Copy(device_dst.get(), expected.data(), expected.size()).ok());

  CopyPlan plan;
  plan.dtype = spec.dtype;
  plan.factor = spec.factor;
  plan.divisor = spec.divisor;
  for (size_t k = 0; k < spec.segments.size(); ++k) {
    const SegmentSpec& s = spec.segments[k];
    unsigned char* want = expected.data() + layout.dst_at[k];
    if (s.has_source) {
      if (spec.dtype == DataType::kFloat16 && !IsPlainScale(spec.dtype, spec.factor, spec.divisor)) {
        // A float16 copy takes its factor rounded to float16, as Horovod's GPU path does.
        ScaleCopy(src.data() + layout.src_at[k], want, s.count, spec.dtype,
                  DeviceScale32(spec.dtype, spec.factor / spec.divisor));
      } else {
        ScaleDivideCopy(src.data() + layout.src_at[k], want, s.count, spec.dtype, spec.factor, spec.divisor);
      }
    } else {
      std::memset(want, 0, static_cast<size_t>(s.count) * element);
    }
    plan.Add(s.has_source ? device_src.get() + layout.src_at[k] : nullptr, device_dst.get() + layout.dst_at[k],
             s.count);
  }
  REQUIRE(stream.Launch(plan).ok());
  plan = CopyPlan{};  // the launch keeps its own copy of the segments
  std::vector<unsigned char> got(expected.size());
  REQUIRE(stream.Copy(got.data(), device_dst.get(), got.size()).ok());
  REQUIRE(stream.Synchronize().ok());

  for (size_t byte = 0; byte < got.size(); ++byte) {
    if (got[byte] == expected[byte]) continue;
    // Which segment, if any, holds this byte: the last one starting at or
    // before it, if it reaches that far.
    size_t k =
        static_cast<size_t>(std::upper_bound(layout.dst_at.begin(), layout.dst_at.end(), byte) - layout.dst_at.begin());
    k = (k > 0 && byte < layout.dst_at[k - 1] + spec.segments[k - 1].count * element) ? k - 1 : layout.dst_at.size();
    if (k < layout.dst_at.size()) {
      const size_t first = layout.dst_at[k] + (byte - layout.dst_at[k]) / element * element;
      if (IsNaNElement(spec.dtype, &got[first]) && IsNaNElement(spec.dtype, &expected[first])) continue;
    }
    INFO(DataTypeName(spec.dtype) << " factor " << spec.factor << " divisor " << spec.divisor << ": byte " << byte
                                  << (k < layout.dst_at.size() ? " in segment " + std::to_string(k)
                                                               : std::string(" outside every segment"))
                                  << ", expected " << int{expected[byte]} << ", got " << int{got[byte]});
    FAIL();
  }
}

TEST_CASE("the GPU kernel matches the CPU path's scaling for every dtype, byte for byte") {
  auto api = CudaApi();
  auto stream = api->CreateStream(0).value();
  std::mt19937_64 rng(20261126);
  const struct {
    double factor;
    int divisor;
  } scales[] = {{1.0, 1}, {0.5, 1}, {1.0, 3}, {2.0, 2}, {-1.75, 1}, {3.0, 4}, {1e-3, 1}, {1e6, 7}};
  const int64_t sizes[] = {1, 3, 7, 1000, 2047, 4095, 4097, 8191, 8193, 16385, 40000};
  for (DataType dtype : kEveryType) {
    for (const auto& scale : scales) {
      if (dtype == DataType::kBool && (scale.factor != 1.0 || scale.divisor != 1)) continue;  // refused earlier
      // Source and destination misaligned differently, then alike (the
      // kernel moves 16 bytes at a time between an unaligned head and tail).
      for (const bool alike : {false, true}) {
        PlanSpec spec{dtype, scale.factor, scale.divisor, {}};
        for (size_t k = 0; k < std::size(sizes); ++k) {
          const int src_shift = static_cast<int>(k % 3);
          spec.segments.push_back({sizes[k], src_shift, alike ? src_shift : static_cast<int>((k + 1) % 5)});
        }
        CheckOnGpu(*api, *stream, spec, rng);
      }
    }
  }
}

TEST_CASE("every float16 and bfloat16 bit pattern is scaled as on the CPU path") {
  // The kernel converts float16 with the GPU's own converters, the CPU path
  // with its own code or F16C: all 65536 patterns, scaled up, down, past
  // the largest value and into the subnormals.
  auto api = CudaApi();
  auto stream = api->CreateStream(0).value();
  std::mt19937_64 rng(65536);
  std::vector<unsigned char> patterns(2 * 65536);
  for (uint32_t bits = 0; bits < 65536; ++bits) {
    const uint16_t pattern = static_cast<uint16_t>(bits);
    std::memcpy(&patterns[2 * bits], &pattern, sizeof(pattern));
  }
  for (DataType dtype : {DataType::kFloat16, DataType::kBFloat16}) {
    for (const double factor : {0.5, 3.0, -1.75, 1e-3, 1e-7, 1e5, 1.0 / 3.0}) {
      INFO(DataTypeName(dtype) << " factor " << factor);
      CheckOnGpu(*api, *stream, PlanSpec{dtype, factor, 1, {{65536, 0, 0}}}, rng, patterns);
    }
  }
}

TEST_CASE("segments without a source are filled with zeros among scaled ones") {
  auto api = CudaApi();
  auto stream = api->CreateStream(0).value();
  std::mt19937_64 rng(7);
  for (DataType dtype : kEveryType) {
    const double factor = dtype == DataType::kBool ? 1.0 : 3.0;
    PlanSpec spec{
        dtype, factor, 1, {{4099, 0, 1, false}, {5, 1, 0}, {1, 0, 3, false}, {9000, 2, 2}, {8192, 1, 1, false}}};
    CheckOnGpu(*api, *stream, spec, rng);
  }
}

TEST_CASE("one launch runs 3000 segments of varied sizes") {
  auto api = CudaApi();
  auto stream = api->CreateStream(0).value();
  std::mt19937_64 rng(3000);
  for (DataType dtype : {DataType::kFloat32, DataType::kFloat16, DataType::kInt64, DataType::kUInt8}) {
    for (double factor : {1.0, 0.125}) {
      PlanSpec spec{dtype, factor, dtype == DataType::kInt64 ? 3 : 1, {}};
      for (int k = 0; k < 3000; ++k) {
        // Mostly small tensors, some spanning several chunks, a few empty
        // (a plan skips those) and some joined ranks' zeros.
        const int64_t count = k % 97 == 0   ? 0
                              : k % 50 == 0 ? 5000 + static_cast<int64_t>(rng() % 30000)
                                            : 1 + rng() % 700;
        spec.segments.push_back({count, static_cast<int>(rng() % 4), static_cast<int>(rng() % 4), k % 13 != 5});
      }
      CheckOnGpu(*api, *stream, spec, rng);
    }
  }
}

TEST_CASE("a plan scales in place on the GPU") {
  auto api = CudaApi();
  auto stream = api->CreateStream(0).value();
  std::vector<float> host(9000);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>(i) - 4500.0f;
  TestBytes data(*api, TestBytes::kDevice, host.size() * sizeof(float));
  REQUIRE(stream->Copy(data.get(), host.data(), host.size() * sizeof(float)).ok());
  CopyPlan plan;
  plan.dtype = DataType::kFloat32;
  plan.factor = 0.25;
  plan.divisor = 2;
  plan.Add(data.get(), data.get(), static_cast<int64_t>(host.size()));
  REQUIRE(stream->Launch(plan).ok());
  std::vector<float> got(host.size());
  REQUIRE(stream->Copy(got.data(), data.get(), got.size() * sizeof(float)).ok());
  REQUIRE(stream->Synchronize().ok());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i);
    REQUIRE(got[i] == host[i] * 0.125f);
  }
}

TEST_CASE("launches queued back to back keep their own segments, as the segment table grows") {
  auto api = CudaApi();
  auto stream = api->CreateStream(0).value();
  // Launch i multiplies by i + 1, and its segment k reads a ramp from
  // element k on: element j of it becomes (i + 1) * (k + j). Every tenth
  // launch has hundreds of segments more than the one before, so that its
  // upload grows the device table while earlier kernels may still have to
  // read theirs.
  constexpr int kLaunches = 150;
  constexpr int64_t kPerSegment = 33;
  std::vector<int> segment_counts;
  size_t total = 0;
  for (int i = 0; i < kLaunches; ++i) {
    segment_counts.push_back(i % 10 == 9 ? 40 * (i + 1) : 1 + i % 5);
    total += static_cast<size_t>(segment_counts.back()) * kPerSegment;
  }
  std::vector<int32_t> ramp(kPerSegment + 40 * kLaunches);
  for (size_t j = 0; j < ramp.size(); ++j) ramp[j] = static_cast<int32_t>(j);
  TestBytes source(*api, TestBytes::kDevice, sizeof(int32_t) * ramp.size());
  TestBytes out(*api, TestBytes::kDevice, sizeof(int32_t) * total);
  REQUIRE(stream->Copy(source.get(), ramp.data(), sizeof(int32_t) * ramp.size()).ok());
  const int32_t* from = reinterpret_cast<const int32_t*>(source.get());
  int32_t* to = reinterpret_cast<int32_t*>(out.get());
  for (int i = 0; i < kLaunches; ++i) {
    CopyPlan plan;
    plan.dtype = DataType::kInt32;
    plan.factor = i + 1;
    for (int k = 0; k < segment_counts[i]; ++k, to += kPerSegment) plan.Add(from + k, to, kPerSegment);
    REQUIRE(stream->Launch(plan).ok());
  }
  std::vector<int32_t> got(total);
  REQUIRE(stream->Copy(got.data(), out.get(), sizeof(int32_t) * total).ok());
  REQUIRE(stream->Synchronize().ok());
  size_t at = 0;
  for (int i = 0; i < kLaunches; ++i) {
    for (int k = 0; k < segment_counts[i]; ++k) {
      for (int64_t j = 0; j < kPerSegment; ++j, ++at) {
        const int64_t expected = (i + 1) * (k + j);
        if (got[at] == expected) continue;
        INFO("launch " << i << " segment " << k << " element " << j << ": expected " << expected << ", got "
                       << got[at]);
        FAIL();
      }
    }
  }
}

}  // namespace
}  // namespace accord
