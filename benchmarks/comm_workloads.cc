// W1-W3: accord's collectives and raw MPI doing the same work (on
// Bench::comm) in the same run, taking turns in rounds.
//
// Each round runs the raw-MPI reference after UseReference() (which, in the
// default --reference=alone mode, shuts accord down so that its idle
// coordinator neither slows nor helps raw MPI), then accord after UseAccord().
// Both sides get untimed warm-up operations at the start of every round.
//
// Every timed operation is checked element by element afterwards (untimed):
// rank r contributes r+1, so a Sum must give size*(size+1)/2 everywhere.
// Inputs are refilled before each timed operation, also untimed, so values
// never grow.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench.h"
#include "config/config.h"
#include "fusion/fusion_buffer.h"

namespace accord::bench {

namespace {

float ExpectedSum(const Bench& b) { return b.size * (b.size + 1) / 2.0f; }

// Allreduce-Sum in place through accord; waits for it.
void AccordSum(float* data, int64_t n, const AllreduceOptions& opts) {
  const TensorView view = FloatView(data, n);
  Result<Handle> handle = Allreduce(view, view, opts);
  DieIfError(handle.status(), "accord::Allreduce enqueue");
  DieIfError(handle->Wait(), "accord::Allreduce");
}

void RawSum(float* data, int64_t n, MPI_Comm comm) {
  DieIfMpiError(MPI_Allreduce(MPI_IN_PLACE, data, static_cast<int>(n), MPI_FLOAT, MPI_SUM, comm), "MPI_Allreduce");
}

// The window accord stages in: ACCORD_STAGING_WINDOW_BYTES, or its default
// (1 MiB) when the variable is unset or invalid.
int64_t StagingWindowBytes() {
  const Result<Config> config = Config::FromEnv();
  return config.ok() ? config->staging_window_bytes : knobs::kStagingWindowBytes.default_value;
}

// The same sum staged as accord stages it: windows of `window_bytes`
// (0: the whole buffer) copied into a huge-page buffer, reduced there and
// copied back.
void RawStagedSum(float* data, int64_t n, MPI_Comm comm, FusionBuffer* stage, int64_t window_bytes) {
  const int64_t window =
      window_bytes == 0 ? n : std::max<int64_t>(1, window_bytes / static_cast<int64_t>(sizeof(float)));
  float* buffer = static_cast<float*>(stage->Get(static_cast<size_t>(std::min(n, window)) * sizeof(float)));
  if (buffer == nullptr) {
    std::fprintf(stderr, "accord_bench: cannot map the staging buffer\n");
    std::abort();
  }
  for (int64_t done = 0; done < n; done += window) {
    const int64_t count = std::min(window, n - done);
    std::memcpy(buffer, data + done, count * sizeof(float));
    RawSum(buffer, count, comm);
    std::memcpy(data + done, buffer, count * sizeof(float));
  }
}

void Barrier(const Bench& b) { DieIfMpiError(MPI_Barrier(b.comm), "MPI_Barrier"); }

AllreduceOptions SumOptions(std::string name) {
  AllreduceOptions opts;
  opts.name = std::move(name);
  opts.op = ReduceOp::kSum;
  return opts;
}

// Splits `total` timed repetitions into rounds of at most `per_round`.
std::vector<int> RoundSizes(int total, int per_round) {
  std::vector<int> sizes;
  for (int done = 0; done < total; done += per_round) {
    sizes.push_back(std::min(per_round, total - done));
  }
  return sizes;
}

// ------------------------------------------------------------------- W1

constexpr int kW1Block = 100;  // timed ops per side per round
constexpr int kW1RoundWarmup = 10;

// Runs `op` on a 1-float buffer `count` times, checking each result, and
// appends each op's latency in microseconds to `samples_us` (if not null).
template <typename Op>
void TimeTinyOps(Bench* b, const char* label, int count, std::vector<double>* samples_us, Op op) {
  const float expected = ExpectedSum(*b);
  for (int i = 0; i < count; ++i) {
    float value = static_cast<float>(b->rank + 1);
    const double start = Now();
    op(&value);
    const double stop = Now();
    if (value != expected) {
      ++b->failures;
      std::fprintf(stderr, "rank %d: %s: expected %g, got %g\n", b->rank, label, expected, value);
    }
    if (samples_us != nullptr) samples_us->push_back((stop - start) * 1e6);
  }
}

}  // namespace

void RunW1(Bench* b) {
  const Options& o = b->options;
  const AllreduceOptions opts = SumOptions("w1");
  auto accord_op = [&](float* v) { AccordSum(v, 1, opts); };
  auto raw_op = [&](float* v) { RawSum(v, 1, b->comm); };

  std::vector<double> accord_us, raw_us;
  // Context switches of the whole process (every thread) in the timed blocks.
  long accord_switches = 0, raw_switches = 0;
  bool first = true;
  for (const int count : RoundSizes(o.w1_iters, kW1Block)) {
    const int warmup = first ? o.w1_warmup : kW1RoundWarmup;
    first = false;
    UseReference(b);
    TimeTinyOps(b, "W1 raw warm-up", warmup, nullptr, raw_op);
    Barrier(*b);
    long before = ProcessContextSwitches();
    TimeTinyOps(b, "W1 raw", count, &raw_us, raw_op);
    raw_switches += ProcessContextSwitches() - before;
    UseAccord(b);
    TimeTinyOps(b, "W1 accord warm-up", warmup, nullptr, accord_op);
    Barrier(*b);
    before = ProcessContextSwitches();
    TimeTinyOps(b, "W1 accord", count, &accord_us, accord_op);
    accord_switches += ProcessContextSwitches() - before;
  }
  // The targets of the small-message path: a median of at most 5 µs and 4x
  // raw MPI's, a p90 of at most 10 µs.
  Figure median = MakeFigure("W1", "median_us", "mpi_allreduce", Median(accord_us), Median(raw_us));
  median.ratio = PairedRatio(accord_us, raw_us, kW1Block);
  median.has_target = true;
  median.target = "accord <= 5, ratio <= 4";
  median.met = median.accord <= 5.0 && median.ratio <= 4.0;
  b->reporter->Add(median);
  b->reporter->AddUpperBound(
      MakeFigure("W1", "p90_us", "mpi_allreduce", Quantile(accord_us, 0.9), Quantile(raw_us, 0.9)), 10.0);
  const double ops = static_cast<double>(accord_us.size());
  b->reporter->Add(MakeFigure("W1", "context_switches_per_op", "mpi_allreduce", accord_switches / ops,
                              raw_switches / static_cast<double>(raw_us.size())));
}

// ------------------------------------------------------------------- W2

namespace {

constexpr int kW2PerRound = 4;  // timed ops per side per round

// Seconds of one in-place sum of `buffer` by `op`, after a refill and a
// barrier (untimed); the result is checked, also untimed.
template <typename Op>
double TimeLargeOp(Bench* b, const std::string& label, std::vector<float>& buffer, Op op) {
  const int64_t n = static_cast<int64_t>(buffer.size());
  Fill(buffer.data(), n, static_cast<float>(b->rank + 1));
  Barrier(*b);
  const double start = Now();
  op(buffer.data(), n);
  const double stop = Now();
  if (CountMismatches(label.c_str(), b->rank, buffer.data(), n, ExpectedSum(*b)) != 0) {
    ++b->failures;
  }
  return stop - start;
}

// Appends the seconds of `count` timed ops, after `warmup` untimed ones.
template <typename Op>
void TimeLargeOps(Bench* b, const std::string& label, std::vector<float>& buffer, int warmup, int count,
                  std::vector<double>* seconds, Op op) {
  for (int i = 0; i < warmup; ++i) TimeLargeOp(b, label, buffer, op);
  for (int i = 0; i < count; ++i) seconds->push_back(TimeLargeOp(b, label, buffer, op));
}

}  // namespace

void RunW2(Bench* b) {
  const Options& o = b->options;
  for (const int mib : o.w2_sizes_mib) {
    const size_t bytes = static_cast<size_t>(mib) << 20;
    std::vector<float> buffer(bytes / sizeof(float));
    const std::string name = "w2." + std::to_string(mib) + "MiB";
    const AllreduceOptions opts = SumOptions(name);
    auto accord_op = [&](float* d, int64_t n) { AccordSum(d, n, opts); };
    auto raw_op = [&](float* d, int64_t n) { RawSum(d, n, b->comm); };
    FusionBuffer stage;
    const int64_t window_bytes = StagingWindowBytes();
    auto staged_op = [&](float* d, int64_t n) { RawStagedSum(d, n, b->comm, &stage, window_bytes); };

    std::vector<double> accord_s, raw_s, staged_s;
    for (const int count : RoundSizes(o.w2_reps, kW2PerRound)) {
      UseReference(b);
      TimeLargeOps(b, "W2 raw " + name, buffer, o.w2_warmup, count, &raw_s, raw_op);
      TimeLargeOps(b, "W2 raw staged " + name, buffer, o.w2_warmup, count, &staged_s, staged_op);
      UseAccord(b);
      TimeLargeOps(b, "W2 accord " + name, buffer, o.w2_warmup, count, &accord_s, accord_op);
    }

    // Bus bandwidth as nccl-tests defines it, so that figures for different
    // rank counts compare; with one rank it is the plain algorithm bandwidth.
    const double factor = b->size > 1 ? 2.0 * (b->size - 1) / b->size : 1.0;
    Figure figure = MakeFigure("W2", "busbw_GBps@" + std::to_string(mib) + "MiB", "mpi_allreduce",
                               factor * bytes / Median(accord_s) / 1e9, factor * bytes / Median(raw_s) / 1e9);
    figure.ratio = PairedRatio(raw_s, accord_s, kW2PerRound);  // bandwidth: inverse of time
    if (mib >= 16) {
      b->reporter->AddRatio(figure, 0.95);
    } else {
      b->reporter->Add(figure);
    }
    Figure staged =
        MakeFigure("W2", figure.metric, "mpi_allreduce_staged", figure.accord, factor * bytes / Median(staged_s) / 1e9);
    staged.ratio = PairedRatio(staged_s, accord_s, kW2PerRound);
    b->reporter->Add(staged);
  }
}

// ------------------------------------------------------------------- W3

namespace {

// W3's tensors and the per-step variants that reduce them.
struct W3Data {
  std::vector<std::vector<float>> tensors;
  std::vector<AllreduceOptions> options;  // names "w3.<i>"
  std::vector<Handle> handles;
  std::vector<float> packed;  // for the hand-packed reference
  FusionBuffer packed_huge;   // the hand-packed reference on huge pages: accord's own buffer type
};

void StepAccord(Bench* b, W3Data* d) {
  const int64_t n = b->options.w3_elems;
  for (size_t i = 0; i < d->tensors.size(); ++i) {
    const TensorView view = FloatView(d->tensors[i].data(), n);
    Result<Handle> handle = Allreduce(view, view, d->options[i]);
    DieIfError(handle.status(), "W3 accord::Allreduce enqueue");
    d->handles[i] = *handle;
  }
  for (const Handle& handle : d->handles) DieIfError(handle.Wait(), "W3 accord::Allreduce");
}

void StepPerTensor(Bench* b, W3Data* d) {
  for (std::vector<float>& t : d->tensors) RawSum(t.data(), t.size(), b->comm);
}

// Packs every tensor into `packed`, reduces it with one MPI_Allreduce,
// unpacks.
void HandPack(Bench* b, W3Data* d, float* packed) {
  const size_t n = b->options.w3_elems;
  for (size_t i = 0; i < d->tensors.size(); ++i) std::memcpy(packed + i * n, d->tensors[i].data(), n * sizeof(float));
  RawSum(packed, n * d->tensors.size(), b->comm);
  for (size_t i = 0; i < d->tensors.size(); ++i) std::memcpy(d->tensors[i].data(), packed + i * n, n * sizeof(float));
}

void StepHandPacked(Bench* b, W3Data* d) { HandPack(b, d, d->packed.data()); }

// The same into memory offered for transparent huge pages, as accord's
// fusion buffer is: what accord's bookkeeping costs, all else equal.
void StepHandPackedHuge(Bench* b, W3Data* d) {
  const size_t bytes = d->packed.size() * sizeof(float);
  HandPack(b, d, static_cast<float*>(d->packed_huge.Get(bytes)));  // mapped once, by RunW3
}

using StepFn = void (*)(Bench*, W3Data*);

// Runs `warmup` untimed then `steps` timed steps; returns steps/s over the
// timed parts. Each step refills and checks every tensor, untimed, and
// starts at a barrier.
double StepsPerSecond(Bench* b, W3Data* d, const char* label, int warmup, int steps, StepFn step) {
  double busy = 0;
  for (int s = -warmup; s < steps; ++s) {
    for (std::vector<float>& t : d->tensors) Fill(t.data(), t.size(), b->rank + 1.0f);
    Barrier(*b);
    const double start = Now();
    step(b, d);
    if (s >= 0) busy += Now() - start;
    for (const std::vector<float>& t : d->tensors) {
      if (CountMismatches(label, b->rank, t.data(), t.size(), ExpectedSum(*b)) != 0) ++b->failures;
    }
  }
  return steps / busy;
}

}  // namespace

// Each repetition is a round: both references (their order alternates), then
// accord; ratios pair the rates within each round.
void RunW3(Bench* b) {
  const Options& o = b->options;
  W3Data d;
  d.tensors.assign(o.w3_tensors, std::vector<float>(o.w3_elems));
  d.handles.resize(o.w3_tensors);
  d.packed.resize(static_cast<size_t>(o.w3_tensors) * o.w3_elems);
  if (d.packed_huge.Get(d.packed.size() * sizeof(float)) == nullptr) {
    std::fprintf(stderr, "accord_bench: cannot map the huge-page buffer for W3\n");
    std::abort();
  }
  for (int i = 0; i < o.w3_tensors; ++i) d.options.push_back(SumOptions("w3." + std::to_string(i)));

  std::vector<double> accord_rates, per_tensor_rates, packed_rates, huge_rates;
  auto run = [&](const char* label, StepFn step, std::vector<double>* rates) {
    rates->push_back(StepsPerSecond(b, &d, label, o.w3_warmup_steps, o.w3_steps, step));
  };
  for (int rep = 0; rep < o.w3_reps; ++rep) {
    UseReference(b);
    if (rep % 2 == 0) {
      run("W3 per-tensor", StepPerTensor, &per_tensor_rates);
      run("W3 hand-packed", StepHandPacked, &packed_rates);
      run("W3 hand-packed, huge pages", StepHandPackedHuge, &huge_rates);
    } else {
      run("W3 hand-packed, huge pages", StepHandPackedHuge, &huge_rates);
      run("W3 hand-packed", StepHandPacked, &packed_rates);
      run("W3 per-tensor", StepPerTensor, &per_tensor_rates);
    }
    UseAccord(b);
    run("W3 accord", StepAccord, &accord_rates);
  }
  const double accord_rate = Median(accord_rates);
  Figure packed = MakeFigure("W3", "steps_per_s", "hand_packed", accord_rate, Median(packed_rates));
  packed.ratio = PairedRatio(accord_rates, packed_rates, 1);
  b->reporter->AddRatio(packed, 0.8);
  Figure huge = MakeFigure("W3", "steps_per_s", "hand_packed_huge_pages", accord_rate, Median(huge_rates));
  huge.ratio = PairedRatio(accord_rates, huge_rates, 1);
  b->reporter->Add(huge);
  Figure per_tensor = MakeFigure("W3", "steps_per_s", "per_tensor_mpi", accord_rate, Median(per_tensor_rates));
  per_tensor.ratio = PairedRatio(accord_rates, per_tensor_rates, 1);
  b->reporter->Add(per_tensor);
}

}  // namespace accord::bench
