// accord_bench: accord's collectives and CPU cost beside raw MPI, in one run.
//
//   mpirun -np 2 --bind-to core build/benchmarks/accord_bench [--workloads=w1,w2,w3,c] ...
//
// Order of a run (see docs/benchmarks.md for what each workload measures):
//   1. C base: the compute loop, before accord (and MPI) exist.
//   2. accord::Init(), which initialises MPI; dup MPI_COMM_WORLD for raw MPI.
//   3. C1, C2, then W1, W2, W3, each against its raw-MPI reference.
//   4. accord::Shutdown(); the compute loop again (drift check).
//   5. Print the table; exit non-zero if any rank saw a wrong value.
// Rank 0 prints every figure as an "ACCORD_BENCH {json}" line as it is
// measured, and the table at the end.
#include <unistd.h>

#include <cstdio>

#include "bench.h"

namespace {

using accord::bench::Bench;
using accord::bench::ComputeState;
using accord::bench::Options;

void PrintHeader(const Bench& b, const ComputeState& compute) {
  if (b.rank != 0) return;
  const Options& o = b.options;
  std::printf("accord_bench: np=%d, %ld online cores, MPI thread level %d\n", b.size,
              sysconf(_SC_NPROCESSORS_ONLN), accord::MpiThreadLevel());
  std::printf("  workloads:");
  for (const std::string& w : o.workloads) std::printf(" %s", w.c_str());
  std::printf("\n  W1 %d iters (+%d warm-up); W2 %d reps (+%d) per size; W3 %d x %d floats, "
              "%d reps of %d steps (+%d)\n",
              o.w1_iters, o.w1_warmup, o.w2_reps, o.w2_warmup, o.w3_tensors, o.w3_elems,
              o.w3_reps, o.w3_steps, o.w3_warmup_steps);
  if (o.Enabled("c")) {
    std::printf("  C: %dx%d products, %d per sample (~%d ms), %d samples per condition\n",
                o.matrix_n, o.matrix_n, compute.products_per_sample, o.compute_ms,
                o.compute_samples);
  }
  std::fflush(stdout);
}

void Announce(const Bench& b, const char* what) {
  if (b.rank != 0) return;
  std::printf("running %s ...\n", what);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  if (!accord::bench::ParseOptions(argc, argv, &options)) return 2;
  const bool run_compute = options.Enabled("c");

  ComputeState compute;
  if (run_compute) {
    accord::bench::CalibrateCompute(options, &compute);
    accord::bench::MeasureComputeBase(options, compute.products_per_sample, MPI_COMM_NULL,
                                      &compute.base_rates);
  }

  const accord::Status init = accord::Init();
  if (!init.ok()) {
    std::fprintf(stderr, "accord::Init failed: %s\n", init.ToString().c_str());
    return 1;
  }
  if (!accord::MpiThreadsSupported()) {
    std::fprintf(stderr, "accord_bench needs MPI_THREAD_MULTIPLE, got level %d\n",
                 accord::MpiThreadLevel());
    (void)accord::Shutdown();
    return 1;
  }

  Bench b;
  b.options = options;
  accord::bench::DieIfMpiError(MPI_Comm_dup(MPI_COMM_WORLD, &b.comm), "MPI_Comm_dup");
  MPI_Comm_rank(b.comm, &b.rank);
  MPI_Comm_size(b.comm, &b.size);
  accord::bench::Reporter reporter(b.rank, b.size);
  b.reporter = &reporter;
  PrintHeader(b, compute);

  if (run_compute) {
    Announce(b, "C1, C2");
    accord::bench::RunC1C2(&b, &compute);
  }
  if (options.Enabled("w1")) {
    Announce(b, "W1");
    accord::bench::RunW1(&b);
  }
  if (options.Enabled("w2")) {
    Announce(b, "W2");
    accord::bench::RunW2(&b);
  }
  if (options.Enabled("w3")) {
    Announce(b, "W3");
    accord::bench::RunW3(&b);
  }

  accord::bench::DieIfError(accord::Shutdown(), "accord::Shutdown");
  if (run_compute) {
    // MPI stays initialised after Shutdown, so the ranks can still line up.
    accord::bench::MeasureComputeBase(options, compute.products_per_sample, b.comm,
                                      &compute.base_rates_after);
    accord::bench::ReportCompute(&b, compute);
  }
  reporter.PrintTable();

  int failures = 0;
  MPI_Allreduce(&b.failures, &failures, 1, MPI_INT, MPI_SUM, b.comm);
  if (b.rank == 0 && failures != 0) {
    std::printf("FAILED: %d wrong results over all ranks (see stderr)\n", failures);
  }
  MPI_Comm_free(&b.comm);
  return failures == 0 ? 0 : 1;
}
