#include "backends/cuda/copy_kernel.h"

#include "backends/cuda/cuda_check.h"

namespace accord {
namespace {

// Block b runs chunks b, b + gridDim.x, ...: the grid may be smaller than
// the number of chunks. The launch is a kernel parameter, read from the
// constant bank; the segments it points to are in device memory.
__global__ void __launch_bounds__(kCopyKernelThreads) CopyKernel(CopyLaunch launch, int64_t num_chunks) {
  for (int64_t chunk = blockIdx.x; chunk < num_chunks; chunk += gridDim.x) {
    RunCopyChunk(launch, chunk, static_cast<int>(threadIdx.x), static_cast<int>(blockDim.x));
  }
}

}  // namespace

Result<int> CopyKernelMaxBlocks(int ordinal) {
  int multiprocessors = 0;
  ACCORD_RETURN_IF_ERROR(
      ACCORD_CUDA_CHECK(cudaDeviceGetAttribute(&multiprocessors, cudaDevAttrMultiProcessorCount, ordinal)));
  int per_multiprocessor = 0;
  ACCORD_RETURN_IF_ERROR(ACCORD_CUDA_CHECK(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_multiprocessor, CopyKernel, kCopyKernelThreads, 0)));
  const int blocks = multiprocessors * per_multiprocessor;
  return blocks > 0 ? blocks : 1;
}

Status LaunchCopyKernel(const CopyLaunch& launch, int64_t num_chunks, int max_blocks, cudaStream_t stream) {
  if (num_chunks <= 0) return Status::OK();
  const int64_t limit = max_blocks > 0 ? max_blocks : 1;
  const int64_t blocks = num_chunks < limit ? num_chunks : limit;
  // A launch reports its configuration errors only through the thread's last
  // error. Every earlier call returned its own error, so clear what they left
  // behind, lest it be taken for the launch's.
  (void)cudaGetLastError();
  CopyKernel<<<static_cast<unsigned int>(blocks), kCopyKernelThreads, 0, stream>>>(launch, num_chunks);
  return ACCORD_CUDA_CHECK(cudaGetLastError());
}

}  // namespace accord
