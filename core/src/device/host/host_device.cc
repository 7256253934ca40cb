#include "device/host/host_device.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace accord {

// ------------------------------------------------------------------ stream

HostStream::HostStream(HostDeviceApi* api, int ordinal) : api_(api), ordinal_(ordinal) {
  thread_ = std::thread([this] { Run(); });
  if (api_) api_->Register(this);
}

HostStream::~HostStream() {
  if (api_) api_->Unregister(this);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    closing_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

bool HostStream::closing() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return closing_;
}

void HostStream::Enqueue(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    tasks_.push_back(std::move(task));
  }
  cv_.notify_all();
}

void HostStream::Run() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    cv_.wait(lock, [&] { return !tasks_.empty() || closing_; });
    if (tasks_.empty()) return;  // closing, and everything has run
    std::function<void()> task = std::move(tasks_.front());
    tasks_.pop_front();
    busy_ = true;
    lock.unlock();
    task();
    lock.lock();
    busy_ = false;
    cv_.notify_all();
  }
}

Status HostStream::Wait(DeviceEvent& event) { return event.BlockNative(native()); }

Status HostStream::Copy(void* dst, const void* src, size_t bytes) {
  if (bytes > 0) Enqueue([dst, src, bytes] { std::memcpy(dst, src, bytes); });
  return Status::OK();
}

Status HostStream::Launch(const CopyPlan& plan) {
  if (plan.empty()) return Status::OK();
  // The plan travels with the task, as the CUDA launch copies its segments
  // to the device before it returns.
  Enqueue([plan] {
    const CopyLaunch launch = MakeCopyLaunch(plan, plan.segments.data());
    for (int64_t chunk = 0; chunk < plan.num_chunks; ++chunk) RunCopyChunk(launch, chunk, 0, 1);
  });
  return Status::OK();
}

Result<void*> HostStream::Allocate(size_t bytes) {
  void* data = std::aligned_alloc(256, (std::max<size_t>(bytes, 1) + 255) / 256 * 256);
  if (!data) return Status::Internal("host emulation: out of memory allocating " + std::to_string(bytes) + " bytes");
  return data;
}

void HostStream::Free(void* data) {
  if (data) Enqueue([data] { std::free(data); });
}

Status HostStream::Synchronize() {
  std::mutex done_mutex;
  std::condition_variable done_cv;
  bool done = false;
  Enqueue([&] {
    std::lock_guard<std::mutex> lock(done_mutex);
    done = true;
    done_cv.notify_all();
  });
  std::unique_lock<std::mutex> lock(done_mutex);
  done_cv.wait(lock, [&] { return done; });
  return Status::OK();
}

// ------------------------------------------------------------------- event

HostEvent::HostEvent(HostDeviceApi* api) : api_(api), state_(std::make_shared<State>()) {}

Status HostEvent::RecordNative(void* native_stream) {
  ACCORD_RETURN_IF_ERROR(api_->StreamOf(native_stream).status());
  uint64_t capture;
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    capture = ++state_->recorded;
  }
  ACCORD_ASSIGN_OR_RETURN(HostStream * stream, api_->StreamOf(native_stream));
  stream->Enqueue([state = state_, capture] {
    std::lock_guard<std::mutex> lock(state->mutex);
    if (capture > state->fired) state->fired = capture;
    state->cv.notify_all();
  });
  return Status::OK();
}

Result<bool> HostEvent::Query() {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->fired >= state_->recorded;
}

Status HostEvent::BlockNative(void* native_stream) {
  uint64_t target;
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    target = state_->recorded;
  }
  ACCORD_ASSIGN_OR_RETURN(HostStream * stream, api_->StreamOf(native_stream));
  if (target == 0) return Status::OK();  // never recorded: nothing to wait for
  stream->Enqueue([state = state_, target, stream] {
    std::unique_lock<std::mutex> lock(state->mutex);
    // Re-checked every 10 ms: a stream being destroyed gives up waiting.
    while (state->fired < target && !stream->closing()) {
      state->cv.wait_for(lock, std::chrono::milliseconds(10));
    }
  });
  return Status::OK();
}

// --------------------------------------------------------------------- api

HostDeviceApi::HostDeviceApi(int device_count) : device_count_(device_count) {
  default_stream_ = std::make_unique<HostStream>(nullptr, 0);
}

HostDeviceApi::~HostDeviceApi() = default;

void HostDeviceApi::Register(HostStream* stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  streams_.insert(stream);
}

void HostDeviceApi::Unregister(HostStream* stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  streams_.erase(stream);
}

HostStream& HostDeviceApi::DefaultStream() { return *default_stream_; }

Result<HostStream*> HostDeviceApi::StreamOf(void* native_stream) {
  if (!native_stream) return default_stream_.get();
  std::lock_guard<std::mutex> lock(mutex_);
  auto* stream = static_cast<HostStream*>(native_stream);
  if (streams_.count(stream) == 0) {
    return Status::InvalidArgument("stream " + std::to_string(reinterpret_cast<uintptr_t>(native_stream)) +
                                   " is not a stream of the host emulation (pass none: the default stream)");
  }
  return stream;
}

Result<std::string> HostDeviceApi::DeviceIdentity(int ordinal) const {
  ACCORD_RETURN_IF_ERROR(CheckOrdinal(ordinal));
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  return std::string(host) + "/" + std::to_string(getpid()) + "/" + std::to_string(ordinal);
}

Result<std::unique_ptr<DeviceStream>> HostDeviceApi::CreateStream(int ordinal) {
  ACCORD_RETURN_IF_ERROR(CheckOrdinal(ordinal));
  return std::unique_ptr<DeviceStream>(new HostStream(this, ordinal));
}

Result<std::unique_ptr<DeviceEvent>> HostDeviceApi::CreateEvent(int ordinal) {
  ACCORD_RETURN_IF_ERROR(CheckOrdinal(ordinal));
  return std::unique_ptr<DeviceEvent>(new HostEvent(this));
}

Result<void*> HostDeviceApi::AllocateHost(size_t bytes) {
  void* data = std::aligned_alloc(64, (std::max<size_t>(bytes, 1) + 63) / 64 * 64);
  if (!data) return Status::Internal("host emulation: out of memory allocating " + std::to_string(bytes) + " bytes");
  return data;
}

void HostDeviceApi::FreeHost(void* data) { std::free(data); }

Result<void*> HostDeviceApi::AllocateDevice(int ordinal, size_t bytes) {
  ACCORD_RETURN_IF_ERROR(CheckOrdinal(ordinal));
  return AllocateHost(bytes);
}

void HostDeviceApi::FreeDevice(int /*ordinal*/, void* data) {
  // Holding mutex_ keeps every stream alive (destruction unregisters
  // first) while its queued work drains.
  std::lock_guard<std::mutex> lock(mutex_);
  (void)default_stream_->Synchronize();
  for (HostStream* stream : streams_) (void)stream->Synchronize();
  std::free(data);
}

}  // namespace accord
