// Tests for RunAllreduce's choice of path for a fused batch (ops/allreduce_op.cc):
// with no staging window and a backend that reduces several buffers in place
// (Backend::AllreducesPartsInPlace), the batch is reduced in the tensors' own
// memory, scale factors and the division of an Average applied there;
// otherwise (a backend that cannot, a rank that has joined, a staging window)
// it is packed into the fusion buffer. The backend here is a stand-in that
// adds 1000 to every element and records its calls; the real ring runs in
// ring_allreduce_test and, across hosts, in the bed's suites.
#include <catch2/catch.hpp>

#include <memory>
#include <vector>

#include "fusion/fusion_buffer.h"
#include "ops/collective_ops.h"

namespace accord {
namespace {

class RecordingBackend : public Backend {
 public:
  explicit RecordingBackend(bool parts_in_place) : parts_in_place_(parts_in_place) {}
  const char* name() const override { return "recording"; }
  bool Supports(DeviceType device) const override { return device == DeviceType::kCPU; }
  bool AllreducesPartsInPlace(int64_t count, DataType) const override {
    asked_count = count;
    return parts_in_place_;
  }
  Status Allreduce(void* buffer, int64_t count, DataType, ReduceOp) override {
    buffers.push_back(buffer);
    Add(static_cast<float*>(buffer), count);
    return Status::OK();
  }
  // Finishes each part in two pieces, the second first, as a ring would
  // finish its chunks in whatever order they complete.
  Status AllreduceParts(const std::vector<BufferPart>& parts, DataType, ReduceOp,
                        const AllreduceFinish& finish) override {
    part_calls.push_back(parts);
    finished.push_back(static_cast<bool>(finish));
    for (const BufferPart& part : parts) {
      float* data = static_cast<float*>(part.data);
      Add(data, part.count);
      if (!finish) continue;
      const int64_t half = part.count / 2;
      finish(data + half, part.count - half);
      if (half > 0) finish(data, half);
    }
    return Status::OK();
  }
  Status Allgatherv(void*, const std::vector<int64_t>&, DataType) override { return Unused(); }
  Status Broadcast(void*, int64_t, DataType, int) override { return Unused(); }
  Status Alltoallv(const void*, const std::vector<int64_t>&, void*, const std::vector<int64_t>&, int64_t,
                   DataType) override {
    return Unused();
  }
  Status ReduceScatter(const void*, void*, const std::vector<int64_t>&, DataType, ReduceOp) override {
    return Unused();
  }
  Status SendRecv(const void*, int64_t, void*, int64_t, DataType, int) override { return Unused(); }

  std::vector<void*> buffers;                       // Allreduce calls
  std::vector<std::vector<BufferPart>> part_calls;  // AllreduceParts calls
  std::vector<bool> finished;                       // and whether each had a finish
  mutable int64_t asked_count = -1;

 private:
  static void Add(float* data, int64_t count) {
    for (int64_t i = 0; i < count; ++i) data[i] += 1000.0f;
  }
  static Status Unused() { return Status::Internal("not used here"); }
  bool parts_in_place_;
};

// A fused batch of float tensors: element j of tensor i is 10 * i + j.
// Odd tensors have an output of their own; `joined` leaves the last without
// an entry (a rank that has joined).
struct Batch {
  std::vector<Response> responses;
  std::vector<std::vector<float>> inputs, outputs;
  std::vector<TensorEntry> entries;
  std::vector<OpItem> items;

