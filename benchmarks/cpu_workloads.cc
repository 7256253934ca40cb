// C1/C2: how much CPU accord takes from the training computation beside it.
//
// The computation is a loop of n x n float matrix products (plain i-k-j
// loops the compiler vectorises). Its rate (products/s) is measured:
//   base  while accord is not initialised (before Init, and again after
//         Shutdown as a drift check);
//   C1    while accord is initialised and idle;
//   C2    while rank 0 has an allreduce pending that the other ranks submit
//         only after their own compute sample: rank 0 enqueues, computes,
//         then tells the others (raw MPI on Bench::comm) that its sample is
//         over, so its whole sample runs while the collective is waiting for
//         late ranks.
// Under `mpirun --bind-to core` the coordinator thread shares the core with
// the compute loop, so any CPU it burns shows up as a lower rate.
#include <cstdio>
#include <vector>

#include "bench.h"

namespace accord::bench {

namespace {

// Keeps the products from being optimised away.
volatile float g_sink = 0;

class MatrixLoop {
 public:
  explicit MatrixLoop(int n) : n_(n), a_(n * n), b_(n * n), c_(n * n) {
    for (int i = 0; i < n * n; ++i) {
      a_[i] = static_cast<float>(i % 7) / n;
      b_[i] = static_cast<float>(i % 5) / n;
    }
  }

  // Runs `products` matrix products; returns the elapsed seconds.
  double Run(int products) {
    const double start = Now();
    for (int p = 0; p < products; ++p) Multiply();
    return Now() - start;
  }

 private:
  void Multiply() {
    const int n = n_;
    std::fill(c_.begin(), c_.end(), 0.0f);
    for (int i = 0; i < n; ++i) {
      float* c_row = &c_[i * n];
      for (int k = 0; k < n; ++k) {
        const float a_ik = a_[i * n + k];
        const float* b_row = &b_[k * n];
        for (int j = 0; j < n; ++j) c_row[j] += a_ik * b_row[j];
      }
    }
    g_sink = g_sink + c_[(n / 2) * n + n / 3];
  }

  int n_;
  std::vector<float> a_, b_, c_;
};

constexpr int kDoneTag = 7301;

// One C2 sample on this rank; returns rank 0's compute rate (0 elsewhere).
double C2Sample(Bench* b, MatrixLoop* loop, int products, int sample) {
  float value = static_cast<float>(b->rank + 1);
  AllreduceOptions opts;
  opts.name = "c2";
  opts.op = ReduceOp::kSum;
  const TensorView view = FloatView(&value, 1);
  double rate = 0;
  Handle handle;
  DieIfMpiError(MPI_Barrier(b->comm), "MPI_Barrier");
  if (b->rank == 0) {
    Result<Handle> enqueued = Allreduce(view, view, opts);
    DieIfError(enqueued.status(), "C2 accord::Allreduce enqueue");
    handle = *enqueued;
    rate = products / loop->Run(products);
    int token = sample;
    for (int r = 1; r < b->size; ++r) {
      DieIfMpiError(MPI_Send(&token, 1, MPI_INT, r, kDoneTag, b->comm), "MPI_Send");
    }
  } else {
    loop->Run(products);
    int token = 0;
    DieIfMpiError(MPI_Recv(&token, 1, MPI_INT, 0, kDoneTag, b->comm, MPI_STATUS_IGNORE), "MPI_Recv");
    Result<Handle> enqueued = Allreduce(view, view, opts);
    DieIfError(enqueued.status(), "C2 accord::Allreduce enqueue");
    handle = *enqueued;
  }
  DieIfError(handle.Wait(), "C2 accord::Allreduce");
  const float expected = b->size * (b->size + 1) / 2.0f;
  if (value != expected) {
    ++b->failures;
    std::fprintf(stderr, "rank %d: C2 sample %d: expected %g, got %g\n", b->rank, sample, expected,
                 value);
  }
  return rate;
}

}  // namespace

void CalibrateCompute(const Options& options, ComputeState* state) {
  MatrixLoop loop(options.matrix_n);
  loop.Run(3);  // warm caches and clocks
  const int probe = 5;
  const double per_product = loop.Run(probe) / probe;
  const int products = static_cast<int>(options.compute_ms / 1e3 / per_product);
  state->products_per_sample = products > 0 ? products : 1;
}

void MeasureComputeBase(const Options& options, int products, MPI_Comm comm,
                        std::vector<double>* rates) {
  MatrixLoop loop(options.matrix_n);
  loop.Run(1);
  for (int s = 0; s < options.compute_samples; ++s) {
    if (comm != MPI_COMM_NULL) DieIfMpiError(MPI_Barrier(comm), "MPI_Barrier");
    rates->push_back(products / loop.Run(products));
  }
}

void RunC1C2(Bench* b, ComputeState* state) {
  const int products = state->products_per_sample;
  // C1: accord is initialised and idle; the loop is the base loop.
  MeasureComputeBase(b->options, products, b->comm, &state->c1_rates);

  MatrixLoop loop(b->options.matrix_n);
  loop.Run(1);
  for (int s = 0; s < b->options.compute_samples; ++s) {
    const double rate = C2Sample(b, &loop, products, s);
    if (b->rank == 0) state->c2_rates.push_back(rate);
  }
}

void ReportCompute(Bench* b, const ComputeState& state) {
  if (b->rank != 0) return;
  const double base = Median(state.base_rates);
  // C0 rows are not accord: the loop alone, before Init and after Shutdown
  // (the second shows how much the machine drifted during the run).
  b->reporter->Add(MakeFigure("C0", "products_per_s", "", base, 0));
  if (!state.base_rates_after.empty()) {
    b->reporter->Add(MakeFigure("C0", "products_per_s_after", "base",
                                Median(state.base_rates_after), base));
  }
  b->reporter->AddRatio(MakeFigure("C1", "products_per_s", "base", Median(state.c1_rates), base),
                        0.95);
  b->reporter->AddRatio(MakeFigure("C2", "products_per_s", "base", Median(state.c2_rates), base),
                        0.95);
}

}  // namespace accord::bench
