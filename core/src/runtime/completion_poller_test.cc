// Tests for CompletionPoller (runtime/completion_poller.h) with the host
// device: handles complete when their batch's done event fires and not
// before; the watchdog fails a batch that never completes, with every batch
// behind it on the same device, aborts their collectives and reports the
// failure once, and other devices go on; Drain waits for what is in flight;
// the idle spin (ACCORD_DEVICE_SPIN_US) and a handle's spin before it waits.
#include "runtime/completion_poller.h"

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>
#include <unordered_map>

#include "device/host/host_device.h"
#include "runtime/handle_state.h"

namespace accord {
namespace {

using namespace std::chrono_literals;

// Counts Abort() calls; the collectives themselves are never called here.
class AbortCounter : public DeviceCollectives {
 public:
  const char* name() const override { return "abort counter"; }
  Status Allreduce(const void*, void*, int64_t, DataType, ReduceOp, DeviceStream&) override { return {}; }
  Status Allgatherv(void*, const std::vector<int64_t>&, DataType, DeviceStream&) override { return {}; }
  Status Broadcast(void*, int64_t, DataType, int, DeviceStream&) override { return {}; }
  Status Alltoallv(const void*, const std::vector<int64_t>&, void*, const std::vector<int64_t>&, int64_t, DataType,
                   DeviceStream&) override {
    return {};
  }
  Status ReduceScatter(const void*, void*, const std::vector<int64_t>&, DataType, ReduceOp, DeviceStream&) override {
    return {};
  }
  void Abort() override { ++aborts; }
  std::atomic<int> aborts{0};
};

// A batch of one allreduce entry named `name`, whose done event is recorded
// on `stream` now.
struct TestBatch {
  std::shared_ptr<HandleState> handle = std::make_shared<HandleState>(1);
  CompletionPoller::Batch batch;

