// Tests for the host implementation of the device seam (device/host/host_device.h):
// that it keeps CUDA's ordering rules, which the GPU path's logic relies on
// and CPU-only CI tests through it. Work on a stream runs in order and later
// than it was enqueued; a stream that waits for an event runs nothing after
// the wait until the work the event captured has run; a record refers to the
// work before it only; and a stream destroyed mid-wait does not hang.
#include "device/host/host_device.h"

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>
#include <vector>

namespace accord {
namespace {

using namespace std::chrono_literals;

// A gate a test opens: tasks that pass it block the stream until then.
struct Gate {
  std::promise<void> promise;
  std::shared_future<void> future = promise.get_future().share();
  void Open() { promise.set_value(); }
  std::function<void()> Task() {
    return [f = future] { f.wait(); };
  }
};

HostStream& AsHost(DeviceStream& s) { return static_cast<HostStream&>(s); }

TEST_CASE("work on a host stream runs later, in order") {
  HostDeviceApi api;
  auto stream = api.CreateStream(0).value();
  Gate gate;
  std::vector<int> order;
  AsHost(*stream).Enqueue(gate.Task());
  for (int i = 0; i < 5; ++i) AsHost(*stream).Enqueue([&order, i] { order.push_back(i); });
  std::this_thread::sleep_for(20ms);
  CHECK(order.empty());  // blocked behind the gate: nothing ran at enqueue
  gate.Open();
  REQUIRE(stream->Synchronize().ok());
  CHECK(order == std::vector<int>{0, 1, 2, 3, 4});
}

TEST_CASE("an event fires once the work recorded before it has run, not later work") {
  HostDeviceApi api;
  auto producer = api.CreateStream(0).value();
  auto event = api.CreateEvent(0).value();
  CHECK(event->Query().value());  // never recorded: fired
  Gate first, second;
  AsHost(*producer).Enqueue(first.Task());
  REQUIRE(event->Record(*producer).ok());
  AsHost(*producer).Enqueue(second.Task());  // after the record: not captured
  CHECK_FALSE(event->Query().value());
  first.Open();
  for (int i = 0; i < 500 && !event->Query().value(); ++i) std::this_thread::sleep_for(2ms);
  CHECK(event->Query().value());  // fired, though `second` still blocks the stream
  second.Open();
  REQUIRE(producer->Synchronize().ok());
}

TEST_CASE("a stream that waits for an event reads a tensor only after its late producer wrote it") {
  HostDeviceApi api;
  auto producer = api.CreateStream(0).value();
  auto comm = api.CreateStream(0).value();
  auto ready = api.CreateEvent(0).value();
  std::vector<float> tensor(1000, 1.0f), copy(1000, 0.0f);
  Gate long_kernel;
  // The producer writes the tensor after a "long kernel"; the consumer's
  // copy is enqueued at once but must see the written values.
  AsHost(*producer).Enqueue(long_kernel.Task());
  AsHost(*producer).Enqueue([&] { std::fill(tensor.begin(), tensor.end(), 42.0f); });
  REQUIRE(ready->Record(*producer).ok());
  REQUIRE(comm->Wait(*ready).ok());
  REQUIRE(comm->Copy(copy.data(), tensor.data(), tensor.size() * sizeof(float)).ok());
  auto done = api.CreateEvent(0).value();
  REQUIRE(done->Record(*comm).ok());
  std::this_thread::sleep_for(20ms);
  CHECK_FALSE(done->Query().value());
  long_kernel.Open();
  REQUIRE(comm->Synchronize().ok());
  CHECK(done->Query().value());
  for (float v : copy) REQUIRE(v == 42.0f);
}

TEST_CASE("a wait refers to the record made before it, not to a later one") {
  HostDeviceApi api;
  auto producer = api.CreateStream(0).value();
  auto consumer = api.CreateStream(0).value();
  auto event = api.CreateEvent(0).value();
  REQUIRE(event->Record(*producer).ok());
  REQUIRE(producer->Synchronize().ok());
  REQUIRE(consumer->Wait(*event).ok());  // the first capture has fired
  Gate blocked;
  AsHost(*producer).Enqueue(blocked.Task());
  REQUIRE(event->Record(*producer).ok());  // a later capture, still pending
  std::atomic<bool> ran{false};
  AsHost(*consumer).Enqueue([&] { ran = true; });
  REQUIRE(consumer->Synchronize().ok());  // does not wait for the later capture
  CHECK(ran);
  blocked.Open();
}

TEST_CASE("BlockNative makes another stream wait without blocking the caller") {
  HostDeviceApi api;
  auto comm = api.CreateStream(0).value();
  auto user = api.CreateStream(0).value();
  auto done = api.CreateEvent(0).value();
  Gate gate;
  AsHost(*comm).Enqueue(gate.Task());
  REQUIRE(done->Record(*comm).ok());
  const auto start = std::chrono::steady_clock::now();
  REQUIRE(done->BlockNative(user->native()).ok());
  CHECK(std::chrono::steady_clock::now() - start < 1s);
  std::atomic<bool> ran{false};
  AsHost(*user).Enqueue([&] { ran = true; });
  std::this_thread::sleep_for(20ms);
  CHECK_FALSE(ran);
  gate.Open();
  REQUIRE(user->Synchronize().ok());
  CHECK(ran);
}

TEST_CASE("a null native stream is the default stream") {
  HostDeviceApi api;
  auto event = api.CreateEvent(0).value();
  Gate gate;
  api.DefaultStream().Enqueue(gate.Task());
  REQUIRE(event->RecordNative(nullptr).ok());
  CHECK_FALSE(event->Query().value());
  gate.Open();
  REQUIRE(api.DefaultStream().Synchronize().ok());
  CHECK(event->Query().value());
}

TEST_CASE("launching a plan copies and scales on the stream, after the work before it") {
  HostDeviceApi api;
  auto stream = api.CreateStream(1).value();
  std::vector<double> a(5000), b(7), out(5007, -1.0);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<double>(i);
  for (size_t i = 0; i < b.size(); ++i) b[i] = -static_cast<double>(i);
  Gate gate;
  AsHost(*stream).Enqueue(gate.Task());
  CopyPlan plan;
  plan.dtype = DataType::kFloat64;
  plan.factor = 2.0;
  plan.Add(a.data(), out.data(), 5000);
  plan.Add(b.data(), out.data() + 5000, 7);
  REQUIRE(stream->Launch(plan).ok());
  plan = CopyPlan{};  // the stream keeps its own copy
  std::this_thread::sleep_for(10ms);
  CHECK(out[0] == -1.0);
  gate.Open();
  REQUIRE(stream->Synchronize().ok());
  for (size_t i = 0; i < 5000; ++i) REQUIRE(out[i] == 2.0 * static_cast<double>(i));
  for (size_t i = 0; i < 7; ++i) REQUIRE(out[5000 + i] == -2.0 * static_cast<double>(i));
}

TEST_CASE("a stream destroyed while it waits for an event that never fires does not hang") {
  HostDeviceApi api;
  auto producer = api.CreateStream(0).value();
  auto event = api.CreateEvent(0).value();
  Gate never;
  AsHost(*producer).Enqueue(never.Task());
  REQUIRE(event->Record(*producer).ok());
  {
    auto comm = api.CreateStream(0).value();
    REQUIRE(comm->Wait(*event).ok());
    const auto start = std::chrono::steady_clock::now();
    comm.reset();
    CHECK(std::chrono::steady_clock::now() - start < 5s);
  }
  never.Open();
}

TEST_CASE("device memory freed outside a stream waits for the queued work that uses it") {
  HostDeviceApi api;
  auto stream = api.CreateStream(0).value();
  void* data = api.AllocateDevice(0, 4096).value();
  std::vector<unsigned char> src(4096, 7);
  Gate gate;
  AsHost(*stream).Enqueue(gate.Task());
  REQUIRE(stream->Copy(data, src.data(), src.size()).ok());
  std::atomic<bool> copied{false};
  AsHost(*stream).Enqueue([&] { copied = true; });
  std::thread opener([&] {
    std::this_thread::sleep_for(20ms);
    gate.Open();
  });
  api.FreeDevice(0, data);  // returns only after the copy has run
  CHECK(copied);
  opener.join();
}

TEST_CASE("bad ordinals are refused with the device count") {
  HostDeviceApi api(2);
  auto stream = api.CreateStream(2);
  REQUIRE_FALSE(stream.ok());
  CHECK(stream.status().message().find("cuda:2 is not a device of this process") != std::string::npos);
  CHECK(stream.status().message().find("2 devices") != std::string::npos);
  CHECK_FALSE(api.CreateEvent(-1).ok());
  CHECK(api.DeviceIdentity(0).value() != api.DeviceIdentity(1).value());
}

}  // namespace
}  // namespace accord
