// The device API this build of accord has for CUDA tensors: CUDA's
// (device/cuda/) or the host emulation (device/host/). The one place in
// device/ that knows whether CUDA was compiled in (device_factory.cc holds
// its #if ACCORD_WITH_CUDA); which data plane runs collectives on that
// device is chosen above it, in backends/device_selection.h.
#pragma once

#include <string>

#include "accord/status.h"
#include "device/device.h"

namespace accord {

// Whether this build has CUDA support.
bool CudaBuilt();
// "CUDA 13.0 (driver 13.0)" (device/cuda/cuda_device.h: CudaBuildVersion);
// empty in builds without CUDA.
std::string CudaVersionBuilt();

// The device API the process uses for CUDA tensors: the host emulation
// when `host_emulation` (ACCORD_CUDA_HOST_EMULATION), else CUDA, or an
// error that says why CUDA tensors cannot be used (not built, no driver, no
// GPU). Made once per process and never destroyed (streams and events of
// the frameworks may refer to it until exit); any thread.
Result<DeviceApi*> ProcessDeviceApi(bool host_emulation);

}  // namespace accord
