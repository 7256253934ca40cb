// C1/C2: how much CPU accord takes from the training computation beside it.
//
// The computation is a loop of n x n float matrix products (plain i-k-j
// loops the compiler vectorises). Its rate (products/s of wall time) is
// measured in three conditions:
//   base  while accord is not initialised (before the first Init, or after
//         a Shutdown);
//   C1    while accord is initialised and idle;
//   C2    while rank 0 has an allreduce pending that the other ranks submit
//         only after their own compute sample: rank 0 enqueues, computes,
//         then tells the others (raw MPI on Bench::comm) that its sample is
//         over, so its whole sample runs while the collective is waiting for
//         late ranks.
// The conditions take turns over several rounds (accord is shut down and
// initialised again between rounds), so drift on the shared machine affects
// them alike. Under `mpirun --bind-to core` the coordinator thread shares the
// core with the compute loop, so any CPU it burns shows up as a lower rate.
// Other users' load on a shared machine disturbs wall-clock rates, and not
// only by noise: the kernel's load balancer moves unpinned processes away
// from a core where our process has more runnable threads, which can make
// the loop *faster* beside accord. So each sample also does CPU accounting:
//   other_share   CPU time of the process's other threads (accord's
//                 coordinator, MPI's) / wall time; accord's own cost;
//   modelled rate products per second of the loop's own CPU time, times
//                 (1 - other_share): the rate on a core shared only with
//                 accord, with cache effects included;
//   wake-ups      voluntary context switches of the other threads per
//                 second, i.e. how often accord's coordinator slept and woke.
#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "bench.h"

