// gpu_bench: accord's GPU data path beside raw CUDA and NCCL, in one run.
//
//   mpirun -np 1 build/benchmarks/gpu_bench [--workloads=g1,g2,g3] ...
//   build/benchmarks/gpu_bench ...          (the same: accord starts MPI itself)
//
// Order of a run (docs/benchmarks.md, "GPU", says what each workload measures):
//   1. Without a visible GPU (or in a build without one), say so and exit 0:
//      a machine without a GPU skips, it does not fail.
//   2. accord::Init() (it initialises MPI); pick this rank's GPU; set up the
//      raw reference (RawReduce: NCCL, or MPI staged through host memory
//      where ranks share a GPU).
//   3. G1 (pack/unpack bandwidth), G2 (latency of one tiny allreduce), G3
//      (256 small tensors a step).
//   4. The table; exit 1 if any rank saw a wrong value.
// Rank 0 prints every figure as an "ACCORD_BENCH {json}" line as it is
// measured, and the table at the end.
#include <algorithm>
#include <cstdio>
#include <cstring>

#include "device/device_factory.h"
#include "gpu_bench.h"

namespace accord::bench {

namespace {

constexpr char kUsage[] =
    "usage: mpirun -np 1 gpu_bench [--key=value ...]   (or gpu_bench alone)\n"
    "  --workloads=g1,g2,g3     which workloads run (default: all)\n"
    "  --g1-rounds=30 --g1-batch=50\n"
    "  --g2-iters=2000 --g2-warmup=200\n"
    "  --g3-tensors=256 --g3-elems=4096 --g3-steps=50 --g3-reps=5 --g3-warmup-steps=5\n"
    "Figures are printed as a table and as 'ACCORD_BENCH {json}' lines on rank 0.\n"
    "Exits 0 without running anything when no GPU is visible.\n";

bool ApplyGpuFlag(const std::string& key, const std::string& value, GpuOptions* o) {
  const std::vector<IntFlag> int_flags = {
      {"g1-rounds", &o->g1_rounds, 1}, {"g1-batch", &o->g1_batch, 1},     {"g2-iters", &o->g2_iters, 1},
      {"g2-warmup", &o->g2_warmup, 0}, {"g3-tensors", &o->g3_tensors, 1}, {"g3-elems", &o->g3_elems, 1},
      {"g3-steps", &o->g3_steps, 1},   {"g3-reps", &o->g3_reps, 1},       {"g3-warmup-steps", &o->g3_warmup_steps, 0},
  };
  if (const std::optional<bool> parsed = ApplyIntFlag(int_flags, key, value)) return *parsed;
  if (key == "workloads") return ParseWorkloads(value, {"g1", "g2", "g3"}, &o->workloads);
  return false;
}

// ------------------------------------------------------- raw references

class NcclReduce : public RawReduce {
 public:
  explicit NcclReduce(ncclComm_t comm) : comm_(comm) {}
  ~NcclReduce() override {
    const ncclResult_t rc = ncclCommDestroy(comm_);
    if (rc != ncclSuccess) std::fprintf(stderr, "gpu_bench: ncclCommDestroy: %s\n", ncclGetErrorString(rc));
  }
  const char* name() const override { return "nccl"; }
  Status Sum(const float* in, float* out, int64_t n, cudaStream_t stream) override {
    return ACCORD_NCCL_CHECK(ncclAllReduce(in, out, static_cast<size_t>(n), ncclFloat32, ncclSum, comm_, stream));
  }
  bool groups() const override { return true; }
  Status GroupStart() override { return ACCORD_NCCL_CHECK(ncclGroupStart()); }
  Status GroupEnd() override { return ACCORD_NCCL_CHECK(ncclGroupEnd()); }

 private:
  ncclComm_t comm_;
};

// Device -> page-locked host -> MPI_Allreduce in place -> device, as
// accord's staged path moves data when ranks share a GPU.
class StagedReduce : public RawReduce {
 public:
  StagedReduce(MPI_Comm comm, int64_t capacity)
      : comm_(comm), capacity_(capacity), host_(CudaBytes::kPinnedHost, capacity * sizeof(float)) {}
  const char* name() const override { return "mpi_staged"; }
  Status Sum(const float* in, float* out, int64_t n, cudaStream_t stream) override {
    if (n > capacity_) return Status::InvalidArgument("gpu_bench: staged reduce of more than its buffer");
    float* host = host_.as<float>();
    const size_t bytes = static_cast<size_t>(n) * sizeof(float);
    ACCORD_RETURN_IF_ERROR(ACCORD_CUDA_CHECK(cudaMemcpyAsync(host, in, bytes, cudaMemcpyDeviceToHost, stream)));
    ACCORD_RETURN_IF_ERROR(ACCORD_CUDA_CHECK(cudaStreamSynchronize(stream)));
    if (MPI_Allreduce(MPI_IN_PLACE, host, static_cast<int>(n), MPI_FLOAT, MPI_SUM, comm_) != MPI_SUCCESS) {
      return Status::Internal("gpu_bench: MPI_Allreduce failed");
    }
    return ACCORD_CUDA_CHECK(cudaMemcpyAsync(out, host, bytes, cudaMemcpyHostToDevice, stream));
  }

