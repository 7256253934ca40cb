// G1: bandwidth of the batched pack/unpack kernel (device/copy_plan.h)
// against a plain device-to-device cudaMemcpyAsync of the same bytes.
//
// Three layouts, each packed as accord packs a fused allreduce (segments
// scattered in memory, copied to consecutive 16-byte-aligned places):
//   1x64MiB    one segment of 64 MiB
//   256x16KiB  256 segments of 16 KiB, each 256 bytes apart in the source
//   1024xodd   1024 segments of odd element counts (1 to 16383), each
//              starting 256-byte aligned in the source
// for float32 and float16, as a plain copy and with a scale factor (0.5).
//
// Per configuration, the kernel runs through accord's CUDA device API
// (DeviceStream::Launch: upload of the segments, then one launch) and, for
// the layouts of many segments, also straight (LaunchCopyKernel on segments
// uploaded once: the kernel alone, "G1k"). The reference copies the same
// number of bytes from one contiguous buffer with one cudaMemcpyAsync, the
// physical limit for moving them. GB/s count bytes read + bytes written.
//
// Before timing, each configuration's output is poisoned, packed once by
// each path and compared with what the CPU computes, bit for bit, padding
// included. Timing: CUDA events around batches of launches (G1k and G1 of
// one batch, and the reference, take turns in rounds, the first side
// alternating), the per-launch time of a batch as one sample, medians and
// paired ratios. The buffers rotate among enough copies to hold three times
// the L2 cache, so that the figures are those of device memory.
#include <algorithm>
#include <cstdio>
#include <cstring>

#include "common/half.h"
#include "device/copy_plan.h"
#include "device/cuda/copy_kernel.h"
#include "gpu_bench.h"

namespace accord::bench {

namespace {

constexpr double kScale = 0.5;
constexpr unsigned char kPoison = 0xFF;

int64_t RoundUp(int64_t n, int64_t to) { return (n + to - 1) / to * to; }

// Where the segments of one layout lie, in bytes from their buffer's start.
struct Layout {
  std::string label;
  std::vector<int64_t> counts;  // elements
  std::vector<int64_t> src_offsets;
  std::vector<int64_t> dst_offsets;
  int64_t src_bytes = 0;
  int64_t dst_bytes = 0;
  int64_t payload_bytes = 0;  // the segments' bytes, without gaps or padding

