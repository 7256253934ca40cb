// W1-W3: accord's collectives beside raw MPI doing the same work in the same
// run, on Bench::comm. Every timed operation is checked element by element
// afterwards (untimed): rank r contributes r+1, so a Sum must give
// size*(size+1)/2 everywhere. Inputs are refilled before each timed
// operation, also untimed, so the values never grow.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bench.h"

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
  DieIfMpiError(MPI_Allreduce(MPI_IN_PLACE, data, static_cast<int>(n), MPI_FLOAT, MPI_SUM, comm),
                "MPI_Allreduce");
}

void Barrier(const Bench& b) { DieIfMpiError(MPI_Barrier(b.comm), "MPI_Barrier"); }

AllreduceOptions SumOptions(std::string name) {
  AllreduceOptions opts;
  opts.name = std::move(name);
  opts.op = ReduceOp::kSum;
  return opts;
}

// ------------------------------------------------------------------- W1

// Per-op latency of `op` on a 1-float buffer: `warmup` untimed, then `iters`
// timed one by one. Returns the samples in microseconds.
template <typename Op>
std::vector<double> TimeTinyOps(Bench* b, const char* label, int warmup, int iters, Op op) {
  float value = 0;
  const float expected = ExpectedSum(*b);
  std::vector<double> samples_us;
  samples_us.reserve(iters);
  Barrier(*b);
  for (int i = -warmup; i < iters; ++i) {
    value = static_cast<float>(b->rank + 1);
    const double start = Now();
    op(&value);
    const double stop = Now();
    if (value != expected) {
      ++b->failures;
      std::fprintf(stderr, "rank %d: %s iteration %d: expected %g, got %g\n", b->rank, label, i,
                   expected, value);
    }
    if (i >= 0) samples_us.push_back((stop - start) * 1e6);
  }
  return samples_us;
}

}  // namespace

void RunW1(Bench* b) {
  const Options& o = b->options;
  const AllreduceOptions opts = SumOptions("w1");
  const std::vector<double> accord_us = TimeTinyOps(
      b, "W1 accord", o.w1_warmup, o.w1_iters, [&](float* v) { AccordSum(v, 1, opts); });
  const std::vector<double> raw_us = TimeTinyOps(
      b, "W1 raw", o.w1_warmup, o.w1_iters, [&](float* v) { RawSum(v, 1, b->comm); });

  b->reporter->AddUpperBound(
      MakeFigure("W1", "median_us", "mpi_allreduce", Median(accord_us), Median(raw_us)), 50.0);
  b->reporter->Add(MakeFigure("W1", "p90_us", "mpi_allreduce", Quantile(accord_us, 0.9),
                              Quantile(raw_us, 0.9)));
}

// ------------------------------------------------------------------- W2

namespace {

// Median seconds of `reps` timed in-place sums of `buffer` (after `warmup`
// untimed), each preceded by a refill and a barrier, each checked after.
template <typename Op>
double TimeLargeOp(Bench* b, const char* label, std::vector<float>& buffer, Op op) {
  const Options& o = b->options;
  const int64_t n = static_cast<int64_t>(buffer.size());
  std::vector<double> samples;
  for (int i = -o.w2_warmup; i < o.w2_reps; ++i) {
    Fill(buffer.data(), n, static_cast<float>(b->rank + 1));
    Barrier(*b);
    const double start = Now();
    op(buffer.data(), n);
    const double stop = Now();
    if (i >= 0) samples.push_back(stop - start);
    if (CountMismatches(label, b->rank, buffer.data(), n, ExpectedSum(*b)) != 0) ++b->failures;
  }
  return Median(samples);
}

}  // namespace