 private:
  MPI_Comm comm_;
  int64_t capacity_;
  CudaBytes host_;
};

// Whether two ranks of the job report the same GPU (PCI bus id).
bool RanksShareAGpu(const GpuBench& b) {
  if (b.size == 1) return false;
  constexpr int kIdBytes = 64;
  char mine[kIdBytes] = {};
  const Result<std::string> id = b.api->DeviceIdentity(b.ordinal);
  DieIfError(id.status(), "reading this rank's GPU identity");
  std::strncpy(mine, id->c_str(), kIdBytes - 1);
  std::vector<char> all(static_cast<size_t>(kIdBytes) * b.size);
  DieIfMpiError(MPI_Allgather(mine, kIdBytes, MPI_CHAR, all.data(), kIdBytes, MPI_CHAR, b.comm), "MPI_Allgather");
  for (int p = 0; p < b.size; ++p) {
    for (int q = p + 1; q < b.size; ++q) {
      if (std::strncmp(&all[p * kIdBytes], &all[q * kIdBytes], kIdBytes) == 0) return true;
    }
  }
  return false;
}

}  // namespace

bool ParseGpuOptions(int argc, char** argv, GpuOptions* options) {
  return ParseFlags(argc, argv, kUsage, [options](const std::string& key, const std::string& value) {
    return ApplyGpuFlag(key, value, options);
  });
}

Result<std::unique_ptr<RawReduce>> MakeRawReduce(GpuBench* b, int64_t pinned_floats) {
  if (RanksShareAGpu(*b)) return std::unique_ptr<RawReduce>(new StagedReduce(b->comm, pinned_floats));
  ncclUniqueId id{};
  if (b->rank == 0) ACCORD_RETURN_IF_ERROR(ACCORD_NCCL_CHECK(ncclGetUniqueId(&id)));
  if (b->size > 1) DieIfMpiError(MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, b->comm), "MPI_Bcast");
  ncclComm_t comm = nullptr;
  ACCORD_RETURN_IF_ERROR(ACCORD_NCCL_CHECK(ncclCommInitRank(&comm, b->size, id, b->rank)));
  return std::unique_ptr<RawReduce>(new NcclReduce(comm));
}

void GpuBarrier(const GpuBench& b) {
  if (b.size > 1) DieIfMpiError(MPI_Barrier(b.comm), "MPI_Barrier");
}

int SumOverRanks(const GpuBench& b, int value) {
  if (b.size == 1) return value;
  int sum = 0;
  DieIfMpiError(MPI_Allreduce(&value, &sum, 1, MPI_INT, MPI_SUM, b.comm), "MPI_Allreduce");
  return sum;
}

CudaBytes::CudaBytes(Kind kind, size_t bytes) : kind_(kind), bytes_(bytes) {
  if (kind == kDevice) {
    ACCORD_BENCH_CUDA(cudaMalloc(&data_, bytes));
  } else {
    ACCORD_BENCH_CUDA(cudaMallocHost(&data_, bytes));
  }
}
CudaBytes::~CudaBytes() { (void)(kind_ == kDevice ? cudaFree(data_) : cudaFreeHost(data_)); }

StreamTimer::StreamTimer() {
  ACCORD_BENCH_CUDA(cudaEventCreate(&start_));
  ACCORD_BENCH_CUDA(cudaEventCreate(&stop_));
}
StreamTimer::~StreamTimer() {
  (void)cudaEventDestroy(start_);
  (void)cudaEventDestroy(stop_);
}
void StreamTimer::Start(cudaStream_t stream) { ACCORD_BENCH_CUDA(cudaEventRecord(start_, stream)); }
double StreamTimer::Stop(cudaStream_t stream) {
  ACCORD_BENCH_CUDA(cudaEventRecord(stop_, stream));
  ACCORD_BENCH_CUDA(cudaEventSynchronize(stop_));
  float ms = 0;
  ACCORD_BENCH_CUDA(cudaEventElapsedTime(&ms, start_, stop_));
  return ms / 1e3;
}

}  // namespace accord::bench

