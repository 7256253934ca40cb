#include "device/cuda/cuda_device.h"

#include <algorithm>
#include <cstdlib>
#include <utility>

#include "common/logging.h"
#include "device/cuda/copy_kernel.h"
#include "device/cuda/cuda_check.h"
#include "device/cuda/device_guard.h"
#include "device/cuda/segment_table.h"

namespace accord {
namespace {

// A native stream handle as CUDA takes it. Null is spelled out as the legacy
// default stream: 0 would mean the per-thread one in code compiled with
// --default-stream per-thread.
cudaStream_t AsCudaStream(void* native_stream) {
  return native_stream ? static_cast<cudaStream_t>(native_stream) : cudaStreamLegacy;
}

// 13000 -> "13.0".
std::string VersionText(int version) {
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

// The installed driver's CUDA version, or 0 when there is none.
int DriverVersion() {
  int version = 0;
  if (cudaDriverGetVersion(&version) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return version;
}

// "; CUDA_VISIBLE_DEVICES=\"...\"" when it is set: it hides devices.
std::string VisibleDevicesNote() {
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  return visible ? std::string("; CUDA_VISIBLE_DEVICES=\"") + visible + "\"" : std::string();
}

void LogIfFailed(const Status& status, const char* what) {
  if (!status.ok()) {
    ACCORD_LOG(kWarning) << what << ": " << status;
  }
}

}  // namespace

// ------------------------------------------------------------------- event

Result<CudaEvent> CudaEvent::Create(int ordinal) {
  DeviceGuard guard(ordinal);
  ACCORD_RETURN_IF_ERROR(guard.status());
  cudaEvent_t event = nullptr;
  ACCORD_RETURN_IF_ERROR(ACCORD_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming)));
  return CudaEvent(ordinal, event);
}

CudaEvent::~CudaEvent() {
  if (event_) LogIfFailed(ACCORD_CUDA_CHECK(cudaEventDestroy(event_)), "could not destroy a CUDA event");
}

CudaEvent::CudaEvent(CudaEvent&& other) noexcept
    : ordinal_(other.ordinal_), event_(std::exchange(other.event_, nullptr)) {}

CudaEvent& CudaEvent::operator=(CudaEvent&& other) noexcept {
  // `other` takes this event and destroys it.
  std::swap(ordinal_, other.ordinal_);
  std::swap(event_, other.event_);
  return *this;
}

Status CudaEvent::RecordNative(void* native_stream) {
  DeviceGuard guard(ordinal_);
  ACCORD_RETURN_IF_ERROR(guard.status());
  return ACCORD_CUDA_CHECK(cudaEventRecord(event_, AsCudaStream(native_stream)));
}

Result<bool> CudaEvent::Query() {
  const cudaError_t rc = cudaEventQuery(event_);
  if (rc == cudaSuccess) return true;
  if (rc == cudaErrorNotReady) {
    // "Not ready" is an answer, not an error: keep it out of the thread's
    // last error, where a later launch check would find it.
    (void)cudaGetLastError();
    return false;
  }
  return ACCORD_CUDA_CHECK(rc);
}

Status CudaEvent::BlockNative(void* native_stream) {
  DeviceGuard guard(ordinal_);
  ACCORD_RETURN_IF_ERROR(guard.status());
  return ACCORD_CUDA_CHECK(cudaStreamWaitEvent(AsCudaStream(native_stream), event_, 0));
}

Status CudaEvent::Synchronize() { return ACCORD_CUDA_CHECK(cudaEventSynchronize(event_)); }

// ------------------------------------------------------------------ stream

CudaStream::CudaStream(int ordinal, cudaStream_t stream, const CopyKernelGrid& grid)
    : ordinal_(ordinal), stream_(stream), grid_(grid) {}

Result<CudaStream> CudaStream::Create(int ordinal) {
  DeviceGuard guard(ordinal);
  ACCORD_RETURN_IF_ERROR(guard.status());
  ACCORD_ASSIGN_OR_RETURN(const CopyKernelGrid grid, CopyKernelGridOf(ordinal));
  cudaStream_t stream = nullptr;
  ACCORD_RETURN_IF_ERROR(ACCORD_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking)));
  return CudaStream(ordinal, stream, grid);
}

