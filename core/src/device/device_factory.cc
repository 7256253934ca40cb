#include "device/device_factory.h"

#include <mutex>

#include "device/host_device.h"

#if ACCORD_WITH_CUDA
#include "backends/cuda/cuda_device.h"
#endif
#if ACCORD_WITH_NCCL
#include "backends/nccl/nccl_collectives.h"
#endif

namespace accord {

DeviceSupport GetDeviceSupport() {
  DeviceSupport support;
#if ACCORD_WITH_CUDA
  support.cuda_built = true;
  support.cuda_version = CudaBuildVersion();
#endif
#if ACCORD_WITH_NCCL
  support.nccl_built = true;
  support.nccl_version = NcclVersion();
#endif
  return support;
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

Result<std::string> NewNcclUniqueId() {
#if ACCORD_WITH_NCCL
  return NcclUniqueIdBytes();
#else
  return Status::Unimplemented("this build of accord has no NCCL support");
#endif
}

Result<std::unique_ptr<DeviceCollectives>> CreateNcclCollectives(NcclSetup setup) {
#if ACCORD_WITH_NCCL
  return MakeNcclCollectives(std::move(setup));
#else
  return Status::Unimplemented("this build of accord has no NCCL support");
#endif
}

}  // namespace accord
