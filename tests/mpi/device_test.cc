// The GPU path across ranks, run without a GPU through the host emulation
// of the device (ACCORD_CUDA_HOST_EMULATION=1, tests/CMakeLists.txt): what
// the shared suites run on "CUDA" tensors (the _cuda runs) does not cover.
//
//   - A producer that writes its tensor late on its own stream, behind a
//     long "kernel": the collective reads the tensor only after the event
//     recorded at enqueue, so every rank gets the sum of the written values.
//   - Handle::WaitOnStream: the caller's stream, not the host, waits for the
//     result.
//   - A tensor on the GPU on one rank and on the CPU on another: a mismatch
//     error on every rank, and the job goes on.
//   - One GPU per rank, and no mixing of CPU and GPU tensors in a group:
//     refused at enqueue.
//   - ACCORD_GPU_OPERATIONS=nccl where NCCL cannot run (the emulation has
//     none): every rank's handle fails with the reason, and the job goes on
//     (the [nccl-refused] cases, run with that variable set).
#include <catch2/catch.hpp>

#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "device/device_factory.h"
#include "device/host/host_device.h"
#include "test_util.h"

namespace {

using accord::DataType;
using namespace accord_test;
using namespace std::chrono_literals;

accord::HostDeviceApi& Emulation() {
  accord::Result<accord::DeviceApi*> api = accord::ProcessDeviceApi(true);
  REQUIRE(api.ok());
  return static_cast<accord::HostDeviceApi&>(**api);
}

accord::TensorView OnGpu(accord::TensorView view, int ordinal = 0) {
  view.device = accord::Device::CUDA(ordinal);
  return view;
}

// A stream of the emulated GPU with a gate in it: what is enqueued after the
// gate runs once the test opens it.
struct GatedStream {
  std::unique_ptr<accord::DeviceStream> stream = Emulation().CreateStream(0).value();
  std::promise<void> gate;