  Batch(const std::vector<int64_t>& sizes, ReduceOp op, double prescale, double postscale, bool joined = false) {
    const size_t n = sizes.size();
    responses.resize(n);
    inputs.resize(n);
    outputs.resize(n);
    entries.resize(n);
    for (size_t i = 0; i < n; ++i) {
      Response& r = responses[i];
      r.type = OpType::kAllreduce;
      r.name = "t" + std::to_string(i);
      r.dtype = DataType::kFloat32;
      r.shape = {sizes[i]};
      r.op = op;
      r.prescale_factor = prescale;
      r.postscale_factor = postscale;
      for (int64_t j = 0; j < sizes[i]; ++j) inputs[i].push_back(static_cast<float>(10 * i + j));
      TensorEntry& e = entries[i];
      e.input = TensorView{inputs[i].data(), DataType::kFloat32, {sizes[i]}, Device::CPU()};
      e.output_is_input = i % 2 == 0;
      if (!e.output_is_input) {
        outputs[i].assign(static_cast<size_t>(sizes[i]), -1.0f);
        e.output = TensorView{outputs[i].data(), DataType::kFloat32, {sizes[i]}, Device::CPU()};
      }
      items.push_back({&responses[i], joined && i + 1 == n ? nullptr : &entries[i]});
    }
  }

