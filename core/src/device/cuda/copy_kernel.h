// The batched pack/unpack kernel (device/copy_plan.h) on a CUDA stream.
//
// Declared as plain C++ so that callers compile without nvcc; only
// copy_kernel.cu is CUDA source. Any thread; the stream's own rule applies
// (one thread feeds a stream at a time).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "accord/status.h"
#include "device/copy_plan.h"

namespace accord {

// Threads of one block: the lanes that share a chunk.
inline constexpr int kCopyKernelThreads = 256;

// How many blocks of each of the kernel's paths (CopyPath) the device runs
// at once: a launch's grid is no larger (each block loops over chunks), so
// a launch of any size costs one wave of blocks.
struct CopyKernelGrid {
  int max_blocks[kNumCopyPaths];
};

// The grid limits on device `ordinal`, which must be the current device.
Result<CopyKernelGrid> CopyKernelGridOf(int ordinal);

// Enqueues one launch of the kernel of `launch`'s path that runs `num_chunks`
// chunks of `launch` (whose segments must be in device memory by the time it
// runs) on `stream`, within `grid`'s limit. Returns the launch's own error.
Status LaunchCopyKernel(const CopyLaunch& launch, int64_t num_chunks, const CopyKernelGrid& grid, cudaStream_t stream);

}  // namespace accord
