// Error cases: disagreement between ranks is an error on every rank, never a
// hang. The failed handle's Status is kMismatch with a message that names
// the tensor and the differing values; tensors enqueued next to it still
// complete correctly. Local mistakes fail at enqueue (kInvalidArgument).
// Wait(timeout) on an operation nobody else submits returns kTimeout.
//
// The last rank is the odd one out in every mismatch, so with one rank there
// is nothing to disagree about and those cases check nothing (the same on
// every rank).
#include <catch2/catch.hpp>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "test_util.h"

namespace {

using accord::DataType;
using accord::ReduceOp;
using accord::Shape;
using accord::StatusCode;
using namespace accord_test;

bool IsOddOneOut() { return Rank() == Size() - 1; }

// A correct allreduce to enqueue next to a failing one.
struct Neighbour {
  std::string name;
  TestTensor tensor;
  accord::Handle handle;

  explicit Neighbour(std::string n) : name(std::move(n)) {
    tensor = TestTensor(DataType::kFloat32, {33}, RankValues(name, Rank(), DataType::kFloat32, 33));
    accord::AllreduceOptions options;
    options.name = name;
    options.op = ReduceOp::kSum;
    handle = Enqueued(accord::Allreduce(tensor.view(), tensor.view(), options), name);
  }
  void Check() {
    if (!WaitOk(handle, name)) return;
    ExpectValues(
        name, tensor.view(), DataType::kFloat32, {33},
        ReferenceAllreduce(name, AllRanks(), DataType::kFloat32, 33, ValueKind::kSmall, ReduceSpec{ReduceOp::kSum}));
  }
};

// Enqueues `submit` (which must enqueue `name`) between two correct
// allreduces, and checks that it fails with kMismatch on every rank with a
// message containing the name, the odd rank out and every string in
// `mentions`, while the neighbours complete correctly.
void ExpectMismatch(const std::string& name, const std::function<accord::Result<accord::Handle>()>& submit,
                    const std::vector<std::string>& mentions) {
  if (Size() < 2) return;
  Neighbour before(name + ".before");
  accord::Result<accord::Handle> result = submit();
  Neighbour after(name + ".after");
  INFO("rank " << Rank() << ": " << name);
  CHECK(result.ok());  // a mismatch is found in negotiation, not at enqueue
  if (result.ok()) {
    const accord::Status status = WaitFor(result.value(), name);
    INFO("status: " << status);
    CHECK(status.code() == StatusCode::kMismatch);
    CHECK_THAT(status.message(), Catch::Contains(name));
    // The odd one out is named ("rank 2 has float64").
    CHECK_THAT(status.message(), Catch::Contains("rank " + std::to_string(Size() - 1)));
    for (const std::string& mention : mentions) {
      CHECK_THAT(status.message(), Catch::Contains(mention));
    }
  }
  before.Check();
  after.Check();
}

// Expects an enqueue (made identically on every rank) to fail at once.
void ExpectEnqueueError(const std::string& what, accord::Result<accord::Handle> result, StatusCode code) {
  INFO("rank " << Rank() << ": " << what << ": " << result.status());
  CHECK(result.status().code() == code);
  if (result.ok()) (void)WaitFor(result.value(), what);  // do not leave it in flight
}

accord::AllreduceOptions Options(const std::string& name, ReduceOp op = ReduceOp::kSum) {
  accord::AllreduceOptions options;
  options.name = name;
  options.op = op;
  return options;
}

TEST_CASE("errors: allreduce mismatches fail on every rank, neighbours complete") {
  TestTensor f32(DataType::kFloat32, {6});
  TestTensor f64(DataType::kFloat64, {6});
  TestTensor shape4(DataType::kFloat32, {4});
  TestTensor shape2x3(DataType::kFloat32, {2, 3});

  ExpectMismatch("err.dtype",
                 [&] {
                   const accord::TensorView& t = IsOddOneOut() ? f64.view() : f32.view();
                   return accord::Allreduce(t, t, Options("err.dtype"));
                 },
                 {"float32", "float64"});

  ExpectMismatch("err.shape",
                 [&] {
                   const accord::TensorView& t = IsOddOneOut() ? shape4.view() : shape2x3.view();
                   return accord::Allreduce(t, t, Options("err.shape"));
                 },
                 {accord::ShapeToString({4}), accord::ShapeToString({2, 3})});

  ExpectMismatch("err.op",
                 [&] {
                   const ReduceOp op = IsOddOneOut() ? ReduceOp::kMax : ReduceOp::kSum;
                   return accord::Allreduce(f32.view(), f32.view(), Options("err.op", op));
                 },
                 {accord::ReduceOpName(ReduceOp::kMax), accord::ReduceOpName(ReduceOp::kSum)});

  ExpectMismatch("err.prescale",
                 [&] {
                   accord::AllreduceOptions options = Options("err.prescale");
                   options.prescale_factor = IsOddOneOut() ? 0.25 : 0.5;
                   return accord::Allreduce(f32.view(), f32.view(), options);
                 },
                 {"0.25", "0.5"});

  ExpectMismatch("err.postscale",
                 [&] {
                   accord::AllreduceOptions options = Options("err.postscale");
                   options.postscale_factor = IsOddOneOut() ? 0.25 : 0.5;
                   return accord::Allreduce(f32.view(), f32.view(), options);
                 },
                 {"0.25", "0.5"});
}

TEST_CASE("errors: a mismatch on a name the response cache knows") {
  // Step 0 agrees (the request gets cached), step 1 the odd rank changes
  // the shape, step 2 agrees again: a cached request must not hide step 1.
  TestTensor agreed(DataType::kFloat32, {6});
  TestTensor changed(DataType::kFloat32, {7});
  for (int step = 0; step < 3; ++step) {
    const std::string key = "err.cached.step" + std::to_string(step);
    agreed = TestTensor(DataType::kFloat32, {6}, RankValues(key, Rank(), DataType::kFloat32, 6));
    const bool mismatch = step == 1 && IsOddOneOut() && Size() >= 2;
    const accord::TensorView& t = mismatch ? changed.view() : agreed.view();
    accord::Handle handle = Enqueued(accord::Allreduce(t, t, Options("err.cached")), key);
    const accord::Status status = WaitFor(handle, key);
    INFO("rank " << Rank() << ": " << key << ": " << status);
    if (step == 1 && Size() >= 2) {
      CHECK(status.code() == StatusCode::kMismatch);
      CHECK_THAT(status.message(), Catch::Contains("err.cached"));
    } else if (status.ok()) {
      ExpectValues(
          key, agreed.view(), DataType::kFloat32, {6},
          ReferenceAllreduce(key, AllRanks(), DataType::kFloat32, 6, ValueKind::kSmall, ReduceSpec{ReduceOp::kSum}));
    } else {
      CHECK(status.ok());
    }
  }
}

TEST_CASE("errors: mismatches of the other collectives") {
  TestTensor bcast(DataType::kInt32, {5});
  ExpectMismatch("err.root",
                 [&] {
                   accord::CollectiveOptions options;
                   options.name = "err.root";
                   return accord::Broadcast(bcast.view(), IsOddOneOut() ? Size() - 1 : 0, options);
                 },
                 {});

  TestTensor gather_a(DataType::kFloat32, {2, 3});
  TestTensor gather_b(DataType::kFloat32, {2, 5});
  ExpectMismatch("err.gather_dims",
                 [&] {
                   accord::CollectiveOptions options;
                   options.name = "err.gather_dims";
                   return accord::Allgather(IsOddOneOut() ? gather_b.view() : gather_a.view(), nullptr, options);
                 },
                 {});

  TestTensor a2a_a(DataType::kFloat32, {static_cast<int64_t>(Size()), 2});
  TestTensor a2a_b(DataType::kFloat32, {static_cast<int64_t>(Size()), 3});
  ExpectMismatch("err.alltoall_dims",
                 [&] {
                   accord::CollectiveOptions options;
                   options.name = "err.alltoall_dims";
                   return accord::Alltoall(IsOddOneOut() ? a2a_b.view() : a2a_a.view(), {}, nullptr, options);
                 },
                 {});

  TestTensor rs_a(DataType::kFloat32, {4, 2});
  TestTensor rs_b(DataType::kFloat32, {5, 2});
  ExpectMismatch("err.reducescatter_shape",
                 [&] {
                   accord::ReducescatterOptions options;
                   options.name = "err.reducescatter_shape";
                   options.op = ReduceOp::kSum;
                   return accord::Reducescatter(IsOddOneOut() ? rs_b.view() : rs_a.view(), nullptr, options);
                 },
                 {});

  // Different collectives under one name.
  TestTensor kind(DataType::kFloat32, {4, 2});
  ExpectMismatch("err.kind",
                 [&] {
                   if (IsOddOneOut()) {
                     accord::CollectiveOptions options;
                     options.name = "err.kind";
                     return accord::Allgather(kind.view(), nullptr, options);
                   }
                   return accord::Allreduce(kind.view(), kind.view(), Options("err.kind"));
                 },
                 {});
}

TEST_CASE("errors: invalid arguments fail at enqueue") {
  TestTensor t(DataType::kFloat32, {6});
  TestTensor other_shape(DataType::kFloat32, {7});
  TestTensor other_dtype(DataType::kInt32, {6});
  ExpectEnqueueError("allreduce into an output of another shape",
                     accord::Allreduce(t.view(), other_shape.view(), Options("inv.out_shape")),
                     StatusCode::kInvalidArgument);
  ExpectEnqueueError("allreduce into an output of another dtype",
                     accord::Allreduce(t.view(), other_dtype.view(), Options("inv.out_dtype")),
                     StatusCode::kInvalidArgument);

  accord::ReducescatterOptions rs;
  rs.name = "inv.rs_op";
  for (ReduceOp op : {ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct}) {
    rs.op = op;
    ExpectEnqueueError(std::string("reducescatter with ") + accord::ReduceOpName(op),
                       accord::Reducescatter(t.view(), nullptr, rs), StatusCode::kInvalidArgument);
  }

  accord::CollectiveOptions options;
  options.name = "inv.root";
  ExpectEnqueueError("broadcast from a root outside the set", accord::Broadcast(t.view(), Size(), options),
                     StatusCode::kInvalidArgument);
  ExpectEnqueueError("broadcast from a negative root", accord::Broadcast(t.view(), -1, options),
                     StatusCode::kInvalidArgument);

  // Alltoall splits: wrong count, not adding up to dim 0, negative; and an
  // implicit even split of a dim 0 that the size does not divide.
  TestTensor rows(DataType::kFloat32, {static_cast<int64_t>(Size()) * 2, 3});
  options.name = "inv.splits";
  std::vector<int64_t> too_many(Size() + 1, 0);
  too_many[0] = Size() * 2;
  ExpectEnqueueError("alltoall with size+1 splits", accord::Alltoall(rows.view(), too_many, nullptr, options),
                     StatusCode::kInvalidArgument);
  std::vector<int64_t> short_sum(Size(), 1);  // adds up to size, dim 0 is 2*size
  ExpectEnqueueError("alltoall with splits that do not add up to dim 0",
                     accord::Alltoall(rows.view(), short_sum, nullptr, options), StatusCode::kInvalidArgument);
  TestTensor odd_rows(DataType::kFloat32, {static_cast<int64_t>(Size()) * 2 + 1});
  if (Size() >= 2) {                           // with one rank these are valid
    std::vector<int64_t> negative(Size(), 2);  // -1, 2, ..., 2, 5: adds up to 2 * size
    negative[0] = -1;
    negative.back() += 3;
    ExpectEnqueueError("alltoall with a negative split", accord::Alltoall(rows.view(), negative, nullptr, options),
                       StatusCode::kInvalidArgument);
    ExpectEnqueueError("alltoall of an indivisible dim 0 without splits",
                       accord::Alltoall(odd_rows.view(), {}, nullptr, options), StatusCode::kInvalidArgument);
  }
  // Outputs that overlap other memory of the call: a staged allreduce
  // writes them while later windows still read the inputs.
  TestTensor wide(DataType::kFloat32, {12});
  auto part = [&wide](int64_t at, int64_t n) {
    accord::TensorView v = wide.view();
    v.data = static_cast<float*>(v.data) + at;
    v.shape = {n};
    return v;
  };
  ExpectEnqueueError("allreduce into an output that partly overlaps the input",
                     accord::Allreduce(part(0, 6), part(3, 6), Options("inv.overlap")), StatusCode::kInvalidArgument);
  ExpectEnqueueError(
      "grouped allreduce whose members' outputs are swapped",
      accord::GroupedAllreduce({part(0, 6), part(6, 6)}, {part(6, 6), part(0, 6)}, Options("inv.swapped")),
      StatusCode::kInvalidArgument);
  // Grouped allreduce with fewer outputs than inputs.
  accord::AllreduceOptions grouped = Options("inv.grouped");
  ExpectEnqueueError("grouped allreduce with mismatched input/output counts",
                     accord::GroupedAllreduce({t.view(), t.view()}, {t.view()}, grouped), StatusCode::kInvalidArgument);
}

TEST_CASE("errors: a name already in flight on this rank is rejected at enqueue") {
  if (Size() < 2) return;  // needs a rank that holds the first op back
  TestTensor first(DataType::kFloat32, {10}, RankValues("dup", Rank(), DataType::kFloat32, 10));
  TestTensor second(DataType::kFloat32, {10});
  accord::Handle first_handle;
  if (Rank() != 0) {
    // Rank 0 submits "dup" only after the barrier, which the others enter
    // after their second enqueue: "dup" is certainly still in flight here.
    first_handle = Enqueued(accord::Allreduce(first.view(), first.view(), Options("dup")), "dup");
    ExpectEnqueueError("a second \"dup\" while the first is in flight",
                       accord::Allreduce(second.view(), second.view(), Options("dup")), StatusCode::kInvalidArgument);
  }
  WaitOk(Enqueued(accord::Barrier(), "barrier"), "barrier");
  if (Rank() == 0) {
    first_handle = Enqueued(accord::Allreduce(first.view(), first.view(), Options("dup")), "dup");
  }
  if (WaitOk(first_handle, "dup")) {
    ExpectValues(
        "dup", first.view(), DataType::kFloat32, {10},
        ReferenceAllreduce("dup", AllRanks(), DataType::kFloat32, 10, ValueKind::kSmall, ReduceSpec{ReduceOp::kSum}));
  }
}

TEST_CASE("errors: an unnamed op refused on one rank alone does not shift the next unnamed names") {
  // Unnamed ops match by their numbers ("allreduce.noname.<n>"); an op that
  // a check refuses must not use one up, or every later unnamed op of this
  // rank would wait for a name the others never submit.
  TestTensor flags(DataType::kBool, {4});
  TestTensor rows(DataType::kFloat32, {6, 2});
  if (Rank() == 0) {
    accord::AllreduceOptions average;  // unnamed, and bool cannot be averaged
    average.op = ReduceOp::kAverage;
    ExpectEnqueueError("an unnamed bool Average", accord::Allreduce(flags.view(), flags.view(), average),
                       StatusCode::kInvalidArgument);
    ExpectEnqueueError("an unnamed broadcast from a root outside the set", accord::Broadcast(rows.view(), Size() + 3),
                       StatusCode::kInvalidArgument);
    ExpectEnqueueError("an unnamed alltoall with bad splits", accord::Alltoall(rows.view(), {1, 2, 3, 4, 5}),
                       StatusCode::kInvalidArgument);
    ExpectEnqueueError("an unnamed grouped allgather of a scalar",
                       accord::GroupedAllgather({TestTensor(DataType::kFloat32, {}).view()}),
                       StatusCode::kInvalidArgument);
  }
  TestTensor sum(DataType::kInt32, {3}, RankValues("unnamed.after", Rank(), DataType::kInt32, 3));
  accord::AllreduceOptions plain;
  plain.op = ReduceOp::kSum;
  accord::Handle reduced = Enqueued(accord::Allreduce(sum.view(), sum.view(), plain), "unnamed allreduce");
  TestTensor root(DataType::kFloat32, {6, 2}, RankValues("unnamed.bcast", Rank(), DataType::kFloat32, 12));
  accord::Handle broadcast = Enqueued(accord::Broadcast(root.view(), 0), "unnamed broadcast");
  TestTensor gathered(DataType::kFloat32, {2}, RankValues("unnamed.gather", Rank(), DataType::kFloat32, 2));
  accord::Handle gather = Enqueued(accord::GroupedAllgather({gathered.view()}), "unnamed grouped allgather");
  if (WaitOk(reduced, "unnamed allreduce")) {
    ExpectValues("unnamed allreduce", sum.view(), DataType::kInt32, {3},
                 ReferenceAllreduce("unnamed.after", AllRanks(), DataType::kInt32, 3, ValueKind::kSmall,
                                    ReduceSpec{ReduceOp::kSum}));
  }
  if (WaitOk(broadcast, "unnamed broadcast")) {
    ExpectValues("unnamed broadcast", root.view(), DataType::kFloat32, {6, 2},
                 RankValues("unnamed.bcast", 0, DataType::kFloat32, 12));
  }
  CHECK(WaitOk(gather, "unnamed grouped allgather"));
}

TEST_CASE("errors: the runtime still works after all of the above") {
  Neighbour healthy("err.healthy");
  healthy.Check();
}

// Last: its operation stays pending until main's Shutdown().
TEST_CASE("errors: Wait(timeout) on an operation no other rank submits times out") {
  if (Size() < 2) return;  // alone, the operation would simply complete
  const std::string name = "lonely." + std::to_string(Rank());
  std::vector<TestTensor> tensors;
  tensors.emplace_back(DataType::kFloat32, Shape{3});
  accord::Result<accord::Handle> lonely = accord::Allreduce(tensors[0].view(), tensors[0].view(), Options(name));
  INFO("rank " << Rank() << ": " << name);
  CHECK(lonely.ok());
  if (!lonely.ok()) return;
  const auto start = std::chrono::steady_clock::now();
  const accord::Status status = lonely.value().Wait(std::chrono::milliseconds(200));
  const auto waited = std::chrono::steady_clock::now() - start;
  INFO("Wait(200ms) returned " << status);
  CHECK(status.code() == StatusCode::kTimeout);
  CHECK(waited >= std::chrono::milliseconds(190));
  CHECK_FALSE(lonely.value().Poll());
  // The others are fine meanwhile.
  Neighbour healthy("err.beside_lonely");
  healthy.Check();
  ExpectShutDownAtExit(lonely.value(), std::move(tensors), name);
}

}  // namespace