void RunW2(Bench* b) {
  for (const int mib : b->options.w2_sizes_mib) {
    const size_t bytes = static_cast<size_t>(mib) << 20;
    std::vector<float> buffer(bytes / sizeof(float));
    const std::string name = "w2." + std::to_string(mib) + "MiB";
    const AllreduceOptions opts = SumOptions(name);

    const double accord_s = TimeLargeOp(b, ("W2 accord " + name).c_str(), buffer,
                                        [&](float* d, int64_t n) { AccordSum(d, n, opts); });
    const double raw_s = TimeLargeOp(b, ("W2 raw " + name).c_str(), buffer,
                                     [&](float* d, int64_t n) { RawSum(d, n, b->comm); });

    // Bus bandwidth as nccl-tests defines it, so that figures for different
    // rank counts compare; with one rank it is the plain algorithm bandwidth.
    const double factor = b->size > 1 ? 2.0 * (b->size - 1) / b->size : 1.0;
    const Figure figure =
        MakeFigure("W2", "busbw_GBps@" + std::to_string(mib) + "MiB", "mpi_allreduce",
                   factor * bytes / accord_s / 1e9, factor * bytes / raw_s / 1e9);
    if (mib >= 16) {
      b->reporter->AddRatio(figure, 0.95);
    } else {
      b->reporter->Add(figure);
    }
  }
}

// ------------------------------------------------------------------- W3

namespace {

// W3's tensors and the per-step variants that reduce them.
struct W3Data {
  std::vector<std::vector<float>> tensors;
  std::vector<AllreduceOptions> options;  // names "w3.<i>"
  std::vector<Handle> handles;
  std::vector<float> packed;              // for the hand-packed reference
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

void StepHandPacked(Bench* b, W3Data* d) {
  const size_t bytes = b->options.w3_elems * sizeof(float);
  char* packed = reinterpret_cast<char*>(d->packed.data());
  for (size_t i = 0; i < d->tensors.size(); ++i) {
    std::memcpy(packed + i * bytes, d->tensors[i].data(), bytes);
  }
  RawSum(d->packed.data(), d->packed.size(), b->comm);
  for (size_t i = 0; i < d->tensors.size(); ++i) {
    std::memcpy(d->tensors[i].data(), packed + i * bytes, bytes);
  }
}

// Median steps/s over the repetitions of `step`. Each step refills and
// checks every tensor, untimed, and starts at a barrier.
template <typename Step>
double StepsPerSecond(Bench* b, W3Data* d, const char* label, Step step) {
  const Options& o = b->options;
  std::vector<double> rates;
  for (int rep = -1; rep < o.w3_reps; ++rep) {  // rep -1 is the warm-up
    const int steps = rep < 0 ? o.w3_warmup_steps : o.w3_steps;
    double busy = 0;
    for (int s = 0; s < steps; ++s) {
      for (std::vector<float>& t : d->tensors) Fill(t.data(), t.size(), b->rank + 1.0f);
      Barrier(*b);
      const double start = Now();
      step(b, d);
      busy += Now() - start;
      for (const std::vector<float>& t : d->tensors) {
        if (CountMismatches(label, b->rank, t.data(), t.size(), ExpectedSum(*b)) != 0) ++b->failures;
      }
    }
    if (rep >= 0) rates.push_back(steps / busy);
  }
  return Median(rates);
}

}  // namespace

void RunW3(Bench* b) {
  const Options& o = b->options;
  W3Data d;
  d.tensors.assign(o.w3_tensors, std::vector<float>(o.w3_elems));
  d.handles.resize(o.w3_tensors);
  d.packed.resize(static_cast<size_t>(o.w3_tensors) * o.w3_elems);
  for (int i = 0; i < o.w3_tensors; ++i) d.options.push_back(SumOptions("w3." + std::to_string(i)));

  const double accord_rate = StepsPerSecond(b, &d, "W3 accord", StepAccord);
  const double per_tensor_rate = StepsPerSecond(b, &d, "W3 per-tensor", StepPerTensor);
  const double packed_rate = StepsPerSecond(b, &d, "W3 hand-packed", StepHandPacked);

  b->reporter->AddRatio(MakeFigure("W3", "steps_per_s", "hand_packed", accord_rate, packed_rate),
                        0.8);
  b->reporter->Add(
      MakeFigure("W3", "steps_per_s", "per_tensor_mpi", accord_rate, per_tensor_rate));
}

}  // namespace accord::bench