namespace {

using accord::bench::GpuBench;

void PrintHeader(const GpuBench& b) {
  if (b.rank != 0) return;
  cudaDeviceProp prop;
  ACCORD_BENCH_CUDA(cudaGetDeviceProperties(&prop, b.ordinal));
  const accord::BuildInfo build = accord::GetBuildInfo();
  const accord::bench::GpuOptions& o = b.options;
  std::printf("gpu_bench: np=%d, GPU %d: %s, %d SMs, %.0f MiB L2, %.1f GiB; %s, %s; reference %s\n", b.size, b.ordinal,
              prop.name, prop.multiProcessorCount, prop.l2CacheSize / 1048576.0, prop.totalGlobalMem / 1073741824.0,
              build.cuda_version.c_str(), build.nccl_version.c_str(), b.raw->name());
  std::printf(
      "  G1 %d rounds of %d launches per side; G2 %d iters (+%d warm-up); G3 %d x %d floats, "
      "%d reps of %d steps (+%d)\n",
      o.g1_rounds, o.g1_batch, o.g2_iters, o.g2_warmup, o.g3_tensors, o.g3_elems, o.g3_reps, o.g3_steps,
      o.g3_warmup_steps);
  std::fflush(stdout);
}

// accord::Init and what every workload needs: the GPU, the producer
// stream, raw MPI's communicator and the raw reference.
void SetUp(GpuBench* b, accord::DeviceApi* api) {
  accord::bench::DieIfError(accord::Init(), "accord::Init");
  b->rank = accord::Rank();
  b->size = accord::Size();
  if (b->size > 1 && !accord::MpiThreadsSupported()) {
    std::fprintf(stderr, "gpu_bench needs MPI_THREAD_MULTIPLE with more than one rank, got level %d\n",
                 accord::MpiThreadLevel());
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  if (b->size > 1) accord::bench::DieIfMpiError(MPI_Comm_dup(MPI_COMM_WORLD, &b->comm), "MPI_Comm_dup");
  b->api = api;
  b->ordinal = accord::LocalRank() % api->DeviceCount();
  ACCORD_BENCH_CUDA(cudaSetDevice(b->ordinal));
  ACCORD_BENCH_CUDA(cudaStreamCreateWithFlags(&b->stream, cudaStreamNonBlocking));
  const int64_t pinned = static_cast<int64_t>(b->options.g3_tensors) * b->options.g3_elems;
  accord::Result<std::unique_ptr<accord::bench::RawReduce>> raw = accord::bench::MakeRawReduce(b, pinned);
  accord::bench::DieIfError(raw.status(), "setting up the raw reference");
  b->raw = std::move(raw).value();
}

}  // namespace

int main(int argc, char** argv) {
  GpuBench b;
  if (!accord::bench::ParseGpuOptions(argc, argv, &b.options)) return 2;
  // Before accord::Init, so that a machine without a GPU needs no MPI.
  const accord::Result<accord::DeviceApi*> api = accord::ProcessDeviceApi(false);
  if (!api.ok()) {
    const bool skip = api.status().code() == accord::StatusCode::kUnimplemented;
    std::printf("gpu_bench: %s: %s\n", skip ? "skipped" : "failed", api.status().message().c_str());
    return skip ? 0 : 1;
  }
  SetUp(&b, api.value());
  accord::bench::Reporter reporter(b.rank, b.size, "beside", "gpu_bench");
  b.reporter = &reporter;
  PrintHeader(b);

  const struct {
    const char* flag;
    const char* id;
    void (*run)(GpuBench*);
  } workloads[] = {
      {"g1", "G1", accord::bench::RunG1}, {"g2", "G2", accord::bench::RunG2}, {"g3", "G3", accord::bench::RunG3}};
  const std::vector<std::string>& chosen = b.options.workloads;
  for (const auto& w : workloads) {
    if (std::find(chosen.begin(), chosen.end(), w.flag) == chosen.end()) continue;
    if (b.rank == 0) std::printf("running %s ...\n", w.id);
    std::fflush(stdout);
    w.run(&b);
  }
  reporter.PrintTable();

  const int failures = accord::bench::SumOverRanks(b, b.failures);
  if (b.rank == 0 && failures != 0) {
    std::printf("FAILED: %d wrong results over all ranks (see stderr)\n", failures);
  }
  b.raw.reset();
  accord::bench::DieIfError(accord::Shutdown(), "accord::Shutdown");
  ACCORD_BENCH_CUDA(cudaStreamDestroy(b.stream));
  if (b.comm != MPI_COMM_NULL) MPI_Comm_free(&b.comm);
  return failures == 0 ? 0 : 1;
}
