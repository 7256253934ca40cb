// CudaStream, CudaEvent and CudaDeviceApi on a GPU keep the ordering rules
// of device/device.h, as core/src/device/host/host_device_test.cc checks them for
// the host implementation: work on a stream runs in order and later than it
// was enqueued; a stream that waits for an event runs nothing after the wait
// until the captured work has run; a wait refers to the record made before
// it; a null native stream is the legacy default stream. Streams are held
// with a Gate (gate_kernel.h), a kernel that spins until the test opens it.
// Also: launches queued behind a held stream (more than the staging slots)
// keep their own segments, stream-ordered memory, FreeDevice waiting for
// the work queued before it, moves, and the errors for bad ordinals.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "device/cuda/cuda_device.h"
#include "device/cuda/segment_table.h"
#include "gate_kernel.h"
#include "gpu_test_util.h"

namespace accord {
namespace {

using namespace std::chrono_literals;
using accord_test::CudaApi;
using accord_test::Gate;
using accord_test::NativeOf;
using accord_test::TestBytes;

// Opens a gate from another thread after a delay, for calls that block
// until the held work has run; joined at scope exit.
class LateOpener {
 public:
  LateOpener(Gate& gate, std::chrono::milliseconds delay)
      : thread_([&gate, delay] {
          std::this_thread::sleep_for(delay);
          gate.Open();
        }) {}
  ~LateOpener() { thread_.join(); }
  LateOpener(const LateOpener&) = delete;
  LateOpener& operator=(const LateOpener&) = delete;

