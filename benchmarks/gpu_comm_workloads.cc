// G2 and G3: accord's allreduce of CUDA tensors beside the raw reference
// (RawReduce: NCCL, or MPI staged through host memory where ranks share a
// GPU) doing the same work, in rounds, on the same producer stream.
//
// Inputs are made on the producer stream (GpuBench::stream), which accord
// is told about (CollectiveOptions::stream) and on which the references
// run. Rank r contributes (r+1) times a value that differs per element and
// per op, so that every result is size*(size+1)/2 times it. Each timed op or
// step is checked element by element afterwards (untimed), and accord's
// metrics must show that it carried every tensor.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "gpu_bench.h"

namespace accord::bench {

namespace {

AllreduceOptions SumOn(const GpuBench& b, std::string name) {
  AllreduceOptions opts;
  opts.name = std::move(name);
  opts.op = ReduceOp::kSum;
  opts.stream = b.stream;
  return opts;
}

TensorView DeviceFloats(const GpuBench& b, float* data, int64_t n) {
  TensorView view = FloatView(data, n);
  view.device = Device::CUDA(b.ordinal);
  return view;
}

void SyncStream(const GpuBench& b) { ACCORD_BENCH_CUDA(cudaStreamSynchronize(b.stream)); }

// Checks that accord carried `expected` tensors since `before` (its
// metrics): a Sum at one rank leaves the data as it was even if nothing ran.
// The coordinator counts a batch just after handing it to the device, so the
// last count may land after the handles completed: wait for it a while.
void CheckCarried(GpuBench* b, const char* label, const Metrics& before, uint64_t expected) {
  uint64_t carried = 0;
  for (const double deadline = Now() + 2.0; Now() < deadline;) {
    carried = GetMetrics().tensors - before.tensors;
    if (carried >= expected) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (carried == expected) return;
  ++b->failures;
  std::fprintf(stderr, "rank %d: %s: accord's metrics count %llu tensors reduced, expected %llu\n", b->rank, label,
               static_cast<unsigned long long>(carried), static_cast<unsigned long long>(expected));
}

// ------------------------------------------------------------------- G2

constexpr int kG2Block = 100;  // timed ops per side per round
constexpr int kG2RoundWarmup = 10;

// One float on the device and its page-locked host mirror.
struct TinyBuffer {
  CudaBytes device{CudaBytes::kDevice, sizeof(float)};
  CudaBytes host{CudaBytes::kPinnedHost, sizeof(float)};
  float* data() const { return device.as<float>(); }
};

// Runs `op` on the tiny buffer `count` times. Before each op (untimed) the
// buffer is set to (rank+1)*k on the producer stream and the stream drained;
// after it the result is read back and checked. Appends each op's
// microseconds to `samples_us` (if not null).
template <typename Op>
void TimeTinyOps(GpuBench* b, const char* label, int count, TinyBuffer* buffer, std::vector<double>* samples_us,
                 Op op) {
  float* host = buffer->host.as<float>();
  for (int i = 0; i < count; ++i) {
    const float k = static_cast<float>(1 + i % 7);
    *host = (b->rank + 1) * k;
    ACCORD_BENCH_CUDA(cudaMemcpyAsync(buffer->data(), host, sizeof(float), cudaMemcpyHostToDevice, b->stream));
    SyncStream(*b);
    const double start = Now();
    op(buffer->data());
    const double stop = Now();
    ACCORD_BENCH_CUDA(cudaMemcpyAsync(host, buffer->data(), sizeof(float), cudaMemcpyDeviceToHost, b->stream));
    SyncStream(*b);
    if (*host != k * RankSum(*b) && ++b->failures <= 3) {
      std::fprintf(stderr, "rank %d: %s: expected %g, got %g\n", b->rank, label, k * RankSum(*b), *host);
    }
    if (samples_us != nullptr) samples_us->push_back((stop - start) * 1e6);
  }
}

}  // namespace

void RunG2(GpuBench* b) {
  TinyBuffer buffer;
  const AllreduceOptions opts = SumOn(*b, "g2");
  auto accord_op = [&](float* data) {
    const TensorView view = DeviceFloats(*b, data, 1);
    Result<Handle> handle = Allreduce(view, view, opts);
    DieIfError(handle.status(), "G2 accord::Allreduce enqueue");
    DieIfError(handle->Wait(), "G2 accord::Allreduce");
  };
  auto raw_op = [&](float* data) {
    DieIfError(b->raw->Sum(data, data, 1, b->stream), "G2 raw allreduce");
    SyncStream(*b);
  };

  const Metrics before = GetMetrics();
  int accord_ops = 0;
  std::vector<double> accord_us, raw_us;
  int round = 0;
  for (int done = 0; done < b->options.g2_iters; done += kG2Block, ++round) {
    const int count = std::min(kG2Block, b->options.g2_iters - done);
    const int warmup = round == 0 ? b->options.g2_warmup : kG2RoundWarmup;
    for (int side = 0; side < 2; ++side) {
      const bool accord_turn = (side + round) % 2 == 0;
      const char* label = accord_turn ? "G2 accord" : "G2 raw";
      TimeTinyOps(b, label, warmup, &buffer, nullptr, [&](float* d) { accord_turn ? accord_op(d) : raw_op(d); });
      GpuBarrier(*b);
      TimeTinyOps(b, label, count, &buffer, accord_turn ? &accord_us : &raw_us,
                  [&](float* d) { accord_turn ? accord_op(d) : raw_op(d); });
      if (accord_turn) accord_ops += warmup + count;
    }
  }
  CheckCarried(b, "G2", before, static_cast<uint64_t>(accord_ops));

  const std::string reference = std::string(b->raw->name()) + "_allreduce";
  Figure median = MakeFigure("G2", "median_us", reference, Median(accord_us), Median(raw_us));
  median.ratio = PairedRatio(accord_us, raw_us, kG2Block);
  b->reporter->Add(median);
  Figure extra = MakeFigure("G2", "extra_us", reference, PairedDifference(accord_us, raw_us, kG2Block), 0);
  b->reporter->AddUpperBound(extra, 30.0);
  b->reporter->Add(MakeFigure("G2", "p90_us", reference, Quantile(accord_us, 0.9), Quantile(raw_us, 0.9)));
}

// ------------------------------------------------------------------- G3

namespace {

// G3's tensors: `tensors` of `elems` floats, `stride` floats apart (256
// bytes between one's end and the next's start) in one input and one output
// allocation, reduced out of place so that poisoned outputs show any
// element a variant failed to write.
struct G3Data {
  int tensors;
  int64_t elems;
  int64_t stride;
  CudaBytes in;
  CudaBytes out;
  CudaBytes packed;                       // the hand-packed reference's buffer
  std::vector<float> expected;            // the whole output allocation; gaps hold the poison
  CudaBytes got;                          // the output allocation read back (page-locked)
  std::vector<AllreduceOptions> options;  // names "g3.<i>"
  std::vector<Handle> handles;

