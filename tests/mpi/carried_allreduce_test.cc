// The carried allreduce (ACCORD_CARRY_SMALL_ALLREDUCE, controller.h): a lone
// small cached allreduce of host memory travels with the negotiation round's
// bits and every rank reduces the inputs itself. Its results must be those
// of the collective for every dtype and op, with the scale factors, into a
// separate output or in place; what must not be carried (too big, several
// tensors in one round) still runs as a collective. The program runs with
// the path on (the default: at np 2 and 3 some operations must be carried)
// and off (ACCORD_CARRY_SMALL_ALLREDUCE=0: none may be).
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>
#include <vector>

#include "test_util.h"

namespace {

using accord::DataType;
using accord::ReduceOp;
using namespace accord_test;

bool CarryOn() {
  const char* env = std::getenv("ACCORD_CARRY_SMALL_ALLREDUCE");
  return env == nullptr || std::string(env) != "0";
}

uint64_t Carried() { return accord::GetMetrics().carried_allreduces; }

// One synchronous allreduce of `n` elements named `name` (data key `key`),
// checked against the reference.
void Checked(const std::string& name, const std::string& key, DataType dtype, int64_t n, const ReduceSpec& spec,
             bool in_place) {
  const ValueKind kind = spec.op == ReduceOp::kProduct ? ValueKind::kProduct : ValueKind::kSmall;
  TestTensor input(dtype, {n}, RankValues(key, Rank(), dtype, n, kind));
  TestTensor output(dtype, {n});
  accord::AllreduceOptions options;
  options.name = name;
  options.op = spec.op;
  options.prescale_factor = spec.prescale;
  options.postscale_factor = spec.postscale;
  const accord::TensorView& out = in_place ? input.view() : output.view();
  if (!WaitOk(Enqueued(accord::Allreduce(input.view(), out, options), name), name)) return;
  const double tolerance = spec.op == ReduceOp::kAverage || spec.prescale != 1.0 ? Tolerance(dtype) : 0.0;
  ExpectValues(name + " (key " + key + ")", out, dtype, {n}, ReferenceAllreduce(key, AllRanks(), dtype, n, kind, spec),
               tolerance);
  if (!in_place) {
    // The input is left as it was.
    ExpectValues(name + " input", input.view(), dtype, {n}, RankValues(key, Rank(), dtype, n, kind));
  }
}

// Whether the carried count moved as it must over work where carrying was
// possible.
void CheckCarried(uint64_t before, const std::string& what) {
  const uint64_t carried = Carried() - before;
  INFO("rank " << Rank() << ": " << carried << " carried allreduces in " << what);
  if (CarryOn() && Size() > 1) {
    // Most are on a quiet machine; a loaded one may find a peer late to
    // every round but one.
    CHECK(carried > 0);
  } else {
    CHECK(carried == 0);
  }
}

TEST_CASE("carried allreduce: every dtype and op, the result of the collective") {
  const ReduceOp ops[] = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct};
  const uint64_t before = Carried();
  for (DataType dtype : AllDataTypes()) {
    for (ReduceOp op : ops) {
      if (dtype == DataType::kBool && op == ReduceOp::kAverage) continue;
      const bool scaled = dtype != DataType::kBool && op != ReduceOp::kProduct;
      const ReduceSpec spec{op, scaled ? 0.5 : 1.0, scaled ? 4.0 : 1.0};
      const std::string name = std::string("carried.") + accord::DataTypeName(dtype) + "." + accord::ReduceOpName(op);
      // The first is negotiated in full and cached; the later ones (the
      // same request, new data) may be carried. In place and not.
      for (int step = 0; step < 4; ++step) {
        Checked(name, name + "." + std::to_string(step), dtype, 7, spec, step % 2 == 1);
      }
    }
  }
  CheckCarried(before, "every dtype and op");
}