  void Add(int64_t count, int64_t element, int64_t src_gap, int64_t src_align) {
    counts.push_back(count);
    src_offsets.push_back(src_bytes);
    dst_offsets.push_back(dst_bytes);
    src_bytes += RoundUp(count * element, src_align) + src_gap;
    dst_bytes += RoundUp(count * element, 16);  // accord's fused layout (ops/device_ops.cc)
    payload_bytes += count * element;
  }
};

std::vector<Layout> MakeLayouts(DataType dtype) {
  const int64_t element = static_cast<int64_t>(DataTypeSize(dtype));
  std::vector<Layout> layouts(3);
  layouts[0].label = "1x64MiB";
  layouts[0].Add((int64_t{64} << 20) / element, element, 0, 256);
  layouts[1].label = "256x16KiB";
  for (int i = 0; i < 256; ++i) layouts[1].Add(16384 / element, element, 256, 256);
  layouts[2].label = "1024xodd";
  uint64_t state = 12345;
  for (int i = 0; i < 1024; ++i) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    layouts[2].Add(1 + 2 * static_cast<int64_t>((state >> 33) % 8192), element, 0, 256);
  }
  return layouts;
}

// Finite values in [-4, 4), none of them zero.
std::vector<char> RandomSource(const Layout& layout, DataType dtype) {
  std::vector<char> bytes(static_cast<size_t>(layout.src_bytes), 0);
  uint64_t state = 0x9E3779B97F4A7C15ULL;
  auto next = [&state] {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<float>((state >> 40) + 1) / 16777216.0f * 8.0f - 4.0f;
  };
  const bool half = dtype == DataType::kFloat16;
  for (size_t s = 0; s < layout.counts.size(); ++s) {
    char* at = bytes.data() + layout.src_offsets[s];
    for (int64_t i = 0; i < layout.counts[s]; ++i) {
      const float value = next();
      if (half) {
        const uint16_t h = FloatToHalf(value);
        std::memcpy(at + i * 2, &h, 2);
      } else {
        std::memcpy(at + i * 4, &value, 4);
      }
    }
  }
  return bytes;
}

// What the kernel must write for the source element at `src` (device/copy_plan.h's arithmetic).
void Expected(DataType dtype, bool scaled, const char* src, char* out) {
  const float scale = static_cast<float>(kScale);
  if (dtype == DataType::kFloat16) {
    uint16_t h;
    std::memcpy(&h, src, 2);
    if (scaled) h = FloatToHalf(HalfToFloat(h) * scale);
    std::memcpy(out, &h, 2);
  } else {
    float f;
    std::memcpy(&f, src, 4);
    if (scaled) f *= scale;
    std::memcpy(out, &f, 4);
  }
}

// Counts wrong elements and overwritten padding in `dst` (one buffer's
// copy from the device), printing the first few.
int64_t CountWrong(const GpuBench& b, const std::string& label, const Layout& layout, DataType dtype, bool scaled,
                   const std::vector<char>& src, const std::vector<char>& dst) {
  const int64_t element = static_cast<int64_t>(DataTypeSize(dtype));
  int64_t wrong = 0;
  auto report = [&](size_t s, int64_t i, const char* what, uint32_t expected, uint32_t got) {
    if (++wrong > 3) return;
    std::fprintf(stderr, "rank %d: G1 %s: segment %zu, element %lld: %s: expected 0x%08x, got 0x%08x\n", b.rank,
                 label.c_str(), s, static_cast<long long>(i), what, expected, got);
  };
  for (size_t s = 0; s < layout.counts.size(); ++s) {
    const char* in = src.data() + layout.src_offsets[s];
    const char* out = dst.data() + layout.dst_offsets[s];
    for (int64_t i = 0; i < layout.counts[s]; ++i) {
      uint32_t want = 0, got = 0;
      Expected(dtype, scaled, in + i * element, reinterpret_cast<char*>(&want));
      std::memcpy(&got, out + i * element, static_cast<size_t>(element));
      if (want != got) report(s, i, "value", want, got);
    }
    const int64_t end = s + 1 < layout.counts.size() ? layout.dst_offsets[s + 1] : layout.dst_bytes;
    for (int64_t at = layout.dst_offsets[s] + layout.counts[s] * element; at < end; ++at) {
      const unsigned char got = static_cast<unsigned char>(dst[static_cast<size_t>(at)]);
      if (got != kPoison) report(s, at, "padding byte", kPoison, got);
    }
  }
  return wrong;
}

// One configuration's buffers: `sets` copies of the source and destination,
// the plans that pack each, and each plan's segments on the device.
struct Buffers {
  int sets = 1;
  std::unique_ptr<CudaBytes> src;
  std::unique_ptr<CudaBytes> dst;
  std::vector<CopyPlan> plans;
  std::vector<std::unique_ptr<CudaBytes>> device_segments;

