// Tests for DeviceFusionBuffer (fusion/device_fusion_buffer.h) on the host
// device: it grows in 2 MiB units and never shrinks, keeps its memory while
// requests fit, and gives old memory back in the stream's order, after the
// work queued on it has run.
#include "fusion/device_fusion_buffer.h"

#include <catch2/catch.hpp>

#include <cstring>
#include <future>
#include <vector>

#include "device/host/host_device.h"

namespace accord {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

TEST_CASE("the device fusion buffer grows in whole units, never shrinks, and keeps memory that fits") {
  HostDeviceApi api;
  auto stream = api.CreateStream(0).value();
  DeviceFusionBuffer buffer(stream.get());
  CHECK(buffer.capacity() == 0);
  char* first = buffer.Get(100).value();
  CHECK(buffer.capacity() == 2 * kMiB);
  CHECK(buffer.Get(2 * kMiB).value() == first);  // fits: the same memory
  CHECK(buffer.Get(1).value() == first);
  buffer.Get(2 * kMiB + 1).value();
  CHECK(buffer.capacity() == 4 * kMiB);
  buffer.Get(5 * kMiB).value();  // grows by at least half
  CHECK(buffer.capacity() == 6 * kMiB);
  buffer.Get(kMiB).value();
  CHECK(buffer.capacity() == 6 * kMiB);
  REQUIRE(stream->Synchronize().ok());
}

TEST_CASE("work queued on the old memory runs before the buffer grows away from it") {
  HostDeviceApi api;
  auto stream = api.CreateStream(0).value();
  DeviceFusionBuffer buffer(stream.get());
  char* old = buffer.Get(kMiB).value();
  std::vector<char> source(kMiB, 7), seen(kMiB, 0);
  std::promise<void> gate;
  std::shared_future<void> opened = gate.get_future().share();
  auto& host = static_cast<HostStream&>(*stream);
  host.Enqueue([opened] { opened.wait(); });
  REQUIRE(stream->Copy(old, source.data(), kMiB).ok());
  REQUIRE(stream->Copy(seen.data(), old, kMiB).ok());
  char* grown = buffer.Get(8 * kMiB).value();  // frees `old` in the stream's order
  CHECK(grown != nullptr);
  gate.set_value();
  REQUIRE(stream->Synchronize().ok());
  CHECK(std::memcmp(seen.data(), source.data(), kMiB) == 0);
}

}  // namespace
}  // namespace accord