TEST_CASE("carried allreduce: many synchronous scalars, every result right") {
  const uint64_t before = Carried();
  for (int step = 0; step < 200; ++step) {
    float value = static_cast<float>(Rank() + 1 + step);
    const accord::TensorView view{&value, DataType::kFloat32, {1}, accord::Device::CPU()};
    const std::string name = "carried.scalar";
    if (!WaitOk(Enqueued(accord::Allreduce(view, view, SumOptions(name)), name), name)) break;
    REQUIRE(value == static_cast<float>(Size() * (Size() + 1) / 2 + Size() * step));
  }
  CheckCarried(before, "200 scalars");
}

TEST_CASE("carried allreduce: a tensor over the carried size runs as a collective") {
  // 1020 bytes at most are carried: 256 floats (1024 bytes) never are.
  for (int step = 0; step < 3; ++step) {
    const uint64_t before = Carried();
    Checked("carried.big", "carried.big." + std::to_string(step), DataType::kFloat32, 256, {ReduceOp::kSum}, true);
    CHECK(Carried() == before);
  }
  // 255 floats (1020 bytes) may be.
  const uint64_t before = Carried();
  for (int step = 0; step < 20; ++step) {
    Checked("carried.edge", "carried.edge." + std::to_string(step), DataType::kFloat32, 255, {ReduceOp::kSum}, false);
  }
  CheckCarried(before, "20 allreduces of 1020 bytes");
}

TEST_CASE("carried allreduce: tensors submitted together, every result right") {
  // Several cached tensors ready in the same round are fused and run as a
  // collective; one that meets its round alone may be carried. Either way
  // each result is the collective's.
  for (int step = 0; step < 10; ++step) {
    std::vector<TestTensor> tensors;
    std::vector<accord::Handle> handles;
    std::vector<std::string> keys;
    for (int i = 0; i < 4; ++i) {
      const std::string name = "carried.together." + std::to_string(i);
      keys.push_back(name + "." + std::to_string(step));
      tensors.emplace_back(DataType::kInt32, accord::Shape{2 + i},
                           RankValues(keys.back(), Rank(), DataType::kInt32, 2 + i));
      accord::AllreduceOptions options;
      options.name = name;
      options.op = ReduceOp::kSum;
      handles.push_back(Enqueued(accord::Allreduce(tensors.back().view(), tensors.back().view(), options), name));
    }
    for (int i = 0; i < 4; ++i) {
      if (!WaitOk(handles[i], keys[i])) continue;
      ExpectValues(keys[i], tensors[i].view(), DataType::kInt32, {2 + i},
                   ReferenceAllreduce(keys[i], AllRanks(), DataType::kInt32, 2 + i, ValueKind::kSmall,
                                      ReduceSpec{ReduceOp::kSum}));
    }
  }
}

TEST_CASE("carried allreduce: a shape that differs across ranks is still an error naming the tensor") {
  // Cached first with the same shape everywhere; then rank 0 submits another
  // shape. Its request no longer matches the cache, goes as a message, and
  // every rank gets the mismatch error.
  if (Size() < 2) return;
  Checked("carried.shape", "carried.shape.0", DataType::kFloat32, 2, {ReduceOp::kSum}, true);
  Checked("carried.shape", "carried.shape.1", DataType::kFloat32, 2, {ReduceOp::kSum}, true);
  const int64_t n = Rank() == 0 ? 3 : 2;
  TestTensor t(DataType::kFloat32, {n});
  accord::AllreduceOptions options = SumOptions("carried.shape");
  const accord::Status status =
      WaitFor(Enqueued(accord::Allreduce(t.view(), t.view(), options), "carried.shape"), "carried.shape");
  INFO("rank " << Rank() << ": " << status);
  CHECK(status.code() == accord::StatusCode::kMismatch);
  CHECK(status.message().find("carried.shape") != std::string::npos);
  // The job goes on.
  Checked("carried.shape.after", "carried.shape.after", DataType::kFloat32, 2, {ReduceOp::kSum}, true);
}

}  // namespace