  char* Src(const Layout& l, int set) const { return src->as() + static_cast<int64_t>(set) * l.src_bytes; }
  char* Dst(const Layout& l, int set) const { return dst->as() + static_cast<int64_t>(set) * l.dst_bytes; }
};

Buffers MakeBuffers(const Layout& layout, DataType dtype, bool scaled, const std::vector<char>& source, int l2_bytes) {
  Buffers buffers;
  const int64_t footprint = layout.src_bytes + layout.dst_bytes;
  buffers.sets = static_cast<int>(std::clamp<int64_t>((3 * int64_t{l2_bytes} + footprint - 1) / footprint, 1, 64));
  buffers.src = std::make_unique<CudaBytes>(CudaBytes::kDevice, static_cast<size_t>(layout.src_bytes * buffers.sets));
  buffers.dst = std::make_unique<CudaBytes>(CudaBytes::kDevice, static_cast<size_t>(layout.dst_bytes * buffers.sets));
  for (int set = 0; set < buffers.sets; ++set) {
    ACCORD_BENCH_CUDA(cudaMemcpy(buffers.Src(layout, set), source.data(), source.size(), cudaMemcpyHostToDevice));
    CopyPlan plan;
    plan.dtype = dtype;
    plan.factor = scaled ? kScale : 1.0;
    for (size_t s = 0; s < layout.counts.size(); ++s) {
      plan.Add(buffers.Src(layout, set) + layout.src_offsets[s], buffers.Dst(layout, set) + layout.dst_offsets[s],
               layout.counts[s]);
    }
    const size_t table = plan.segments.size() * sizeof(CopySegment);
    buffers.device_segments.push_back(std::make_unique<CudaBytes>(CudaBytes::kDevice, table));
    ACCORD_BENCH_CUDA(
        cudaMemcpy(buffers.device_segments.back()->as(), plan.segments.data(), table, cudaMemcpyHostToDevice));
    buffers.plans.push_back(std::move(plan));
  }
  return buffers;
}

// The three ways of moving one set's bytes.
struct Movers {
  const Layout& layout;
  Buffers& buffers;
  DeviceStream& stream;
  const CopyKernelGrid& grid;