  // Where tensor i's result is.
  const std::vector<float>& Result(size_t i) const { return i % 2 == 0 ? inputs[i] : outputs[i]; }
  void* ResultData(size_t i) { return i % 2 == 0 ? inputs[i].data() : outputs[i].data(); }
};

Status Run(Batch& batch, RecordingBackend& backend, int64_t window_bytes) {
  FusionBuffer buffer;
  const OpContext ctx{&backend, &buffer, 0, 2, nullptr, window_bytes};
  return RunAllreduce(ctx, batch.items);
}

// Each result is ((10 i + j) * prescale + 1000) * postscale / divisor.
void CheckResults(const Batch& batch, double prescale, double postscale, int divisor, size_t tensors) {
  for (size_t i = 0; i < tensors; ++i) {
    const std::vector<float>& got = batch.Result(i);
    for (size_t j = 0; j < got.size(); ++j) {
      INFO("tensor " << i << " element " << j);
      CHECK(got[j] == Approx(((10.0 * i + j) * prescale + 1000.0) * postscale / divisor));
    }
  }
}

TEST_CASE("allreduce op: a fused batch goes to the backend in its own memory where it can", "[ops]") {
  RecordingBackend backend(/*parts_in_place=*/true);
  Batch batch({5, 3, 0, 7}, ReduceOp::kAverage, 2.0, 0.5);
  REQUIRE(Run(batch, backend, 0).ok());
  CHECK(backend.asked_count == 15);
  CHECK(backend.buffers.empty());
  REQUIRE(backend.part_calls.size() == 1);
  const std::vector<BufferPart>& parts = backend.part_calls[0];
  REQUIRE(parts.size() == 4);
  for (size_t i = 0; i < parts.size(); ++i) {
    INFO("part " << i);
    CHECK(parts[i].count == batch.responses[i].shape[0]);
    if (parts[i].count > 0) CHECK(parts[i].data == batch.ResultData(i));
  }
  // The postscale and the division are the backend's to apply.
  CHECK(backend.finished == std::vector<bool>{true});
  CheckResults(batch, 2.0, 0.5, 2, 4);
  // Out of place: the inputs are left as they were.
  CHECK(batch.inputs[1][2] == 12.0f);
}

TEST_CASE("allreduce op: a lone tensor is reduced in its own memory, and scaled once", "[ops]") {
  SECTION("through the backend's parts, which applies the scaling") {
    RecordingBackend backend(/*parts_in_place=*/true);
    Batch batch({9}, ReduceOp::kAverage, 1.0, 3.0);
    REQUIRE(Run(batch, backend, 0).ok());
    CHECK(backend.buffers.empty());
    REQUIRE(backend.part_calls.size() == 1);
    CHECK(backend.part_calls[0].size() == 1);
    CHECK(backend.finished == std::vector<bool>{true});
    CheckResults(batch, 1.0, 3.0, 2, 1);
  }
  SECTION("through Allreduce, the scaling a pass of its own") {
    RecordingBackend backend(/*parts_in_place=*/false);
    Batch batch({1, 9}, ReduceOp::kAverage, 1.0, 3.0);
    batch.items.erase(batch.items.begin());  // tensor 1 alone: an output of its own
    REQUIRE(Run(batch, backend, 0).ok());
    CHECK(backend.part_calls.empty());
    REQUIRE(backend.buffers.size() == 1);
    CHECK(backend.buffers[0] == batch.ResultData(1));
    const std::vector<float>& got = batch.Result(1);
    for (size_t j = 0; j < got.size(); ++j) CHECK(got[j] == Approx((10.0 + j + 1000.0) * 3.0 / 2));
  }
  SECTION("a Sum with no factors has nothing to finish") {
    RecordingBackend backend(/*parts_in_place=*/true);
    Batch batch({4, 6}, ReduceOp::kSum, 1.0, 1.0);
    REQUIRE(Run(batch, backend, 0).ok());
    CHECK(backend.finished == std::vector<bool>{false});
    CheckResults(batch, 1.0, 1.0, 1, 2);
  }
}

TEST_CASE("allreduce op: a fused batch is packed where the backend cannot work in place", "[ops]") {
  SECTION("the backend reduces one buffer only") {
    RecordingBackend backend(/*parts_in_place=*/false);
    Batch batch({5, 3, 7}, ReduceOp::kSum, 1.0, 1.0);
    REQUIRE(Run(batch, backend, 0).ok());
    CHECK(backend.part_calls.empty());
    REQUIRE(backend.buffers.size() == 1);
    CheckResults(batch, 1.0, 1.0, 1, 3);
  }
  SECTION("a rank that has joined contributes zeros from the fusion buffer") {
    RecordingBackend backend(/*parts_in_place=*/true);
    Batch batch({5, 3, 7}, ReduceOp::kSum, 1.0, 1.0, /*joined=*/true);
    REQUIRE(Run(batch, backend, 0).ok());
    CHECK(backend.part_calls.empty());
    REQUIRE(backend.buffers.size() == 1);
    CheckResults(batch, 1.0, 1.0, 1, 2);
  }
  SECTION("a staging window") {
    RecordingBackend backend(/*parts_in_place=*/true);
    Batch batch({5, 3, 7}, ReduceOp::kSum, 1.0, 1.0);
    REQUIRE(Run(batch, backend, 8 * sizeof(float)).ok());
    CHECK(backend.part_calls.empty());
    CHECK(backend.buffers.size() == 2);  // 15 elements in windows of 8
    CheckResults(batch, 1.0, 1.0, 1, 3);
  }
}

// Where the backend could take parts, every rank hands it the finish, a
// rank that packs too: the ring sends finished values on, so a rank that
// finished after the call would mix finished and unfinished segments.
TEST_CASE("allreduce op: a packed call the backend could run over parts finishes inside it", "[ops]") {
  SECTION("a rank that has joined") {
    RecordingBackend backend(/*parts_in_place=*/true);
    Batch batch({5, 3, 7}, ReduceOp::kAverage, 2.0, 0.5, /*joined=*/true);
    REQUIRE(Run(batch, backend, 0).ok());
    CHECK(backend.buffers.empty());
    REQUIRE(backend.part_calls.size() == 1);
    CHECK(backend.part_calls[0].size() == 1);
    CHECK(backend.part_calls[0][0].count == 15);
    CHECK(backend.finished == std::vector<bool>{true});
    CheckResults(batch, 2.0, 0.5, 2, 2);
  }
  SECTION("a staging window") {
    RecordingBackend backend(/*parts_in_place=*/true);
    Batch batch({5, 3, 7}, ReduceOp::kAverage, 1.0, 4.0);
    REQUIRE(Run(batch, backend, 8 * sizeof(float)).ok());
    CHECK(backend.buffers.empty());
    CHECK(backend.part_calls.size() == 2);
    CHECK(backend.finished == std::vector<bool>{true, true});
    CheckResults(batch, 1.0, 4.0, 2, 3);
  }
}

}  // namespace
}  // namespace accord
