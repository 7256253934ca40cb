// Allreduce across ranks: every op x every dtype, scaled and not, in place
// and into a separate output; hundreds of mixed tensors in flight at once
// (what fusion packs together); enqueues from several threads; repeated
// synchronous calls with one name (the response-cache path); barrier.
//
// The same program runs fused (default threshold) and unfused
// (ACCORD_FUSION_THRESHOLD=0); see tests/CMakeLists.txt. The allgather,
// broadcast, alltoall, reducescatter and grouped cases live in
// gather_scatter_test.cc, part of the same program.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"

namespace {

using accord::DataType;
using accord::ReduceOp;
using namespace accord_test;

// One allreduce to enqueue, and what it should produce.
struct AllreduceCase {
  std::string name;  // the collective's name and the data key
  DataType dtype = DataType::kFloat32;
  accord::Shape shape;
  ValueKind kind = ValueKind::kSmall;
  ReduceSpec spec;
  bool in_place = true;
  TestTensor input;
  TestTensor output;  // unused in place
  accord::Handle handle;
};

ValueKind KindFor(ReduceOp op) {
  return op == ReduceOp::kProduct ? ValueKind::kProduct : ValueKind::kSmall;
}

// Bool has no Average and no scaling; products are not scaled so that four
// factors stay exact and inside int8.
bool Supported(ReduceOp op, DataType dtype) {
  return !(dtype == DataType::kBool && op == ReduceOp::kAverage);
}
bool ScaleSupported(ReduceOp op, DataType dtype) {
  return dtype != DataType::kBool && op != ReduceOp::kProduct;
}

// Fills the inputs and enqueues the case; in place or into a zeroed output.
void Enqueue(AllreduceCase& c) {
  c.input = TestTensor(c.dtype, c.shape,
                       RankValues(c.name, Rank(), c.dtype, accord::NumElements(c.shape), c.kind));
  accord::AllreduceOptions options;
  options.name = c.name;
  options.op = c.spec.op;
  options.prescale_factor = c.spec.prescale;
  options.postscale_factor = c.spec.postscale;
  if (!c.in_place) c.output = TestTensor(c.dtype, c.shape);
  const accord::TensorView& out = c.in_place ? c.input.view() : c.output.view();
  c.handle = Enqueued(accord::Allreduce(c.input.view(), out, options), c.name);
}

// Waits and checks the output element by element, and that a separate
// input was left untouched.
void WaitAndCheck(AllreduceCase& c) {
  if (!WaitOk(c.handle, c.name)) return;
  const int64_t n = accord::NumElements(c.shape);
  const std::vector<double> expected =
      ReferenceAllreduce(c.name, AllRanks(), c.dtype, n, c.kind, c.spec);
  const double tolerance = c.spec.op == ReduceOp::kAverage ? Tolerance(c.dtype) : 0.0;
  const accord::TensorView& out = c.in_place ? c.input.view() : c.output.view();
  ExpectValues(c.name, out, c.dtype, c.shape, expected, tolerance);
  if (!c.in_place) {
    std::vector<double> original = RankValues(c.name, Rank(), c.dtype, n, c.kind);
    for (double& v : original) v = RoundToDataType(c.dtype, v);
    ExpectValues(c.name + " (input, must be unchanged)", c.input.view(), c.dtype, c.shape,
                 original);
  }
}

const ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax,
                            ReduceOp::kProduct};

// Every supported (op, dtype, in place?, scaled?) combination.
std::vector<AllreduceCase> OpDtypeMatrix() {
  std::vector<AllreduceCase> cases;
  int index = 0;
  for (ReduceOp op : kAllOps) {
    for (DataType dtype : AllDataTypes()) {
      if (!Supported(op, dtype)) continue;
      for (bool in_place : {true, false}) {
        for (bool scaled : {false, true}) {
          if (scaled && !ScaleSupported(op, dtype)) continue;
          AllreduceCase c;
          c.name = std::string("matrix.") + accord::ReduceOpName(op) + "." +
                   accord::DataTypeName(dtype) + (in_place ? ".inplace" : ".out") +
                   (scaled ? ".scaled" : "");
          c.dtype = dtype;
          c.shape = (index % 3 == 0) ? accord::Shape{1 + index % 29}
                                     : accord::Shape{1 + index % 7, 3, 2};
          c.kind = KindFor(op);
          c.spec.op = op;
          // Powers of two keep every float result exact; integer prescaling
          // by 2 stays exact, postscaling by 0.5 rounds toward zero.
          if (scaled) c.spec = ReduceSpec{op, 2.0, 0.5};
          c.in_place = in_place;
          cases.push_back(std::move(c));
          ++index;
        }
      }
    }
  }
  return cases;
}

