// Tests for HandleState's done() and settled(), which read flags without the
// state's mutex: they turn true exactly when the parts complete (or are
// queued on a device), the first error is the status, and a thread that sees
// done() reads the final status and outputs.
#include "runtime/handle_state.h"

#include <catch2/catch.hpp>

#include <memory>
#include <string>
#include <thread>

namespace accord {
namespace {

class NeverFires : public DeviceEvent {
 public:
  Status RecordNative(void*) override { return Status::OK(); }
  Result<bool> Query() override { return false; }
  Status BlockNative(void*) override { return Status::OK(); }
};

TEST_CASE("a handle is done and settled when its last part completes, with the first error") {
  HandleState state(3);
  CHECK_FALSE(state.done());
  CHECK_FALSE(state.settled());
  CHECK_FALSE(state.CompletePartQuietly(Status::OK(), 0));
  CHECK_FALSE(state.CompletePartQuietly(Status::Aborted("part 1 failed"), 1));
  CHECK_FALSE(state.done());
  CHECK_FALSE(state.settled());
  CHECK(state.CompletePartQuietly(Status::Internal("part 2 failed"), 2));
  CHECK(state.done());
  CHECK(state.settled());
  CHECK(state.status().message() == "part 1 failed");
  // Completing again changes nothing.
  CHECK_FALSE(state.CompletePartQuietly(Status::OK(), 0));
  CHECK(state.Wait(std::chrono::milliseconds(0)).message() == "part 1 failed");
}

TEST_CASE("a handle of no parts is settled from the start and never done") {
  HandleState state(0);
  CHECK(state.settled());
  CHECK_FALSE(state.done());
}

TEST_CASE("a handle whose parts are all on a device is settled but not done") {
  HandleState state(2);
  state.SetOnDevice(0, std::make_shared<NeverFires>());
  CHECK_FALSE(state.settled());
  CHECK_FALSE(state.CompletePartQuietly(Status::OK(), 1));
  CHECK(state.settled());  // part 0 queued, part 1 completed
  CHECK_FALSE(state.done());
  CHECK(state.Wait(std::chrono::milliseconds(0)).code() == StatusCode::kTimeout);
  CHECK(state.CompletePartQuietly(Status::OK(), 0));
  CHECK(state.done());
  CHECK(state.Wait(std::chrono::milliseconds(0)).ok());
}

TEST_CASE("a thread that sees done() reads the completing thread's status and output") {
  // Many rounds, so that the reader often polls while the writer completes.
  for (int round = 0; round < 200; ++round) {
    auto state = std::make_shared<HandleState>(1);
    float data = 0;
    std::thread writer([&] {
      TensorView out{&data, DataType::kFloat32, {1}, Device::CPU()};
      if (state->CompletePartQuietly(Status::Aborted("round " + std::to_string(round)), 0, std::move(out))) {
        state->NotifyWaiters();
      }
    });
    while (!state->done()) std::this_thread::yield();
    CHECK(state->status().message() == "round " + std::to_string(round));
    REQUIRE(state->outputs().size() == 1);
    CHECK(state->outputs()[0].data == &data);
    CHECK(state->Wait(std::nullopt).message() == "round " + std::to_string(round));
    writer.join();
  }
}

}  // namespace
}  // namespace accord
