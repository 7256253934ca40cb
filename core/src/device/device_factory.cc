#include "device/device_factory.h"

#include <mutex>

#include "device/host/host_device.h"

#if ACCORD_WITH_CUDA
#include "device/cuda/cuda_device.h"
#endif

namespace accord {

bool CudaBuilt() { return ACCORD_WITH_CUDA != 0; }

std::string CudaVersionBuilt() {
#if ACCORD_WITH_CUDA
  return CudaBuildVersion();
#else
  return "";
#endif
}

Result<DeviceApi*> ProcessDeviceApi(bool host_emulation) {
  if (host_emulation) {
    static HostDeviceApi* host = new HostDeviceApi();  // leaked: see the header
    return static_cast<DeviceApi*>(host);
  }
#if ACCORD_WITH_CUDA
  static std::once_flag once;
  static Result<DeviceApi*>* cuda = nullptr;
  std::call_once(once, [] {
    Result<std::unique_ptr<DeviceApi>> made = CreateCudaDeviceApi();
    cuda = made.ok() ? new Result<DeviceApi*>(made.value().release()) : new Result<DeviceApi*>(made.status());
  });
  return *cuda;
#else
  return Status::Unimplemented(
      "this build of accord has no CUDA support (it was built without the CUDA toolkit); CUDA tensors cannot be "
      "used");
#endif
}

}  // namespace accord