TEST_CASE("allreduce: every op x dtype, in place and out of place, with and without scaling") {
  std::vector<AllreduceCase> cases = OpDtypeMatrix();
  // All enqueued before any wait: the cases are negotiated (and, fused, packed) together.
  for (AllreduceCase& c : cases) Enqueue(c);
  for (AllreduceCase& c : cases) WaitAndCheck(c);
}

TEST_CASE("allreduce: one op at a time, each waited before the next") {
  for (ReduceOp op : kAllOps) {
    for (DataType dtype : {DataType::kFloat32, DataType::kInt32, DataType::kFloat16,
                           DataType::kBFloat16, DataType::kBool}) {
      if (!Supported(op, dtype)) continue;
      AllreduceCase c;
      c.name = std::string("single.") + accord::ReduceOpName(op) + "." + accord::DataTypeName(dtype);
      c.dtype = dtype;
      c.shape = {33};
      c.kind = KindFor(op);
      c.spec.op = op;
      Enqueue(c);
      WaitAndCheck(c);
    }
  }
}

// 300 tensors of 1 .. 100k elements (log-uniform), mixed dtypes and ops.
// The sizes come from a generator seeded the same on every rank.
std::vector<AllreduceCase> ManyTensors(const std::string& prefix, int count) {
  const std::vector<double> u = GenerateValues(DataType::kUInt8, count, Seed(prefix, -1));
  const ReduceOp ops[] = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kSum, ReduceOp::kMax,
                          ReduceOp::kMin};
  std::vector<AllreduceCase> cases(count);
  for (int i = 0; i < count; ++i) {
    AllreduceCase& c = cases[i];
    c.name = prefix + "." + std::to_string(i);
    c.dtype = AllDataTypes()[(i * 7) % AllDataTypes().size()];
    // u[i] in [0, 8]; mix it with i so sizes cover the whole range.
    const double fraction = std::fmod(u[i] / 9.0 + i * 0.618033988749895, 1.0);
    c.shape = {static_cast<int64_t>(std::llround(std::pow(100000.0, fraction)))};
    c.spec.op = ops[i % 5];
    if (!Supported(c.spec.op, c.dtype)) c.spec.op = ReduceOp::kSum;
    c.kind = KindFor(c.spec.op);
    c.in_place = i % 4 != 3;
  }
  return cases;
}

TEST_CASE("allreduce: 300 mixed tensors in flight, enqueued in a rank-dependent order") {
  std::vector<AllreduceCase> cases = ManyTensors("many", 300);
  // Odd ranks enqueue in reverse: matching is by name, not by order.
  if (Rank() % 2 == 0) {
    for (AllreduceCase& c : cases) Enqueue(c);
  } else {
    for (auto it = cases.rbegin(); it != cases.rend(); ++it) Enqueue(*it);
  }
  for (AllreduceCase& c : cases) WaitAndCheck(c);
}