CudaStream::~CudaStream() {
  if (!stream_) return;
  segments_.reset();  // frees its table on the stream, so before the stream goes
  LogIfFailed(Synchronize(), "waiting for a CUDA stream's work before destroying it failed");
  LogIfFailed(ACCORD_CUDA_CHECK(cudaStreamDestroy(stream_)), "could not destroy a CUDA stream");
}

CudaStream::CudaStream(CudaStream&& other) noexcept
    : ordinal_(other.ordinal_),
      stream_(std::exchange(other.stream_, nullptr)),
      grid_(other.grid_),
      segments_(std::move(other.segments_)) {}

CudaStream& CudaStream::operator=(CudaStream&& other) noexcept {
  // `other` takes this stream and destroys it.
  std::swap(ordinal_, other.ordinal_);
  std::swap(stream_, other.stream_);
  std::swap(grid_, other.grid_);
  std::swap(segments_, other.segments_);
  return *this;
}

Status CudaStream::Wait(DeviceEvent& event) { return event.BlockNative(stream_); }

Status CudaStream::Copy(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return Status::OK();
  DeviceGuard guard(ordinal_);
  ACCORD_RETURN_IF_ERROR(guard.status());
  return ACCORD_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_));
}

Status CudaStream::Launch(const CopyPlan& plan) {
  if (plan.empty()) return Status::OK();
  DeviceGuard guard(ordinal_);
  ACCORD_RETURN_IF_ERROR(guard.status());
  if (!segments_) segments_ = std::make_unique<SegmentTable>(ordinal_, stream_);
  ACCORD_ASSIGN_OR_RETURN(const CopySegment* segments, segments_->Upload(plan));
  return LaunchCopyKernel(MakeCopyLaunch(plan, segments), plan.num_chunks, grid_, stream_);
}

Result<void*> CudaStream::Allocate(size_t bytes) {
  DeviceGuard guard(ordinal_);
  ACCORD_RETURN_IF_ERROR(guard.status());
  void* data = nullptr;
  // Never null, as on the host: one byte for an empty allocation.
  ACCORD_RETURN_IF_ERROR(ACCORD_CUDA_CHECK(cudaMallocAsync(&data, std::max<size_t>(bytes, 1), stream_)));
  return data;
}

void CudaStream::Free(void* data) {
  if (!data) return;
  DeviceGuard guard(ordinal_);
  LogIfFailed(guard.status(), "could not select the device to free stream memory on");
  LogIfFailed(ACCORD_CUDA_CHECK(cudaFreeAsync(data, stream_)), "could not free stream memory");
}

Status CudaStream::Synchronize() { return ACCORD_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

// --------------------------------------------------------------------- api

std::string CudaDeviceApi::Version() const {
  int runtime = 0;
  if (cudaRuntimeGetVersion(&runtime) != cudaSuccess) {
    (void)cudaGetLastError();
    runtime = CUDART_VERSION;
  }
  const int driver = DriverVersion();
  return "CUDA runtime " + VersionText(runtime) + ", driver " + (driver > 0 ? VersionText(driver) : "none");
}

Result<int> CudaDeviceApi::CurrentDevice() const {
  int device = 0;
  ACCORD_RETURN_IF_ERROR(ACCORD_CUDA_CHECK(cudaGetDevice(&device)));
  return device;
}

Result<std::string> CudaDeviceApi::DeviceIdentity(int ordinal) const {
  ACCORD_RETURN_IF_ERROR(CheckOrdinal(ordinal));
  char bus_id[64] = {};
  ACCORD_RETURN_IF_ERROR(ACCORD_CUDA_CHECK(cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), ordinal)));
  return std::string(bus_id);
}

