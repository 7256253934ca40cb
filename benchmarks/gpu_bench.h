// Shared pieces of gpu_bench: options, the raw reference that reduces
// device memory without accord, and the workloads (G1 in
// gpu_copy_workload.cc, G2 and G3 in gpu_comm_workloads.cc).
//
// gpu_bench measures accord's GPU data path beside raw CUDA and NCCL doing
// the same work in the same run, on this rank's GPU (local rank modulo the
// visible devices). Everything runs on the main thread. accord stays
// initialised throughout, so the references run beside an idle accord; raw
// MPI (only with more than one rank) uses a communicator of its own
// (GpuBench::comm), which accord's coordinator never touches.
//
// Timing follows docs/benchmarks.md ("GPU"): untimed warm-up, rounds in
// which accord and its references take turns, medians, ratios paired within
// rounds. Every result is checked element by element outside the timed
// region; a wrong one is counted in GpuBench::failures and makes the
// program exit 1.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backends/nccl/nccl_check.h"
#include "bench.h"
#include "device/cuda/cuda_check.h"
#include "device/device.h"

namespace accord::bench {

struct GpuOptions {
  std::vector<std::string> workloads = {"g1", "g2", "g3"};
  int g1_rounds = 30;   // timed batches per side per configuration
  int g1_batch = 50;    // launches per timed batch
  int g2_iters = 2000;  // timed ops per side
  int g2_warmup = 200;  // untimed ops per side before the first round
  int g3_tensors = 256;
  int g3_elems = 4096;      // float32 elements per tensor
  int g3_steps = 50;        // timed steps per variant per round
  int g3_reps = 5;          // rounds
  int g3_warmup_steps = 5;  // untimed steps per variant per round
};

// Parses --key=value flags; prints usage and returns false on --help or a
// bad flag.
bool ParseGpuOptions(int argc, char** argv, GpuOptions* options);

// An allreduce (Sum) of float32 device memory without accord: NCCL where
// every rank has a GPU of its own (one rank included), else MPI through
// page-locked host memory, which is what accord does when ranks share a GPU
// (docs/gpu.md). Main thread only.
class RawReduce {
 public:
  virtual ~RawReduce() = default;
  // "nccl" or "mpi_staged": the prefix of the references' names.
  virtual const char* name() const = 0;
  // Enqueues out = sum over ranks of in (n elements) on `stream`; the
  // staged form waits for the stream first and for MPI. Complete once the
  // stream has run what was enqueued.
  virtual Status Sum(const float* in, float* out, int64_t n, cudaStream_t stream) = 0;
  // Whether Sum calls between GroupStart and GroupEnd become one launch
  // (ncclGroupStart/End); the others do nothing.
  virtual bool groups() const { return false; }
  virtual Status GroupStart() { return Status::OK(); }
  virtual Status GroupEnd() { return Status::OK(); }
};

// Everything a workload needs. Made by main once accord is initialised.
struct GpuBench {
  GpuOptions options;
  MPI_Comm comm = MPI_COMM_NULL;  // raw MPI's own (used only when size > 1)
  int rank = 0;
  int size = 1;
  int ordinal = 0;                // this rank's GPU
  DeviceApi* api = nullptr;       // accord's CUDA device API
  cudaStream_t stream = nullptr;  // the producer stream: inputs are made here
  std::unique_ptr<RawReduce> raw;
  Reporter* reporter = nullptr;
  int failures = 0;  // wrong results seen on this rank
};

// The reference for this job (see RawReduce), set up on every rank;
// `pinned_floats` bounds n of the staged form's Sum.
Result<std::unique_ptr<RawReduce>> MakeRawReduce(GpuBench* b, int64_t pinned_floats);

// size(size+1)/2: what rank r contributing r+1 sums to.
inline float RankSum(const GpuBench& b) { return b.size * (b.size + 1) / 2.0f; }

// MPI over GpuBench::comm that does nothing at one rank, so that one rank
// needs no MPI_THREAD_MULTIPLE.
void GpuBarrier(const GpuBench& b);
int SumOverRanks(const GpuBench& b, int value);

// End the job (DieIfError) if a CUDA or NCCL call fails; the message
// names the call, the library's error and file:line.
#define ACCORD_BENCH_CUDA(call) ::accord::bench::DieIfError(ACCORD_CUDA_CHECK(call), "a CUDA call")
#define ACCORD_BENCH_NCCL(call) ::accord::bench::DieIfError(ACCORD_NCCL_CHECK(call), "an NCCL call")

// CUDA memory that frees itself: device memory (cudaMalloc) or page-locked
// host memory (cudaMallocHost).
class CudaBytes {
 public:
  enum Kind { kDevice, kPinnedHost };
  CudaBytes(Kind kind, size_t bytes);
  ~CudaBytes();
  CudaBytes(const CudaBytes&) = delete;
  CudaBytes& operator=(const CudaBytes&) = delete;
  template <typename T = char>
  T* as() const {
    return static_cast<T*>(data_);
  }
  size_t bytes() const { return bytes_; }

 private:
  Kind kind_;
  size_t bytes_;
  void* data_ = nullptr;
};

// A CUDA event pair for timing work on one stream.
class StreamTimer {
 public:
  StreamTimer();
  ~StreamTimer();
  StreamTimer(const StreamTimer&) = delete;
  StreamTimer& operator=(const StreamTimer&) = delete;
  void Start(cudaStream_t stream);
  // Records the end, waits for it, and returns the seconds in between.
  double Stop(cudaStream_t stream);

 private:
  cudaEvent_t start_ = nullptr;
  cudaEvent_t stop_ = nullptr;
};

// The workloads. Each records its figures through b->reporter (rank 0) and
// adds wrong results to b->failures. G1 is one GPU's work: with more than one
// rank only rank 0 runs it while the others wait.
void RunG1(GpuBench* b);
void RunG2(GpuBench* b);
void RunG3(GpuBench* b);

}  // namespace accord::bench