  TestBatch(HostDeviceApi& api, DeviceStream& stream, const std::string& name, int ordinal,
            std::shared_ptr<DeviceCollectives> collectives) {
    std::unordered_map<std::string, TensorEntry> map;
    TensorEntry entry;
    entry.handle = handle;
    entry.part = 0;
    map.emplace(name, std::move(entry));
    batch.entries.push_back(map.extract(name));
    batch.done = api.CreateEvent(0).value();
    REQUIRE(batch.done->Record(stream).ok());
    batch.first_name = name;
    batch.ordinal = ordinal;
    batch.process_set = 3;
    batch.collectives = std::move(collectives);
    handle->SetOnDevice(0, batch.done);
  }
};

// A host stream held shut until Open().
struct Gate {
  std::promise<void> promise;
  void Close(DeviceStream& stream) {
    std::shared_future<void> opened = promise.get_future().share();
    static_cast<HostStream&>(stream).Enqueue([opened] { opened.wait(); });
  }
  void Open() { promise.set_value(); }
};

bool WaitDone(const std::shared_ptr<HandleState>& handle, std::chrono::milliseconds limit) {
  (void)handle->Wait(limit);
  return handle->done();
}

TEST_CASE("the poller completes a handle once its batch's work has run, not before") {
  HostDeviceApi api;
  auto stream = api.CreateStream(0).value();
  std::atomic<int> failures{0};
  CompletionPoller poller(0, [&](const Status&) { ++failures; });
  Gate gate;
  gate.Close(*stream);
  TestBatch one(api, *stream, "grad.a", 0, nullptr);
  poller.Add(std::move(one.batch));
  CHECK_FALSE(WaitDone(one.handle, 50ms));
  CHECK(poller.in_flight() == 1);
  gate.Open();
  REQUIRE(WaitDone(one.handle, 5000ms));
  CHECK(one.handle->status().ok());
  poller.Drain();
  CHECK(poller.in_flight() == 0);
  CHECK(failures == 0);
}

TEST_CASE("the watchdog fails a batch that never completes, and the batches behind it on its device") {
  HostDeviceApi api;
  auto stuck_stream = api.CreateStream(0).value();
  auto other_stream = api.CreateStream(1).value();
  auto collectives = std::make_shared<AbortCounter>();
  std::promise<Status> reported;
  std::atomic<int> reports{0};
  CompletionPoller poller(0.2, [&](const Status& s) {
    if (reports++ == 0) reported.set_value(s);
  });
  Gate stuck, other;
  stuck.Close(*stuck_stream);
  other.Close(*other_stream);
  TestBatch first(api, *stuck_stream, "grad.stuck", 0, collectives);
  TestBatch behind(api, *stuck_stream, "grad.behind", 0, collectives);
  TestBatch elsewhere(api, *other_stream, "grad.elsewhere", 1, nullptr);
  const auto start = std::chrono::steady_clock::now();
  poller.Add(std::move(first.batch));
  poller.Add(std::move(behind.batch));
  REQUIRE(WaitDone(first.handle, 10000ms));
  CHECK(std::chrono::steady_clock::now() - start >= 200ms);
  const Status status = first.handle->status();
  CHECK(status.code() == StatusCode::kAborted);
  CHECK_THAT(status.message(), Catch::Contains("watchdog") && Catch::Contains("'grad.stuck'") &&
                                   Catch::Contains("process set 3") && Catch::Contains("cuda:0") &&
                                   Catch::Contains("within 0.2 s") && Catch::Contains("aborted"));
  REQUIRE(WaitDone(behind.handle, 1000ms));
  CHECK(behind.handle->status().message() == status.message());
  // Aborted on a thread of its own: soon, not necessarily yet.
  for (int i = 0; i < 500 && collectives->aborts == 0; ++i) std::this_thread::sleep_for(10ms);
  CHECK(collectives->aborts >= 1);
  auto report = reported.get_future();
  REQUIRE(report.wait_for(5s) == std::future_status::ready);
  CHECK(report.get().message() == status.message());
  // Another device goes on: its batch completes when its work runs.
  poller.Add(std::move(elsewhere.batch));
  std::this_thread::sleep_for(50ms);
  CHECK_FALSE(elsewhere.handle->done());
  other.Open();
  REQUIRE(WaitDone(elsewhere.handle, 5000ms));
  CHECK(elsewhere.handle->status().ok());
  poller.Drain();
  CHECK(reports == 1);
  stuck.Open();
}

TEST_CASE("the poller's destructor waits for the batches in flight") {
  HostDeviceApi api;
  auto stream = api.CreateStream(0).value();
  Gate gate;
  gate.Close(*stream);
  TestBatch one(api, *stream, "grad.late", 0, nullptr);
  std::thread opener;
  {
    CompletionPoller poller(0, [](const Status&) {});
    poller.Add(std::move(one.batch));
    opener = std::thread([&] {
      std::this_thread::sleep_for(30ms);
      gate.Open();
    });
  }
  CHECK(one.handle->done());
  CHECK(one.handle->status().ok());
  opener.join();
}

TEST_CASE("with an idle spin, the poller takes the next batch without sleeping, and says when it was active") {
  HostDeviceApi api;
  auto stream = api.CreateStream(0).value();
  // A spin long enough that the second batch surely arrives during it.
  CompletionPoller poller(
      0, [](const Status&) {}, std::chrono::microseconds(200ms));
  TestBatch first(api, *stream, "grad.first", 0, nullptr);
  poller.Add(std::move(first.batch));
  REQUIRE(WaitDone(first.handle, 5000ms));
  CHECK(poller.active_within(std::chrono::microseconds(2s)));
  TestBatch second(api, *stream, "grad.second", 0, nullptr);
  poller.Add(std::move(second.batch));
  REQUIRE(WaitDone(second.handle, 5000ms));
  CHECK(second.handle->status().ok());
  // In flight counts as active whatever the window.
  Gate gate;
  gate.Close(*stream);
  TestBatch held(api, *stream, "grad.held", 0, nullptr);
  poller.Add(std::move(held.batch));
  std::this_thread::sleep_for(20ms);
  CHECK(poller.active_within(std::chrono::microseconds(1)));
  gate.Open();
  REQUIRE(WaitDone(held.handle, 5000ms));
  poller.Drain();
  std::this_thread::sleep_for(20ms);
  CHECK_FALSE(poller.active_within(std::chrono::microseconds(1ms)));
  CHECK(poller.in_flight() == 0);
}

TEST_CASE("a handle that spins before waiting completes during the spin or after it, and a timeout bounds the spin") {
  // Another thread completes the handle `delay` after the wait begins.
  auto wait_completed = [](std::chrono::microseconds spin, std::chrono::milliseconds delay) {
    auto handle = std::make_shared<HandleState>(1);
    handle->SpinBeforeWaiting(spin);
    std::thread completer([handle, delay] {
      std::this_thread::sleep_for(delay);
      handle->CompletePart(Status::OK());
    });
    CHECK(handle->Wait(std::nullopt).ok());
    CHECK(handle->done());
    completer.join();
  };
  SECTION("completed during the spin") { wait_completed(std::chrono::microseconds(2s), 5ms); }
  SECTION("completed after the spin: the wait goes on asleep") { wait_completed(std::chrono::microseconds(1ms), 50ms); }
  SECTION("a timeout shorter than the spin ends the wait") {
    auto handle = std::make_shared<HandleState>(1);
    handle->SpinBeforeWaiting(std::chrono::microseconds(30s));
    const auto start = std::chrono::steady_clock::now();
    const Status waited = handle->Wait(20ms);
    CHECK(waited.code() == StatusCode::kTimeout);
    CHECK(std::chrono::steady_clock::now() - start < 10s);  // not the spin's 30 s
    CHECK_FALSE(handle->done());
  }
  SECTION("WaitOnStream: a part queued on the device during the spin") {
    HostDeviceApi api;
    auto producer = api.CreateStream(0).value();
    auto consumer = api.CreateStream(0).value();
    auto handle = std::make_shared<HandleState>(1);
    handle->SpinBeforeWaiting(std::chrono::microseconds(2s));
    std::shared_ptr<DeviceEvent> done = api.CreateEvent(0).value();
    REQUIRE(done->Record(*producer).ok());
    std::thread queuer([&] {
      std::this_thread::sleep_for(5ms);
      handle->SetOnDevice(0, done);
    });
    CHECK(handle->WaitOnStream(consumer->native()).ok());
    queuer.join();
    CHECK_FALSE(handle->done());  // queued, not completed: that is the poller's
  }
}

}  // namespace
}  // namespace accord