 private:
  std::thread thread_;
};

// Polls `event` for up to 5 s.
bool FiresSoon(DeviceEvent& event) {
  for (int i = 0; i < 2500; ++i) {
    if (event.Query().value()) return true;
    std::this_thread::sleep_for(2ms);
  }
  return false;
}

TEST_CASE("work on a CUDA stream runs later, in order") {
  auto api = CudaApi();
  auto stream = api->CreateStream(0).value();
  TestBytes input(*api, TestBytes::kPinnedHost, 4000 * sizeof(float));
  TestBytes output(*api, TestBytes::kPinnedHost, 4000 * sizeof(float));
  TestBytes device(*api, TestBytes::kDevice, 4000 * sizeof(float));
  std::fill_n(input.as<float>(), 4000, 3.0f);
  std::fill_n(output.as<float>(), 4000, -1.0f);
  Gate gate;
  gate.Hold(NativeOf(*stream));
  REQUIRE(stream->Copy(device.get(), input.get(), 4000 * sizeof(float)).ok());
  CopyPlan plan;
  plan.dtype = DataType::kFloat32;
  plan.factor = 2.0;
  plan.Add(device.get(), device.get(), 4000);
  REQUIRE(stream->Launch(plan).ok());
  REQUIRE(stream->Copy(output.get(), device.get(), 4000 * sizeof(float)).ok());
  std::this_thread::sleep_for(20ms);
  CHECK(output.as<float>()[0] == -1.0f);  // held: nothing ran at enqueue
  gate.Open();
  REQUIRE(stream->Synchronize().ok());
  for (int i = 0; i < 4000; ++i) REQUIRE(output.as<float>()[i] == 6.0f);
  CHECK_FALSE(gate.timed_out());
}

TEST_CASE("a CUDA event fires once the work recorded before it has run, not later work") {
  auto api = CudaApi();
  auto producer = api->CreateStream(0).value();
  auto event = api->CreateEvent(0).value();
  CHECK(event->Query().value());  // never recorded: fired
  Gate first, second;
  first.Hold(NativeOf(*producer));
  REQUIRE(event->Record(*producer).ok());
  second.Hold(NativeOf(*producer));  // after the record: not captured
  CHECK_FALSE(event->Query().value());
  CHECK_FALSE(event->Query().value());  // "not ready" twice is no error
  first.Open();
  CHECK(FiresSoon(*event));  // though `second` still holds the stream
  second.Open();
  REQUIRE(producer->Synchronize().ok());
  CHECK_FALSE(first.timed_out());
  CHECK_FALSE(second.timed_out());
}

TEST_CASE("a CUDA stream that waits for an event reads a tensor only after its late producer wrote it") {
  auto api = CudaApi();
  auto producer = api->CreateStream(0).value();
  auto comm = api->CreateStream(0).value();
  auto ready = api->CreateEvent(0).value();
  auto done = api->CreateEvent(0).value();
  TestBytes values(*api, TestBytes::kPinnedHost, 1000 * sizeof(float));
  TestBytes result(*api, TestBytes::kPinnedHost, 1000 * sizeof(float));
  TestBytes tensor(*api, TestBytes::kDevice, 1000 * sizeof(float));
  TestBytes copy(*api, TestBytes::kDevice, 1000 * sizeof(float));
  std::fill_n(values.as<float>(), 1000, 42.0f);
  std::fill_n(result.as<float>(), 1000, 0.0f);
  // The producer writes the tensor after a long kernel; the communication
  // stream's pack is enqueued at once but must see the written values.
  Gate long_kernel;
  long_kernel.Hold(NativeOf(*producer));
  REQUIRE(producer->Copy(tensor.get(), values.get(), 1000 * sizeof(float)).ok());
  REQUIRE(ready->Record(*producer).ok());
  REQUIRE(comm->Wait(*ready).ok());
  CopyPlan pack;
  pack.dtype = DataType::kFloat32;
  pack.Add(tensor.get(), copy.get(), 1000);
  REQUIRE(comm->Launch(pack).ok());
  REQUIRE(comm->Copy(result.get(), copy.get(), 1000 * sizeof(float)).ok());
  REQUIRE(done->Record(*comm).ok());
  std::this_thread::sleep_for(20ms);
  CHECK_FALSE(done->Query().value());
  long_kernel.Open();
  REQUIRE(comm->Synchronize().ok());
  CHECK(done->Query().value());
  for (int i = 0; i < 1000; ++i) REQUIRE(result.as<float>()[i] == 42.0f);
  CHECK_FALSE(long_kernel.timed_out());
}

TEST_CASE("a CUDA wait refers to the record made before it, not to a later one") {
  auto api = CudaApi();
  auto producer = api->CreateStream(0).value();
  auto consumer = api->CreateStream(0).value();
  auto event = api->CreateEvent(0).value();
  TestBytes device(*api, TestBytes::kDevice, 64);
  TestBytes host(*api, TestBytes::kPinnedHost, 64);
  Gate held;
  REQUIRE(event->Record(*producer).ok());
  REQUIRE(producer->Synchronize().ok());
  REQUIRE(consumer->Wait(*event).ok());  // the first capture has fired
  held.Hold(NativeOf(*producer));
  REQUIRE(event->Record(*producer).ok());  // a later capture, still pending
  REQUIRE(consumer->Copy(host.get(), device.get(), 64).ok());
  const auto start = std::chrono::steady_clock::now();
  REQUIRE(consumer->Synchronize().ok());  // does not wait for the later capture
  CHECK(std::chrono::steady_clock::now() - start < 2s);
  held.Open();
  CHECK_FALSE(held.timed_out());
}

TEST_CASE("BlockNative makes another CUDA stream wait without blocking the caller") {
  auto api = CudaApi();
  auto comm = api->CreateStream(0).value();
  auto user = api->CreateStream(0).value();
  auto done = api->CreateEvent(0).value();
  TestBytes device(*api, TestBytes::kDevice, 256);
  TestBytes source(*api, TestBytes::kPinnedHost, 256);
  TestBytes target(*api, TestBytes::kPinnedHost, 256);
  std::fill_n(source.get(), 256, 7);
  std::fill_n(target.get(), 256, 0);
  REQUIRE(user->Copy(device.get(), source.get(), 256).ok());
  REQUIRE(user->Synchronize().ok());
  Gate gate;
  gate.Hold(NativeOf(*comm));
  REQUIRE(done->Record(*comm).ok());
  const auto start = std::chrono::steady_clock::now();
  REQUIRE(done->BlockNative(user->native()).ok());
  CHECK(std::chrono::steady_clock::now() - start < 1s);
  REQUIRE(user->Copy(target.get(), device.get(), 256).ok());
  std::this_thread::sleep_for(20ms);
  CHECK(target.get()[0] == 0);
  gate.Open();
  REQUIRE(user->Synchronize().ok());
  CHECK(target.get()[255] == 7);
  CHECK_FALSE(gate.timed_out());
}

TEST_CASE("a null native stream is the legacy default stream") {
  auto api = CudaApi();
  auto event = api->CreateEvent(0).value();
  Gate gate;
  gate.Hold(cudaStreamLegacy);
  REQUIRE(event->RecordNative(nullptr).ok());
  CHECK_FALSE(event->Query().value());
  gate.Open();
  CHECK(FiresSoon(*event));
  CHECK_FALSE(gate.timed_out());
}

TEST_CASE("launches queued behind a held stream keep their own segments, past the staging slots") {
  auto api = CudaApi();
  auto stream = api->CreateStream(0).value();
  // Launch i adds segments of 100 elements from the ramp at element i on,
  // times i + 1; its segment count varies so that slots and table grow.
  constexpr int kFirst = static_cast<int>(SegmentTable::kMaxSlots) - 4;  // enqueued with the gate closed
  constexpr int kLaunches = 2 * static_cast<int>(SegmentTable::kMaxSlots) + 8;
  constexpr int64_t kCount = 100;
  std::vector<int> counts;
  for (int i = 0; i < kLaunches; ++i) counts.push_back(i % 8 == 7 ? 100 + 10 * i : 1 + i % 3);
  int64_t total = 0;
  for (int c : counts) total += c * kCount;
  TestBytes ramp(*api, TestBytes::kPinnedHost, sizeof(int64_t) * (kCount + kLaunches));
  for (int64_t j = 0; j < kCount + kLaunches; ++j) ramp.as<int64_t>()[j] = j;
  TestBytes source(*api, TestBytes::kDevice, sizeof(int64_t) * (kCount + kLaunches));
  TestBytes out(*api, TestBytes::kDevice, sizeof(int64_t) * total);
  TestBytes got(*api, TestBytes::kPinnedHost, sizeof(int64_t) * total);
  REQUIRE(stream->Copy(source.get(), ramp.get(), sizeof(int64_t) * (kCount + kLaunches)).ok());
  REQUIRE(stream->Synchronize().ok());

  Gate gate;
  gate.Hold(NativeOf(*stream));
  int64_t* to = out.as<int64_t>();
  std::optional<LateOpener> opener;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kLaunches; ++i) {
    if (i == kFirst) {
      // Enqueueing has not waited for the held stream so far. The launches
      // past the last slot wait for the oldest upload, so the gate opens
      // from another thread.
      CHECK(std::chrono::steady_clock::now() - start < 2s);
      opener.emplace(gate, 200ms);
    }
    CopyPlan plan;
    plan.dtype = DataType::kInt64;
    plan.factor = i + 1;
    for (int k = 0; k < counts[i]; ++k, to += kCount) plan.Add(source.as<int64_t>() + i, to, kCount);
    REQUIRE(stream->Launch(plan).ok());
  }
  REQUIRE(stream->Copy(got.get(), out.get(), sizeof(int64_t) * total).ok());
  REQUIRE(stream->Synchronize().ok());
  CHECK_FALSE(gate.timed_out());
  const int64_t* value = got.as<int64_t>();
  for (int i = 0; i < kLaunches; ++i) {
    for (int k = 0; k < counts[i]; ++k) {
      for (int64_t j = 0; j < kCount; ++j, ++value) {
        if (*value == (i + 1) * (i + j)) continue;
        INFO("launch " << i << " segment " << k << " element " << j << ": expected " << (i + 1) * (i + j) << ", got "
                       << *value);
        FAIL();
      }
    }
  }
}

TEST_CASE("stream memory is usable in stream order and given back in stream order") {
  auto api = CudaApi();
  auto stream = api->CreateStream(0).value();
  TestBytes host(*api, TestBytes::kPinnedHost, 5000 * sizeof(double));
  for (int i = 0; i < 5000; ++i) host.as<double>()[i] = i;
  Gate gate;
  gate.Hold(NativeOf(*stream));
  void* scratch = stream->Allocate(5000 * sizeof(double)).value();
  void* empty = stream->Allocate(0).value();
  CHECK(empty != nullptr);
  REQUIRE(stream->Copy(scratch, host.get(), 5000 * sizeof(double)).ok());
  CopyPlan plan;
  plan.dtype = DataType::kFloat64;
  plan.factor = -0.5;
  plan.Add(scratch, scratch, 5000);
  REQUIRE(stream->Launch(plan).ok());
  REQUIRE(stream->Copy(host.get(), scratch, 5000 * sizeof(double)).ok());
  stream->Free(scratch);
  stream->Free(empty);
  gate.Open();
  REQUIRE(stream->Synchronize().ok());
  for (int i = 0; i < 5000; ++i) REQUIRE(host.as<double>()[i] == -0.5 * i);
  CHECK_FALSE(gate.timed_out());
}

TEST_CASE("device memory freed outside a stream waits for the queued work that uses it") {
  auto api = CudaApi();
  auto stream = api->CreateStream(0).value();
  TestBytes source(*api, TestBytes::kPinnedHost, 4096);
  TestBytes target(*api, TestBytes::kPinnedHost, 4096);
  std::fill_n(source.get(), 4096, 7);
  std::fill_n(target.get(), 4096, 0);
  void* data = api->AllocateDevice(0, 4096).value();
  Gate gate;
  gate.Hold(NativeOf(*stream));
  REQUIRE(stream->Copy(data, source.get(), 4096).ok());
  REQUIRE(stream->Copy(target.get(), data, 4096).ok());
  {
    LateOpener opener(gate, 50ms);
    api->FreeDevice(0, data);  // returns only after both copies have run
    CHECK(target.get()[4095] == 7);
  }
  CHECK_FALSE(gate.timed_out());
}

TEST_CASE("CUDA streams and events move, and the moved-from ones own nothing") {
  CudaStream stream = CudaStream::Create(0).value();
  CudaEvent event = CudaEvent::Create(0).value();
  const cudaStream_t native = stream.get();
  CudaStream moved(std::move(stream));
  CHECK(moved.native() == native);
  CHECK(stream.native() == nullptr);  // NOLINT: moved from on purpose
  CudaEvent other = CudaEvent::Create(0).value();
  other = std::move(event);
  REQUIRE(other.Record(moved).ok());
  REQUIRE(moved.Synchronize().ok());
  CHECK(other.Query().value());
}

TEST_CASE("the CUDA device API names its devices and refuses bad ordinals") {
  auto api = CudaApi();
  const int count = api->DeviceCount();
  REQUIRE(count >= 1);
  CHECK(std::string(api->name()) == "cuda");
  CHECK(api->Version().rfind("CUDA runtime ", 0) == 0);
  CHECK(CudaBuildVersion().rfind("CUDA ", 0) == 0);
  CHECK(api->CurrentDevice().ok());
  for (int ordinal = 0; ordinal < count; ++ordinal) {
    const std::string identity = api->DeviceIdentity(ordinal).value();
    INFO("device " << ordinal << ": " << identity);
    CHECK(identity.size() >= 12);  // a PCI bus id, "0000:3b:00.0"
    CHECK(identity.find(':') != std::string::npos);
  }
  auto stream = api->CreateStream(count);
  REQUIRE_FALSE(stream.ok());
  CHECK(stream.status().message().find("cuda:" + std::to_string(count) + " is not a device of this process") !=
        std::string::npos);
  CHECK_FALSE(api->CreateEvent(-1).ok());
  CHECK_FALSE(api->DeviceIdentity(count).ok());
  CHECK_FALSE(api->AllocateDevice(count, 16).ok());
}

}  // namespace
}  // namespace accord
