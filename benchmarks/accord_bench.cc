// accord_bench: accord's collectives and CPU cost beside raw MPI, in one run.
//
//   mpirun -np 2 --bind-to core build/benchmarks/accord_bench [--workloads=w1,w2,w3,c] ...
//
// Order of a run (see docs/benchmarks.md for what each workload measures):
//   1. C: rounds of [compute loop alone, accord::Init(), C1, C2,
//      accord::Shutdown()]. The first Init initialises MPI; then we dup
//      MPI_COMM_WORLD for raw MPI.
//   2. W1, W2, W3, each taking turns with its raw-MPI reference, which by
//      default runs while accord is shut down (--reference=alone).
//   3. Print the table; exit non-zero if any rank saw a wrong value.
// Rank 0 prints every figure as an "ACCORD_BENCH {json}" line as it is
// measured, and the table at the end.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "bench.h"

namespace {

using accord::bench::Bench;
using accord::bench::Options;

void PrintHeader(const Bench& b) {
  if (b.rank != 0) return;
  const Options& o = b.options;
  std::printf(
      "accord_bench: np=%d, %ld online cores, load average %.2f, MPI thread level %d, "
      "reference=%s\n",
      b.size, sysconf(_SC_NPROCESSORS_ONLN), accord::bench::LoadAverage(), accord::MpiThreadLevel(),
      o.reference.c_str());
  std::printf("  workloads:");
  for (const std::string& w : o.workloads) std::printf(" %s", w.c_str());
  std::printf(
      "\n  W1 %d iters (+%d warm-up); W2 %d reps (+%d) per size; W3 %d x %d floats, "
      "%d reps of %d steps (+%d)\n",
      o.w1_iters, o.w1_warmup, o.w2_reps, o.w2_warmup, o.w3_tensors, o.w3_elems, o.w3_reps, o.w3_steps,
      o.w3_warmup_steps);
  std::fflush(stdout);
}

void Announce(const Bench& b, const char* what) {
  if (b.rank != 0) return;
  std::printf("running %s ...\n", what);
  std::fflush(stdout);
}

// Initialises accord; the first time, also creates raw MPI's communicator
// (MPI exists only once accord has initialised it) and the reporter.
void StartAccord(Bench* b, accord::bench::Reporter* reporter) {
  const accord::Status init = accord::Init();
  if (!init.ok()) {
    std::fprintf(stderr, "accord::Init failed: %s\n", init.ToString().c_str());
    std::exit(1);
  }
  if (b->comm != MPI_COMM_NULL) return;
  if (!accord::MpiThreadsSupported()) {
    std::fprintf(stderr, "accord_bench needs MPI_THREAD_MULTIPLE, got level %d\n", accord::MpiThreadLevel());
    std::exit(1);
  }
  accord::bench::DieIfMpiError(MPI_Comm_dup(MPI_COMM_WORLD, &b->comm), "MPI_Comm_dup");
  MPI_Comm_rank(b->comm, &b->rank);
  MPI_Comm_size(b->comm, &b->size);
  *reporter = accord::bench::Reporter(b->rank, b->size, b->options.reference);
  b->reporter = reporter;
  PrintHeader(*b);
}

}  // namespace

int main(int argc, char** argv) {
  Bench b;
  if (!accord::bench::ParseOptions(argc, argv, &b.options)) return 2;
  accord::bench::Reporter reporter(0, 1, b.options.reference);
  b.start_accord = [&] { StartAccord(&b, &reporter); };
  b.stop_accord = [] { accord::bench::DieIfError(accord::Shutdown(), "accord::Shutdown"); };

  accord::bench::ComputeState compute;
  if (b.options.Enabled("c")) {
    accord::bench::RunCompute(&b, &compute);
  }
  accord::bench::UseAccord(&b);
  if (b.options.Enabled("w1")) {
    Announce(b, "W1");
    accord::bench::RunW1(&b);
  }
  if (b.options.Enabled("w2")) {
    Announce(b, "W2");
    accord::bench::RunW2(&b);
  }
  if (b.options.Enabled("w3")) {
    Announce(b, "W3");
    accord::bench::RunW3(&b);
  }
  if (accord::IsInitialized()) b.stop_accord();

  if (b.options.Enabled("c")) accord::bench::ReportCompute(&b, compute);
  reporter.PrintTable();

  int failures = 0;
  MPI_Allreduce(&b.failures, &failures, 1, MPI_INT, MPI_SUM, b.comm);
  if (b.rank == 0 && failures != 0) {
    std::printf("FAILED: %d wrong results over all ranks (see stderr)\n", failures);
  }
  MPI_Comm_free(&b.comm);
  return failures == 0 ? 0 : 1;
}