TEST_CASE("allreduce: enqueued concurrently from several threads") {
  std::vector<AllreduceCase> cases = ManyTensors("threads", 64);
  // Catch assertions are not thread-safe: the threads only fill and
  // enqueue; Enqueued() would assert, so they keep the raw Results.
  std::vector<accord::Result<accord::Handle>> results(
      cases.size(), accord::Result<accord::Handle>(accord::Status::Internal("not enqueued")));
  const int kThreads = 4;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&cases, &results, t] {
      for (size_t i = t; i < cases.size(); i += kThreads) {
        AllreduceCase& c = cases[i];
        c.input = TestTensor(c.dtype, c.shape, RankValues(c.name, Rank(), c.dtype,
                                                          accord::NumElements(c.shape), c.kind));
        if (!c.in_place) c.output = TestTensor(c.dtype, c.shape);
        accord::AllreduceOptions options;
        options.name = c.name;
        options.op = c.spec.op;
        results[i] = accord::Allreduce(
            c.input.view(), c.in_place ? c.input.view() : c.output.view(), options);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (size_t i = 0; i < cases.size(); ++i) {
    cases[i].handle = Enqueued(std::move(results[i]), cases[i].name);
  }
  for (AllreduceCase& c : cases) WaitAndCheck(c);
}

TEST_CASE("allreduce: the same name, synchronously, step after step") {
  for (int step = 0; step < 20; ++step) {
    // Same name and request each step (a response-cache hit after the
    // first); fresh values each step, so a stale result would show.
    AllreduceCase c;
    c.name = "repeat";
    c.dtype = DataType::kFloat32;
    c.shape = {1000};
    c.spec.op = step % 2 == 0 ? ReduceOp::kSum : ReduceOp::kAverage;
    const std::string key = "repeat.step" + std::to_string(step);
    c.input = TestTensor(c.dtype, c.shape, RankValues(key, Rank(), c.dtype, 1000));
    accord::AllreduceOptions options;
    options.name = c.name;
    options.op = c.spec.op;
    if (!WaitOk(Enqueued(accord::Allreduce(c.input.view(), c.input.view(), options), key), key)) {
      continue;
    }
    const double tolerance = c.spec.op == ReduceOp::kAverage ? Tolerance(c.dtype) : 0.0;
    ExpectValues(key, c.input.view(), c.dtype, c.shape,
                 ReferenceAllreduce(key, AllRanks(), c.dtype, 1000, ValueKind::kSmall, c.spec),
                 tolerance);
  }
}

TEST_CASE("allreduce: empty tensors and unnamed operations") {
  // Zero elements: nothing to reduce, but every rank must still agree.
  TestTensor empty1(DataType::kFloat32, {0});
  TestTensor empty2(DataType::kInt64, {3, 0});
  accord::AllreduceOptions options;
  options.op = ReduceOp::kSum;
  options.name = "empty.1d";
  accord::Handle h1 = Enqueued(accord::Allreduce(empty1.view(), empty1.view(), options), "empty.1d");
  options.name = "empty.2d";
  accord::Handle h2 = Enqueued(accord::Allreduce(empty2.view(), empty2.view(), options), "empty.2d");
  WaitOk(h1, "empty.1d");
  WaitOk(h2, "empty.2d");

  // Unnamed: matched by the order every rank submits them in.
  std::vector<TestTensor> tensors;
  std::vector<accord::Handle> handles;
  for (int i = 0; i < 5; ++i) {
    const std::string key = "unnamed." + std::to_string(i);
    tensors.emplace_back(DataType::kInt32, accord::Shape{7 + i},
                         RankValues(key, Rank(), DataType::kInt32, 7 + i));
    accord::AllreduceOptions unnamed;
    unnamed.op = ReduceOp::kSum;
    handles.push_back(Enqueued(
        accord::Allreduce(tensors.back().view(), tensors.back().view(), unnamed), key));
  }
  for (int i = 0; i < 5; ++i) {
    const std::string key = "unnamed." + std::to_string(i);
    if (!WaitOk(handles[i], key)) continue;
    ExpectValues(key, tensors[i].view(), DataType::kInt32, {7 + i},
                 ReferenceAllreduce(key, AllRanks(), DataType::kInt32, 7 + i, ValueKind::kSmall,
                                    ReduceSpec{ReduceOp::kSum}));
  }
}

TEST_CASE("barrier: completes on every rank, also with other work in flight") {
  for (int i = 0; i < 3; ++i) {
    WaitOk(Enqueued(accord::Barrier(), "barrier"), "barrier " + std::to_string(i));
  }
  AllreduceCase c;
  c.name = "barrier.neighbour";
  c.shape = {64};
  c.spec.op = ReduceOp::kSum;
  Enqueue(c);
  accord::Handle barrier = Enqueued(accord::Barrier(), "barrier with neighbour");
  WaitOk(barrier, "barrier with an allreduce in flight");
  WaitAndCheck(c);
}

}  // namespace
