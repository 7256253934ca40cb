// accord_op_cost: accord's own cost per operation, without references, for
// counting instructions under valgrind (docs/benchmarks.md, "What an
// operation costs").
//
//   mpirun -np 2 --bind-to core build/benchmarks/accord_op_cost --workload=w1 --ops=20000
//
// w1: `ops` synchronous in-place Sums of one float (W1's operation), each
// result checked; prints the median and p90 microseconds per operation.
// w3: `ops` steps of W3 (256 tensors of 4096 floats, names "w3.<i>", all
// submitted, then all awaited), every tensor checked; prints steps/s.
//
// The difference between two runs with different `ops` under
// `valgrind --tool=callgrind` is the instructions of that many operations,
// with start-up and shutdown subtracted out. Run rank 0 alone under valgrind
// (an MPMD command line, docs/benchmarks.md): the native peer is then always
// ahead, so rank 0 seldom spins waiting for it and the count is the
// operation's own work.
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "accord/accord.h"
#include "bench.h"

namespace {

using accord::AllreduceOptions;
using accord::Handle;
using accord::ReduceOp;
using accord::Result;
using accord::Status;
using accord::TensorView;
using accord::bench::DieIfError;
using accord::bench::Now;
using accord::bench::Quantile;

constexpr int kW3Tensors = 256;
constexpr int kW3Elems = 4096;

AllreduceOptions SumNamed(const std::string& name) {
  AllreduceOptions o;
  o.name = name;
  o.op = ReduceOp::kSum;
  return o;
}

void RunW1(int ops, int rank, int size) {
  const AllreduceOptions opts = SumNamed("w1");
  const float expected = static_cast<float>(size * (size + 1)) / 2.0f;
  std::vector<double> us;
  us.reserve(ops);
  for (int i = 0; i < ops; ++i) {
    float value = static_cast<float>(rank + 1);
    const TensorView view{&value, accord::DataType::kFloat32, {1}, accord::Device::CPU()};
    const double start = Now();
    Result<Handle> handle = accord::Allreduce(view, view, opts);
    DieIfError(handle.status(), "enqueue");
    DieIfError(handle->Wait(), "allreduce");
    us.push_back((Now() - start) * 1e6);
    if (value != expected) {
      DieIfError(Status::Internal("expected " + std::to_string(expected) + ", got " + std::to_string(value)), "w1");
    }
  }
  if (rank == 0) {
    std::printf("w1: %d ops, median %.3f us, p90 %.3f us\n", ops, Quantile(us, 0.5), Quantile(us, 0.9));
  }
}

void RunW3(int steps, int rank, int size) {
  std::vector<std::vector<float>> buffers(kW3Tensors, std::vector<float>(kW3Elems));
  std::vector<AllreduceOptions> opts;
  for (int i = 0; i < kW3Tensors; ++i) opts.push_back(SumNamed("w3." + std::to_string(i)));
  const float expected = static_cast<float>(size * (size + 1)) / 2.0f;
  std::vector<Handle> handles(kW3Tensors);
  const double start = Now();
  for (int s = 0; s < steps; ++s) {
    for (auto& b : buffers) std::fill(b.begin(), b.end(), static_cast<float>(rank + 1));
    for (int i = 0; i < kW3Tensors; ++i) {
      const TensorView view{buffers[i].data(), accord::DataType::kFloat32, {kW3Elems}, accord::Device::CPU()};
      Result<Handle> handle = accord::Allreduce(view, view, opts[i]);
      DieIfError(handle.status(), "enqueue");
      handles[i] = *handle;
    }
    for (auto& h : handles) DieIfError(h.Wait(), "allreduce");
    for (int i = 0; i < kW3Tensors; ++i) {
      if (buffers[i].front() != expected || buffers[i].back() != expected) {
        DieIfError(Status::Internal("tensor " + std::to_string(i) + " is wrong after step " + std::to_string(s)), "w3");
      }
    }
  }
  const double seconds = Now() - start;
  if (rank == 0) std::printf("w3: %d steps, %.1f steps/s\n", steps, steps / seconds);
}

}  // namespace

int main(int argc, char** argv) {
  std::string workload = "w1";
  int ops = 20000;
  for (int i = 1; i < argc; ++i) {
    const char* arg = argv[i];
    if (std::strncmp(arg, "--workload=", 11) == 0) {
      workload = arg + 11;
    } else if (std::strncmp(arg, "--ops=", 6) == 0) {
      ops = std::atoi(arg + 6);
    } else {
      std::fprintf(stderr, "usage: mpirun -np 2 accord_op_cost [--workload=w1|w3] [--ops=N]\nbad flag '%s'\n", arg);
      return 2;
    }
  }
  if ((workload != "w1" && workload != "w3") || ops < 1) {
    std::fprintf(stderr, "accord_op_cost: --workload is w1 or w3 and --ops at least 1\n");
    return 2;
  }
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  DieIfError(accord::Init(), "init");
  const int rank = accord::Rank(), size = accord::Size();
  if (workload == "w1") {
    RunW1(ops, rank, size);
  } else {
    RunW3(ops, rank, size);
  }
  DieIfError(accord::Shutdown(), "shutdown");
  MPI_Finalize();
  return 0;
}
