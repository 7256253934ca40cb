// What this build of accord has for CUDA tensors, and the objects that serve
// them. The one place that knows whether CUDA and NCCL were compiled in
// (device_factory.cc holds every #if ACCORD_WITH_CUDA / ACCORD_WITH_NCCL).
#pragma once

#include <memory>
#include <string>

#include "accord/status.h"
#include "backends/device_collectives.h"
#include "device/device.h"

namespace accord {

struct DeviceSupport {
  bool cuda_built = false;
  bool nccl_built = false;
  std::string cuda_version;  // "CUDA 13.0" (the toolkit built against), empty if not built
  std::string nccl_version;  // "NCCL 2.28.9" (the library loaded), empty if not built
};
DeviceSupport GetDeviceSupport();

// The device API the process uses for CUDA tensors: the host emulation
// when `host_emulation` (ACCORD_CUDA_HOST_EMULATION), else CUDA, or an
// error that says why CUDA tensors cannot be used (not built, no driver, no
// GPU). Made once per process and never destroyed (streams and events of
// the frameworks may refer to it until exit); any thread.
Result<DeviceApi*> ProcessDeviceApi(bool host_emulation);

// NCCL's unique id as bytes (ncclGetUniqueId), made on one rank of a set
// and sent to the others; kUnimplemented without NCCL.
Result<std::string> NewNcclUniqueId();

// What CreateNcclCollectives needs. Every rank of the set calls it with the
// same unique id, at the same point of the agreed execution order.
struct NcclSetup {
  int set_rank = 0;
  int set_size = 1;
  int ordinal = 0;          // this rank's device
  std::string unique_id;    // from NewNcclUniqueId on one rank
  double timeout_seconds;   // bounds the communicator's initialisation and each wait for NCCL
  // Runs what NCCL cannot reduce (int16: NCCL has no 16-bit integers).
  std::unique_ptr<DeviceCollectives> fallback;
};
// A non-blocking NCCL communicator for the set on `ordinal`, as a
// DeviceCollectives; kUnimplemented without NCCL.
Result<std::unique_ptr<DeviceCollectives>> CreateNcclCollectives(NcclSetup setup);

}  // namespace accord
