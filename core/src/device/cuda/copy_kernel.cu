#include "device/cuda/copy_kernel.h"

#include "device/cuda/cuda_check.h"

namespace accord {
namespace {

// Block b runs chunks b, b + gridDim.x, ...: the grid may be smaller than
// the number of chunks. The launch is a kernel parameter, read from the
// constant bank; the segments it points to are in device memory. One kernel
// per path, each with its own register count and so its own occupancy.
template <CopyPath P>
__global__ void __launch_bounds__(kCopyKernelThreads) CopyKernel(CopyLaunch launch, int64_t num_chunks) {
  for (int64_t chunk = blockIdx.x; chunk < num_chunks; chunk += gridDim.x) {
    RunCopyChunkOn<P>(launch, chunk, static_cast<int>(threadIdx.x), static_cast<int>(blockDim.x));
  }
}

using KernelFunction = void (*)(CopyLaunch, int64_t);

KernelFunction KernelOf(CopyPath path) {
  switch (path) {
    case CopyPath::kBytes: return CopyKernel<CopyPath::kBytes>;
    case CopyPath::kFloat16: return CopyKernel<CopyPath::kFloat16>;
    case CopyPath::kBFloat16: return CopyKernel<CopyPath::kBFloat16>;
    case CopyPath::kFloat32: return CopyKernel<CopyPath::kFloat32>;
    case CopyPath::kFloat64: return CopyKernel<CopyPath::kFloat64>;
    case CopyPath::kInteger: break;
  }
  return CopyKernel<CopyPath::kInteger>;
}

}  // namespace

Result<CopyKernelGrid> CopyKernelGridOf(int ordinal) {
  int multiprocessors = 0;
  ACCORD_RETURN_IF_ERROR(
      ACCORD_CUDA_CHECK(cudaDeviceGetAttribute(&multiprocessors, cudaDevAttrMultiProcessorCount, ordinal)));
  CopyKernelGrid grid{};
  for (int path = 0; path < kNumCopyPaths; ++path) {
    int per_multiprocessor = 0;
    ACCORD_RETURN_IF_ERROR(ACCORD_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &per_multiprocessor, KernelOf(static_cast<CopyPath>(path)), kCopyKernelThreads, 0)));
    const int blocks = multiprocessors * per_multiprocessor;
    grid.max_blocks[path] = blocks > 0 ? blocks : 1;
  }
  return grid;
}

Status LaunchCopyKernel(const CopyLaunch& launch, int64_t num_chunks, const CopyKernelGrid& grid, cudaStream_t stream) {
  if (num_chunks <= 0) return Status::OK();
  const CopyPath path = PathOf(launch);
  const int64_t limit = grid.max_blocks[static_cast<int>(path)] > 0 ? grid.max_blocks[static_cast<int>(path)] : 1;
  const int64_t blocks = num_chunks < limit ? num_chunks : limit;
  // A launch reports its configuration errors only through the thread's last
  // error. Every earlier call returned its own error, so clear what they left
  // behind, lest it be taken for the launch's.
  (void)cudaGetLastError();
  KernelOf(path)<<<static_cast<unsigned int>(blocks), kCopyKernelThreads, 0, stream>>>(launch, num_chunks);
  return ACCORD_CUDA_CHECK(cudaGetLastError());
}

}  // namespace accord
