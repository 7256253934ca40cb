// The one door to the data planes of CUDA tensors: what this build has
// (CUDA, NCCL) and which DeviceCollectives serves a process set's CUDA
// tensors, NCCL (backends/nccl/) or MPI staged through host memory
// (backends/staged/). device_selection.cc is the only file that knows
// whether NCCL was compiled in (#if ACCORD_WITH_NCCL).
//
// Threads: GetDeviceSupport from any thread; SelectDeviceCollectives from
// the coordinator, as a collective over the set (below).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "accord/status.h"
#include "backends/backend.h"
#include "backends/device_collectives.h"
#include "config/config.h"
#include "device/device.h"

namespace accord {

struct DeviceSupport {
  bool cuda_built = false;
  bool nccl_built = false;
  std::string cuda_version;  // "CUDA 13.0" (the toolkit built against), empty if not built
  std::string nccl_version;  // "NCCL 2.28.9" (the library loaded), empty if not built
};
DeviceSupport GetDeviceSupport();

// A process set, as the choice of its device data plane sees it.
struct DeviceSelection {
  ProcessSetId set_id = kGlobalProcessSet;    // for messages
  std::vector<int> ranks;                     // the set's global ranks, ascending (for messages)
  int set_rank = 0;                           // this rank within the set
  Backend* host = nullptr;                    // the set's CPU collectives: the exchanges below, and staging
  DeviceApi* api = nullptr;                   // CUDA, or the host emulation
  int ordinal = 0;                            // this rank's device
  GpuOperations mode = GpuOperations::kAuto;  // ACCORD_GPU_OPERATIONS
  double timeout_seconds = 0;                 // ACCORD_COLLECTIVE_TIMEOUT_SECONDS
};

// The set's collectives on `ordinal`. Collective over the set: every rank
// of the set calls it at the same point of the agreed order.
//   1. Every rank reports its GPU (host name and PCI bus id) to all. A rank
//      that cannot name its device still takes part, with the reason, so
//      nobody waits for it.
//   2. NCCL is ruled out when the build has none, when the device is the
//      host emulation, or when two ranks share a GPU (NCCL refuses them).
//   3. ACCORD_GPU_OPERATIONS decides: `nccl` where NCCL is ruled out is an
//      error; `mpi`, or `auto` where NCCL is ruled out, is the staged path.
//   4. For NCCL, the set's rank 0 makes the unique id and broadcasts it
//      behind a flag byte saying whether it could; every rank then creates
//      the communicator, with the staged path as the fallback for what NCCL
//      cannot reduce.
// An error every rank of the set meets alike (a rank without a usable GPU,
// NCCL demanded but ruled out, no unique id) goes to `*agreed`, and the
// result is null: the caller fails the batch and goes on. Any other error
// is this rank's own (the others may wait for it), so it is fatal.
Result<std::unique_ptr<DeviceCollectives>> SelectDeviceCollectives(const DeviceSelection& set, Status* agreed);

}  // namespace accord
