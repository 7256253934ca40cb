#include "device/device.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <sstream>
#include <thread>

namespace accord {

Status DeviceEvent::Record(DeviceStream& stream) { return RecordNative(stream.native()); }

Status DeviceApi::CheckOrdinal(int ordinal) const {
  const int count = DeviceCount();
  if (ordinal < 0 || ordinal >= count) {
    return Status::InvalidArgument(std::string("cuda:") + std::to_string(ordinal) +
                                   " is not a device of this process (" + name() + " sees " + std::to_string(count) +
                                   " device" + (count == 1 ? "" : "s") + ")");
  }
  return Status::OK();
}

Allocator DeviceMemoryAllocator(std::shared_ptr<std::vector<std::shared_ptr<void>>> keep_alive, DeviceApi* api) {
  return [keep_alive, api](DataType dtype, const Shape& shape, Device device) -> Result<TensorView> {
    if (device.type != DeviceType::kCUDA) {
      return Status::Internal("the device allocator makes CUDA tensors only, not " + device.ToString());
    }
    TensorView view{nullptr, dtype, shape, device};
    ACCORD_ASSIGN_OR_RETURN(view.data, api->AllocateDevice(device.ordinal, std::max<size_t>(view.size_bytes(), 1)));
    const int ordinal = device.ordinal;
    keep_alive->push_back(std::shared_ptr<void>(view.data, [api, ordinal](void* p) { api->FreeDevice(ordinal, p); }));
    return view;
  };
}

Status WaitForEvent(DeviceEvent& event, double timeout_seconds, const std::atomic<bool>* aborted,
                    const std::string& what) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  constexpr auto kSpin = std::chrono::microseconds(50);
  constexpr auto kLongestSleep = std::chrono::microseconds(1000);
  while (true) {
    ACCORD_ASSIGN_OR_RETURN(const bool fired, event.Query());
    if (fired) return Status::OK();
    if (aborted && aborted->load()) return Status::Aborted(what + " was abandoned: the operation was aborted");
    const auto waited = Clock::now() - start;
    if (timeout_seconds > 0 && waited > std::chrono::duration<double>(timeout_seconds)) {
      std::ostringstream message;
      message << what << " did not complete within " << timeout_seconds << " s (ACCORD_COLLECTIVE_TIMEOUT_SECONDS)";
      return Status::Aborted(message.str());
    }
    if (waited < kSpin) {
      sched_yield();
    } else {
      // A wait that has lasted long is likely to last longer: sleep an
      // eighth of it, so waiting costs few wake-ups and adds little delay.
      std::this_thread::sleep_for(
          std::min<Clock::duration>(waited / 8, std::chrono::duration_cast<Clock::duration>(kLongestSleep)));
    }
  }
}

}  // namespace accord