  cudaStream_t native() const { return static_cast<cudaStream_t>(stream.native()); }
  void Memcpy(int set) const {
    ACCORD_BENCH_CUDA(cudaMemcpyAsync(buffers.Dst(layout, set), buffers.Src(layout, set),
                                      static_cast<size_t>(layout.payload_bytes), cudaMemcpyDeviceToDevice, native()));
  }
  void Launch(int set) const { DieIfError(stream.Launch(buffers.plans[set]), "DeviceStream::Launch"); }
  void KernelOnly(int set) const {
    const CopyPlan& plan = buffers.plans[set];
    const CopyLaunch launch = MakeCopyLaunch(plan, buffers.device_segments[set]->as<CopySegment>());
    DieIfError(LaunchCopyKernel(launch, plan.num_chunks, grid, native()), "LaunchCopyKernel");
  }
};

// Poisons set 0's destination, runs `move` on it and checks the result.
template <typename Move>
void CheckOnce(GpuBench* b, const std::string& label, const Movers& m, DataType dtype, bool scaled,
               const std::vector<char>& source, Move move) {
  ACCORD_BENCH_CUDA(cudaMemsetAsync(m.buffers.Dst(m.layout, 0), kPoison, m.layout.dst_bytes, m.native()));
  move(0);
  DieIfError(m.stream.Synchronize(), "DeviceStream::Synchronize");
  std::vector<char> dst(static_cast<size_t>(m.layout.dst_bytes));
  ACCORD_BENCH_CUDA(cudaMemcpy(dst.data(), m.buffers.Dst(m.layout, 0), dst.size(), cudaMemcpyDeviceToHost));
  if (CountWrong(*b, label, m.layout, dtype, scaled, source, dst) != 0) ++b->failures;
}

// Seconds per launch of one batch of `move`, cycling through the sets.
template <typename Move>
double TimeBatch(const GpuBench& b, const Movers& m, StreamTimer* timer, Move move) {
  timer->Start(m.native());
  for (int k = 0; k < b.options.g1_batch; ++k) move(k % m.buffers.sets);
  return timer->Stop(m.native()) / b.options.g1_batch;
}

// Where G1 runs: a stream of accord's device API, the kernel's grid limits
// and the size of the L2 cache.
struct G1Device {
  DeviceStream& stream;
  CopyKernelGrid grid;
  int l2_bytes;
};

// Checks and times one layout and dtype, plain or scaled; `source` holds
// the layout's source buffer (RandomSource).
void RunConfiguration(GpuBench* b, const G1Device& device, const Layout& layout, const std::vector<char>& source,
                      DataType dtype, bool scaled) {
  const std::string label =
      layout.label + "." + (dtype == DataType::kFloat16 ? "f16" : "f32") + (scaled ? ".scale" : ".copy");
  Buffers buffers = MakeBuffers(layout, dtype, scaled, source, device.l2_bytes);
  const Movers m{layout, buffers, device.stream, device.grid};
  const bool kernel_row = layout.counts.size() > 1;
  auto memcpy_move = [&m](int set) { m.Memcpy(set); };
  auto launch_move = [&m](int set) { m.Launch(set); };
  auto kernel_move = [&m](int set) { m.KernelOnly(set); };

  CheckOnce(b, label, m, dtype, scaled, source, launch_move);
  if (kernel_row) CheckOnce(b, label + " (kernel only)", m, dtype, scaled, source, kernel_move);

  StreamTimer timer;
  TimeBatch(*b, m, &timer, memcpy_move);  // warm-up
  TimeBatch(*b, m, &timer, launch_move);
  if (kernel_row) TimeBatch(*b, m, &timer, kernel_move);
  std::vector<double> memcpy_s, launch_s, kernel_s;
  for (int round = 0; round < b->options.g1_rounds; ++round) {
    if (round % 2 == 0) memcpy_s.push_back(TimeBatch(*b, m, &timer, memcpy_move));
    launch_s.push_back(TimeBatch(*b, m, &timer, launch_move));
    if (kernel_row) kernel_s.push_back(TimeBatch(*b, m, &timer, kernel_move));
    if (round % 2 == 1) memcpy_s.push_back(TimeBatch(*b, m, &timer, memcpy_move));
  }
  DieIfError(device.stream.Synchronize(), "DeviceStream::Synchronize");

  const double bytes = 2.0 * layout.payload_bytes;  // read + written
  const std::string metric = "GBps@" + label;
  const double memcpy_gbps = bytes / Median(memcpy_s) / 1e9;
  Figure figure = MakeFigure("G1", metric, "memcpy_d2d", bytes / Median(launch_s) / 1e9, memcpy_gbps);
  figure.ratio = PairedRatio(memcpy_s, launch_s, 1);  // bandwidth: inverse of time
  b->reporter->AddRatio(figure, 0.8);
  if (kernel_row) {
    Figure kernel = MakeFigure("G1k", metric, "memcpy_d2d", bytes / Median(kernel_s) / 1e9, memcpy_gbps);
    kernel.ratio = PairedRatio(memcpy_s, kernel_s, 1);
    b->reporter->Add(kernel);
  }
}

}  // namespace

void RunG1(GpuBench* b) {
  if (b->rank == 0) {
    Result<std::unique_ptr<DeviceStream>> stream = b->api->CreateStream(b->ordinal);
    DieIfError(stream.status(), "creating a stream through accord's device API");
    const Result<CopyKernelGrid> grid = CopyKernelGridOf(b->ordinal);
    DieIfError(grid.status(), "CopyKernelGridOf");
    G1Device device{*stream.value(), grid.value(), 0};
    ACCORD_BENCH_CUDA(cudaDeviceGetAttribute(&device.l2_bytes, cudaDevAttrL2CacheSize, b->ordinal));
    for (const DataType dtype : {DataType::kFloat32, DataType::kFloat16}) {
      for (const Layout& layout : MakeLayouts(dtype)) {
        const std::vector<char> source = RandomSource(layout, dtype);
        for (const bool scaled : {false, true}) RunConfiguration(b, device, layout, source, dtype, scaled);
      }
    }
  }
  GpuBarrier(*b);
}

}  // namespace accord::bench
