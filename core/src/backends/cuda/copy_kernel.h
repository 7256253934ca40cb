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

// How many blocks of the kernel the device `ordinal` runs at once: the grid
// of one launch is no larger (each block loops over chunks), so a launch of
// any size costs one wave of blocks. `ordinal` must be the current device.
Result<int> CopyKernelMaxBlocks(int ordinal);

// Enqueues one launch that runs `num_chunks` chunks of `launch` (whose
// segments must be in device memory by the time it runs) on `stream`, with
// at most `max_blocks` blocks. Returns the launch's own error, if any.
Status LaunchCopyKernel(const CopyLaunch& launch, int64_t num_chunks, int max_blocks, cudaStream_t stream);

}  // namespace accord