  G3Data(int n, int64_t e, int64_t s)
      : tensors(n),
        elems(e),
        stride(s),
        in(CudaBytes::kDevice, static_cast<size_t>(n * s) * sizeof(float)),
        out(CudaBytes::kDevice, static_cast<size_t>(n * s) * sizeof(float)),
        packed(CudaBytes::kDevice, static_cast<size_t>(n * e) * sizeof(float)),
        got(CudaBytes::kPinnedHost, static_cast<size_t>(n * s) * sizeof(float)) {}
  float* In(int t) const { return in.as<float>() + t * stride; }
  float* Out(int t) const { return out.as<float>() + t * stride; }
};

constexpr uint32_t kPoisonBits = 0xFFFFFFFFu;  // a NaN: cudaMemset to 0xFF

float ValueOf(int t, int64_t i) { return static_cast<float>(1 + (t * 131 + i) % 61); }

// Fills the inputs and the expected outputs.
void PrepareG3(const GpuBench& b, G3Data* d) {
  std::vector<float> input(static_cast<size_t>(d->tensors * d->stride), 0.0f);
  float poison;
  std::memcpy(&poison, &kPoisonBits, sizeof(poison));
  d->expected.assign(input.size(), poison);
  for (int t = 0; t < d->tensors; ++t) {
    for (int64_t i = 0; i < d->elems; ++i) {
      input[t * d->stride + i] = (b.rank + 1) * ValueOf(t, i);
      d->expected[t * d->stride + i] = RankSum(b) * ValueOf(t, i);
    }
  }
  ACCORD_BENCH_CUDA(cudaMemcpy(d->in.as(), input.data(), input.size() * sizeof(float), cudaMemcpyHostToDevice));
  for (int t = 0; t < d->tensors; ++t) d->options.push_back(SumOn(b, "g3." + std::to_string(t)));
  d->handles.resize(d->tensors);
}

// Reads the outputs back; counts the elements (gaps included, bit for bit)
// that differ from the expected ones, printing the first few.
int64_t CountWrongOutputs(const GpuBench& b, const char* label, G3Data* d) {
  const size_t bytes = d->expected.size() * sizeof(float);
  ACCORD_BENCH_CUDA(cudaMemcpyAsync(d->got.as(), d->out.as(), bytes, cudaMemcpyDeviceToHost, b.stream));
  SyncStream(b);
  const uint32_t* got = d->got.as<uint32_t>();
  const uint32_t* want = reinterpret_cast<const uint32_t*>(d->expected.data());
  int64_t wrong = 0;
  for (size_t k = 0; k < d->expected.size(); ++k) {
    if (got[k] == want[k] || ++wrong > 3) continue;
    std::fprintf(stderr, "rank %d: %s: tensor %lld, element %lld: expected %g, got %g\n", b.rank, label,
                 static_cast<long long>(k / d->stride), static_cast<long long>(k % d->stride), d->expected[k],
                 reinterpret_cast<const float*>(got)[k]);
  }
  return wrong;
}

void StepAccord(GpuBench* b, G3Data* d) {
  for (int t = 0; t < d->tensors; ++t) {
    Result<Handle> handle =
        Allreduce(DeviceFloats(*b, d->In(t), d->elems), DeviceFloats(*b, d->Out(t), d->elems), d->options[t]);
    DieIfError(handle.status(), "G3 accord::Allreduce enqueue");
    d->handles[t] = *handle;
  }
  for (const Handle& handle : d->handles) DieIfError(handle.Wait(), "G3 accord::Allreduce");
}

void PerTensor(GpuBench* b, G3Data* d, bool grouped) {
  if (grouped) DieIfError(b->raw->GroupStart(), "G3 group start");
  for (int t = 0; t < d->tensors; ++t) DieIfError(b->raw->Sum(d->In(t), d->Out(t), d->elems, b->stream), "G3 raw");
  if (grouped) DieIfError(b->raw->GroupEnd(), "G3 group end");
  SyncStream(*b);
}
void StepPerTensor(GpuBench* b, G3Data* d) { PerTensor(b, d, false); }
void StepPerTensorGrouped(GpuBench* b, G3Data* d) { PerTensor(b, d, true); }

// cudaMemcpyAsync of each tensor into one buffer, one allreduce, and back.
void StepHandPacked(GpuBench* b, G3Data* d) {
  const size_t bytes = static_cast<size_t>(d->elems) * sizeof(float);
  float* packed = d->packed.as<float>();
  for (int t = 0; t < d->tensors; ++t) {
    ACCORD_BENCH_CUDA(cudaMemcpyAsync(packed + t * d->elems, d->In(t), bytes, cudaMemcpyDeviceToDevice, b->stream));
  }
  DieIfError(b->raw->Sum(packed, packed, d->tensors * d->elems, b->stream), "G3 raw hand-packed");
  for (int t = 0; t < d->tensors; ++t) {
    ACCORD_BENCH_CUDA(cudaMemcpyAsync(d->Out(t), packed + t * d->elems, bytes, cudaMemcpyDeviceToDevice, b->stream));
  }
  SyncStream(*b);
}

using StepFn = void (*)(GpuBench*, G3Data*);

struct Variant {
  std::string name;  // the figure's reference name; "accord" for accord
  StepFn step;
  std::vector<double> rates;
};

// Runs `warmup` untimed then `steps` timed steps of `v`; returns steps/s
// over the timed parts. Before each step (untimed) the outputs are poisoned
// and the ranks line up; after it they are checked.
double StepsPerSecond(GpuBench* b, G3Data* d, const Variant& v) {
  const std::string label = "G3 " + v.name;
  double busy = 0;
  for (int s = -b->options.g3_warmup_steps; s < b->options.g3_steps; ++s) {
    ACCORD_BENCH_CUDA(cudaMemsetAsync(d->out.as(), 0xFF, d->out.bytes(), b->stream));
    SyncStream(*b);
    GpuBarrier(*b);
    const double start = Now();
    v.step(b, d);
    if (s >= 0) busy += Now() - start;
    if (CountWrongOutputs(*b, label.c_str(), d) != 0) ++b->failures;
  }
  return b->options.g3_steps / busy;
}

}  // namespace

// Each repetition is a round in which every variant runs once; the order
// rotates from round to round. Ratios pair accord's rate with each
// reference's within a round.
void RunG3(GpuBench* b) {
  const GpuOptions& o = b->options;
  const int64_t stride = (o.g3_elems + 63) / 64 * 64 + 64;  // 256-byte aligned, 256 bytes apart
  G3Data d(o.g3_tensors, o.g3_elems, stride);
  PrepareG3(*b, &d);

  const std::string raw = b->raw->name();
  std::vector<Variant> variants = {
      {"accord", StepAccord, {}}, {raw + "_hand_packed", StepHandPacked, {}}, {raw + "_per_tensor", StepPerTensor, {}}};
  if (b->raw->groups()) variants.push_back({raw + "_grouped", StepPerTensorGrouped, {}});

  const Metrics before = GetMetrics();
  for (int rep = 0; rep < o.g3_reps; ++rep) {
    for (size_t k = 0; k < variants.size(); ++k) {
      Variant& v = variants[(k + rep) % variants.size()];
      v.rates.push_back(StepsPerSecond(b, &d, v));
    }
  }
  const uint64_t steps = static_cast<uint64_t>(o.g3_reps) * (o.g3_warmup_steps + o.g3_steps);
  CheckCarried(b, "G3", before, steps * o.g3_tensors);
  const Metrics after = GetMetrics();

  const std::vector<double>& accord_rates = variants[0].rates;
  for (size_t k = 1; k < variants.size(); ++k) {
    Figure figure = MakeFigure("G3", "steps_per_s", variants[k].name, Median(accord_rates), Median(variants[k].rates));
    figure.ratio = PairedRatio(accord_rates, variants[k].rates, 1);
    b->reporter->Add(figure);
  }
  const uint64_t collectives = after.collectives - before.collectives;
  const double per_collective = collectives > 0 ? static_cast<double>(steps * o.g3_tensors) / collectives : 0;
  b->reporter->Add(MakeFigure("G3", "tensors_per_collective", "", per_collective, 0));
}

}  // namespace accord::bench