Result<std::unique_ptr<DeviceStream>> CudaDeviceApi::CreateStream(int ordinal) {
  ACCORD_RETURN_IF_ERROR(CheckOrdinal(ordinal));
  ACCORD_ASSIGN_OR_RETURN(CudaStream stream, CudaStream::Create(ordinal));
  return std::unique_ptr<DeviceStream>(new CudaStream(std::move(stream)));
}

Result<std::unique_ptr<DeviceEvent>> CudaDeviceApi::CreateEvent(int ordinal) {
  ACCORD_RETURN_IF_ERROR(CheckOrdinal(ordinal));
  ACCORD_ASSIGN_OR_RETURN(CudaEvent event, CudaEvent::Create(ordinal));
  return std::unique_ptr<DeviceEvent>(new CudaEvent(std::move(event)));
}

Result<void*> CudaDeviceApi::AllocateHost(size_t bytes) {
  void* data = nullptr;
  ACCORD_RETURN_IF_ERROR(ACCORD_CUDA_CHECK(cudaHostAlloc(&data, std::max<size_t>(bytes, 1), cudaHostAllocPortable)));
  return data;
}

void CudaDeviceApi::FreeHost(void* data) {
  if (data) LogIfFailed(ACCORD_CUDA_CHECK(cudaFreeHost(data)), "could not free page-locked host memory");
}

Result<void*> CudaDeviceApi::AllocateDevice(int ordinal, size_t bytes) {
  ACCORD_RETURN_IF_ERROR(CheckOrdinal(ordinal));
  DeviceGuard guard(ordinal);
  ACCORD_RETURN_IF_ERROR(guard.status());
  void* data = nullptr;
  ACCORD_RETURN_IF_ERROR(ACCORD_CUDA_CHECK(cudaMalloc(&data, std::max<size_t>(bytes, 1))));
  return data;
}

void CudaDeviceApi::FreeDevice(int ordinal, void* data) {
  if (!data) return;
  DeviceGuard guard(ordinal);
  LogIfFailed(guard.status(), "could not select the device to free device memory on");
  // cudaFree only "may" synchronise; device.h promises that queued work
  // using the memory has run first, so wait for the device explicitly.
  LogIfFailed(ACCORD_CUDA_CHECK(cudaDeviceSynchronize()), "waiting for the device before freeing memory failed");
  LogIfFailed(ACCORD_CUDA_CHECK(cudaFree(data)), "could not free device memory");
}

// ---------------------------------------------------------------- creation

Result<std::unique_ptr<DeviceApi>> CreateCudaDeviceApi() {
  int count = 0;
  const cudaError_t rc = cudaGetDeviceCount(&count);
  if (rc != cudaSuccess) {
    (void)cudaGetLastError();
    const std::string why = std::string("cudaGetDeviceCount: ") + cudaGetErrorName(rc) + ": " + cudaGetErrorString(rc) +
                            VisibleDevicesNote();
    // No driver (or only its stub library) and no device: the machine has no
    // GPU for this process, which is not a failure of accord.
    if (rc == cudaErrorNoDevice || rc == cudaErrorInsufficientDriver || rc == cudaErrorStubLibrary) {
      std::string message = "no CUDA device is visible (" + why + ")";
      if (rc != cudaErrorNoDevice) {
        const int driver = DriverVersion();
        message += driver > 0 ? "; the driver supports CUDA " + VersionText(driver) + ", this build of accord needs " +
                                    VersionText(CUDART_VERSION) + " or newer"
                              : "; no CUDA driver is installed";
      }
      return Status::Unimplemented(message);
    }
    return Status::Internal("CUDA could not be initialised (" + why + ")");
  }
  if (count <= 0) {
    return Status::Unimplemented("no CUDA device is visible (cudaGetDeviceCount found none" + VisibleDevicesNote() +
                                 ")");
  }
  return std::unique_ptr<DeviceApi>(new CudaDeviceApi(count));
}

std::string CudaBuildVersion() {
  const int driver = DriverVersion();
  return "CUDA " + VersionText(CUDART_VERSION) + (driver > 0 ? " (driver " + VersionText(driver) + ")" : "");
}

}  // namespace accord