  GatedStream() {
    std::shared_future<void> opened = gate.get_future().share();
    host().Enqueue([opened] { opened.wait(); });
  }
  accord::HostStream& host() { return static_cast<accord::HostStream&>(*stream); }
  void Open() { gate.set_value(); }
};

TEST_CASE("a tensor written late on its producer's stream is reduced as written", "[gpu-path]") {
  const std::string name = "device.late_producer";
  const int64_t n = 1000;
  TestTensor tensor(DataType::kFloat32, {n});  // zeros until the producer runs
  const std::vector<double> mine = RankValues(name, Rank(), DataType::kFloat32, n);
  GatedStream producer;
  producer.host().Enqueue([&] {
    for (int64_t i = 0; i < n; ++i) WriteElement(tensor.view(), i, mine[i]);
  });
  accord::AllreduceOptions options = SumOptions(name);
  options.stream = producer.stream->native();
  accord::Handle handle = Enqueued(accord::Allreduce(OnGpu(tensor.view()), OnGpu(tensor.view()), options), name);
  std::this_thread::sleep_for(50ms);  // the collective may not read before the gate opens
  CHECK_FALSE(handle.Poll());
  producer.Open();
  if (!WaitOk(handle, name)) return;
  ExpectValues(name, tensor.view(), DataType::kFloat32, {n},
               ReferenceAllreduce(name, AllRanks(), DataType::kFloat32, n, ValueKind::kSmall, {}));
}

TEST_CASE("WaitOnStream makes the caller's stream wait for the result", "[gpu-path]") {
  const std::string name = "device.wait_on_stream";
  const int64_t n = 4096;
  TestTensor tensor(DataType::kInt32, {n}, RankValues(name, Rank(), DataType::kInt32, n));
  accord::Handle handle =
      Enqueued(accord::Allreduce(OnGpu(tensor.view()), OnGpu(tensor.view()), SumOptions(name)), name);
  std::unique_ptr<accord::DeviceStream> user = Emulation().CreateStream(0).value();
  REQUIRE(handle.WaitOnStream(user->native()).ok());
  // Work queued on the user's stream now runs after the allreduce: it sees
  // the reduced values whether or not the handle has completed yet.
  std::vector<double> seen(n);
  static_cast<accord::HostStream&>(*user).Enqueue([&] {
    for (int64_t i = 0; i < n; ++i) seen[i] = ReadElement(tensor.view(), i);
  });
  REQUIRE(user->Synchronize().ok());
  const std::vector<double> expected = ReferenceAllreduce(name, AllRanks(), DataType::kInt32, n, ValueKind::kSmall, {});
  int64_t wrong = 0;
  for (int64_t i = 0; i < n; ++i) wrong += seen[i] != expected[i];
  INFO("rank " << Rank() << ": elements the user's stream saw before the allreduce wrote them");
  CHECK(wrong == 0);
  CHECK(WaitOk(handle, name));
}

TEST_CASE("a tensor on the GPU on one rank and on the CPU on another fails on every rank", "[gpu-path]") {
  if (Size() < 2) return;
  const std::string name = "device.mismatch";
  TestTensor tensor(DataType::kFloat32, {8}, RankValues(name, Rank(), DataType::kFloat32, 8));
  accord::TensorView view = tensor.view();
  if (Rank() == 0) view = OnGpu(view);
  accord::Handle handle = Enqueued(accord::Allreduce(view, view, SumOptions(name)), name);
  const accord::Status status = WaitFor(handle, name);
  INFO("rank " << Rank() << ": " << status);
  CHECK(status.code() == accord::StatusCode::kMismatch);
  CHECK_THAT(status.message(), Catch::Contains(name) && Catch::Contains("device type"));
  // The job goes on.
  CheckSumAllreduce("device.after_mismatch", 16);
}

TEST_CASE("one GPU per rank, and no mixing of CPU and GPU tensors in a group", "[gpu-path]") {
  TestTensor a(DataType::kFloat32, {4}), b(DataType::kFloat32, {4});
  accord::AllreduceOptions options = SumOptions("device.first");
  // The first CUDA tensor fixes this rank's GPU (cuda:0, as in every case above).
  accord::Handle first = Enqueued(accord::Allreduce(OnGpu(a.view()), OnGpu(a.view()), options), "device.first");
  CHECK(WaitOk(first, "device.first"));
  accord::Result<accord::Handle> other =
      accord::Allreduce(OnGpu(b.view(), 1), OnGpu(b.view(), 1), SumOptions("device.other_gpu"));
  REQUIRE_FALSE(other.ok());
  CHECK(other.status().code() == accord::StatusCode::kInvalidArgument);
  CHECK_THAT(other.status().message(), Catch::Contains("cuda:1") && Catch::Contains("one GPU per rank"));
  accord::AllreduceOptions group = SumOptions("device.mixed");
  accord::Result<accord::Handle> mixed =
      accord::GroupedAllreduce({a.view(), OnGpu(b.view())}, {a.view(), OnGpu(b.view())}, group);
  REQUIRE_FALSE(mixed.ok());
  CHECK(mixed.status().code() == accord::StatusCode::kInvalidArgument);
  CHECK_THAT(mixed.status().message(), Catch::Contains("must all be on the CPU or all on the GPU"));
  // A GPU tensor whose output is on the CPU.
  accord::Result<accord::Handle> across = accord::Allreduce(OnGpu(a.view()), b.view(), SumOptions("device.across"));
  REQUIRE_FALSE(across.ok());
  CHECK_THAT(across.status().message(), Catch::Contains("must match the input"));
}

TEST_CASE("NCCL asked for where it cannot run: every rank fails with the reason, and the job goes on",
          "[.nccl-refused]") {
  const std::string name = "device.nccl_refused";
  TestTensor tensor(DataType::kFloat32, {8}, RankValues(name, Rank(), DataType::kFloat32, 8));
  accord::Handle handle =
      Enqueued(accord::Allreduce(OnGpu(tensor.view()), OnGpu(tensor.view()), SumOptions(name)), name);
  const accord::Status status = WaitFor(handle, name);
  INFO("rank " << Rank() << ": " << status);
  CHECK(status.code() == accord::StatusCode::kInternal);
  // The reason: the emulation (a build with NCCL) or no NCCL at all.
  CHECK_THAT(status.message(), Catch::Contains("ACCORD_GPU_OPERATIONS=nccl") &&
                                   (Catch::Contains("ACCORD_CUDA_HOST_EMULATION") || Catch::Contains("has no NCCL")));
  // The same again (the refusal is not cached as a success), then CPU work.
  accord::Handle again =
      Enqueued(accord::Allreduce(OnGpu(tensor.view()), OnGpu(tensor.view()), SumOptions(name + ".again")), name);
  CHECK(WaitFor(again, name).code() == accord::StatusCode::kInternal);
  CheckSumAllreduce("device.after_refusal", 16);
}

}  // namespace