namespace accord::bench {

namespace {

// Keeps the products from being optimised away.
volatile float g_sink = 0;

double CpuSeconds(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// Voluntary context switches (sleeps that ended in a wake-up) of the whole
// process and of the calling thread.
struct Switches {
  long process = 0;
  long thread = 0;
};
Switches CountSwitches() {
  rusage process{}, thread{};
  getrusage(RUSAGE_SELF, &process);
  getrusage(RUSAGE_THREAD, &thread);
  return {process.ru_nvcsw, thread.ru_nvcsw};
}

// One timed run of the loop.
struct Sample {
  double rate = 0;           // products per wall-clock second
  double other_share = 0;    // CPU time of the process's other threads / wall time
  double cpu_rate = 0;       // products per second of this thread's CPU time
  double other_wakeups = 0;  // voluntary context switches of the other threads, per second
};

class MatrixLoop {
 public:
  explicit MatrixLoop(int n) : n_(n), a_(n * n), b_(n * n), c_(n * n) {
    for (int i = 0; i < n * n; ++i) {
      a_[i] = static_cast<float>(i % 7) / n;
      b_[i] = static_cast<float>(i % 5) / n;
    }
  }

  // Runs `products` matrix products on the calling thread and times them.
  Sample Run(int products) {
    const Switches switches_start = CountSwitches();
    const double process_start = CpuSeconds(CLOCK_PROCESS_CPUTIME_ID);
    const double thread_start = CpuSeconds(CLOCK_THREAD_CPUTIME_ID);
    const double start = Now();
    for (int p = 0; p < products; ++p) Multiply();
    const double wall = Now() - start;
    const double thread_cpu = CpuSeconds(CLOCK_THREAD_CPUTIME_ID) - thread_start;
    const double process_cpu = CpuSeconds(CLOCK_PROCESS_CPUTIME_ID) - process_start;
    const Switches switches_end = CountSwitches();
    Sample sample;
    sample.rate = products / wall;
    sample.other_share = std::max(0.0, process_cpu - thread_cpu) / wall;
    sample.cpu_rate = products / thread_cpu;
    sample.other_wakeups =
        ((switches_end.process - switches_start.process) - (switches_end.thread - switches_start.thread)) / wall;
    return sample;
  }

 private:
  // Out of line, on restrict-qualified pointers, so the inner loop keeps its
  // bound in a register. Inlined into RunCompute it reloaded the bound from
  // the stack every iteration, and its C1 rate (not its base rate) dropped
  // by 15 % in a build whose only change was code in another file, never run
  // during C; with this form C1 and base agree again in both builds.
  __attribute__((noinline)) void Multiply() {
    MultiplyInto(a_.data(), b_.data(), c_.data(), n_);
    g_sink = g_sink + c_[(n_ / 2) * n_ + n_ / 3];
  }

  static void MultiplyInto(const float* __restrict a, const float* __restrict b, float* __restrict c, int n) {
    std::fill(c, c + static_cast<size_t>(n) * n, 0.0f);
    for (int i = 0; i < n; ++i) {
      float* __restrict c_row = c + static_cast<size_t>(i) * n;
      for (int k = 0; k < n; ++k) {
        const float a_ik = a[static_cast<size_t>(i) * n + k];
        const float* __restrict b_row = b + static_cast<size_t>(k) * n;
        for (int j = 0; j < n; ++j) c_row[j] += a_ik * b_row[j];
      }
    }
  }

  int n_;
  std::vector<float> a_, b_, c_;
};

constexpr int kDoneTag = 7301;

void Record(const Sample& sample, ComputeState::Condition* condition) {
  condition->rates.push_back(sample.rate);
  condition->other_shares.push_back(sample.other_share);
  condition->other_wakeups.push_back(sample.other_wakeups);
  // What the loop would reach on a core shared only with this process's
  // other threads: its speed while on the CPU, times the share they leave.
  condition->modelled_rates.push_back(sample.cpu_rate * std::max(0.0, 1.0 - sample.other_share));
}

// One C2 sample on this rank; records rank 0's sample.
void C2Sample(Bench* b, MatrixLoop* loop, int products, int sample, ComputeState::Condition* c2) {
  float value = static_cast<float>(b->rank + 1);
  AllreduceOptions opts;
  opts.name = "c2";
  opts.op = ReduceOp::kSum;
  const TensorView view = FloatView(&value, 1);
  Handle handle;
  DieIfMpiError(MPI_Barrier(b->comm), "MPI_Barrier");
  if (b->rank == 0) {
    Result<Handle> enqueued = Allreduce(view, view, opts);
    DieIfError(enqueued.status(), "C2 accord::Allreduce enqueue");
    handle = *enqueued;
    Record(loop->Run(products), c2);
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
    std::fprintf(stderr, "rank %d: C2 sample %d: expected %g, got %g\n", b->rank, sample, expected, value);
  }
}

// Picks how many products make a sample of about compute_ms on this rank,
// from the rate over at least a tenth of a second.
int CalibrateProducts(const Options& options, MatrixLoop* loop) {
  loop->Run(3);  // warm caches and clocks
  int done = 0;
  const double start = Now();
  while (Now() - start < 0.1) {
    loop->Run(1);
    ++done;
  }
  const double rate = done / (Now() - start);
  const int products = static_cast<int>(rate * options.compute_ms / 1e3);
  return products > 0 ? products : 1;
}

// Records compute_samples samples of the plain loop; with a communicator
// the ranks start each sample together.
void PlainSamples(const Bench& b, MatrixLoop* loop, int products, ComputeState::Condition* condition) {
  for (int s = 0; s < b.options.compute_samples; ++s) {
    if (b.comm != MPI_COMM_NULL) DieIfMpiError(MPI_Barrier(b.comm), "MPI_Barrier");
    Record(loop->Run(products), condition);
  }
}

}  // namespace

void RunCompute(Bench* b, ComputeState* state) {
  const Options& o = b->options;
  MatrixLoop loop(o.matrix_n);
  const int products = CalibrateProducts(o, &loop);
  state->products_per_sample = products;
  for (int round = 0; round < o.compute_rounds; ++round) {
    PlainSamples(*b, &loop, products, &state->base);
    b->start_accord();
    if (round == 0 && b->rank == 0) {
      std::printf(
          "  C: %dx%d products, %d per sample (~%d ms on rank 0), "
          "%d rounds of %d samples\n",
          o.matrix_n, o.matrix_n, products, o.compute_ms, o.compute_rounds, o.compute_samples);
      std::fflush(stdout);
    }
    PlainSamples(*b, &loop, products, &state->c1);  // accord idle
    for (int s = 0; s < o.compute_samples; ++s) C2Sample(b, &loop, products, s, &state->c2);
    b->stop_accord();
  }
}

namespace {

void PrintSamples(const ComputeState& state, int per_round) {
  const std::pair<const char*, const ComputeState::Condition*> conditions[] = {
      {"base", &state.base}, {"C1", &state.c1}, {"C2", &state.c2}};
  for (const auto& [name, condition] : conditions) {
    std::printf("%-4s products/s:", name);
    for (size_t i = 0; i < condition->rates.size(); ++i) {
      std::printf("%s%.0f", i % per_round == 0 ? " | " : " ", condition->rates[i]);
    }
    std::printf("\n");
  }
}

}  // namespace

void ReportCompute(Bench* b, const ComputeState& state) {
  if (b->rank != 0) return;
  const int per_round = b->options.compute_samples;
  if (b->options.verbose != 0) PrintSamples(state, per_round);
  const double base = Median(state.base.rates);
  // The C0 rows are not accord: the loop alone, the reference of C1 and C2.
  b->reporter->Add(MakeFigure("C0", "products_per_s", "", base, 0));
  b->reporter->Add(MakeFigure("C0", "modelled_products_per_s", "", Median(state.base.modelled_rates), 0));
  const std::pair<const char*, const ComputeState::Condition*> conditions[] = {{"C1", &state.c1}, {"C2", &state.c2}};
  for (const auto& [id, condition] : conditions) {
    Figure figure = MakeFigure(id, "products_per_s", "base", Median(condition->rates), base);
    figure.ratio = PairedRatio(condition->rates, state.base.rates, per_round);
    b->reporter->AddRatio(figure, 0.95);
  }
  // The same ratios from CPU accounting, which other users' load on the
  // machine disturbs far less than wall-clock rates (docs/benchmarks.md).
  const double modelled_base = Median(state.base.modelled_rates);
  for (const auto& [id, condition] : conditions) {
    Figure figure = MakeFigure(id, "modelled_products_per_s", "base", Median(condition->modelled_rates), modelled_base);
    figure.ratio = PairedRatio(condition->modelled_rates, state.base.modelled_rates, per_round);
    b->reporter->AddRatio(figure, 0.95);
  }
  // Percent of the wall time that threads other than the compute thread
  // (accord's coordinator, MPI's progress threads) spent on a CPU.
  b->reporter->Add(MakeFigure("C0", "other_threads_cpu_pct", "", 100 * Median(state.base.other_shares), 0));
  for (const auto& [id, condition] : conditions) {
    b->reporter->Add(MakeFigure(id, "other_threads_cpu_pct", "", 100 * Median(condition->other_shares), 0));
  }
  // How often those threads woke up: each wake-up on the compute thread's
  // core costs it a context switch and some cache, beyond the CPU time above.
  b->reporter->Add(MakeFigure("C0", "other_threads_wakeups_per_s", "", Median(state.base.other_wakeups), 0));
  for (const auto& [id, condition] : conditions) {
    b->reporter->Add(MakeFigure(id, "other_threads_wakeups_per_s", "", Median(condition->other_wakeups), 0));
  }
}

}  // namespace accord::bench
