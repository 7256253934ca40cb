// Allreduce across ranks: every op x every dtype, scaled and not, in place
// and into a separate output; hundreds of mixed tensors in flight at once
// (what fusion packs together); enqueues from several threads; repeated
// synchronous calls with one name (the response-cache path); a training
// loop's pattern; a tensor larger than the fusion buffer; Wait(timeout);
// barrier.
//
// The same program runs fused (default threshold), unfused
// (ACCORD_FUSION_THRESHOLD=0), with a fusion buffer smaller than many
// tensors, and with a tiny response cache; see tests/CMakeLists.txt. The allgather,
// broadcast, alltoall, reducescatter and grouped cases live in
// gather_scatter_test.cc, part of the same program.
//
// Cases tagged [volume] are there for their megabytes (fusion and
// negotiation under load), which cost millions of MPI calls where a run
// splits them into 7 elements; sanitized builds leave them out of those runs
// only (tests/CMakeLists.txt).
#include <catch2/catch.hpp>

#include <chrono>
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
  std::string name;  // the collective's name
  std::string key;   // the data key; the name if empty
  DataType dtype = DataType::kFloat32;
  accord::Shape shape;
  ValueKind kind = ValueKind::kSmall;
  ReduceSpec spec;
  bool in_place = true;
  TestTensor input;
  TestTensor output;  // unused in place
  accord::Handle handle;
};

ValueKind KindFor(ReduceOp op) { return op == ReduceOp::kProduct ? ValueKind::kProduct : ValueKind::kSmall; }

// Bool has no Average and no scaling; products are not scaled so that four
// factors stay exact and inside int8.
bool Supported(ReduceOp op, DataType dtype) { return !(dtype == DataType::kBool && op == ReduceOp::kAverage); }
bool ScaleSupported(ReduceOp op, DataType dtype) { return dtype != DataType::kBool && op != ReduceOp::kProduct; }

// Fills the inputs and enqueues the case; in place or into a zeroed output.
void Enqueue(AllreduceCase& c) {
  if (c.key.empty()) c.key = c.name;
  c.input = TestTensor(c.dtype, c.shape, RankValues(c.key, Rank(), c.dtype, accord::NumElements(c.shape), c.kind));
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
  if (c.key.empty()) c.key = c.name;
  if (!WaitOk(c.handle, c.key)) return;
  const int64_t n = accord::NumElements(c.shape);
  const std::vector<double> expected = ReferenceAllreduce(c.key, AllRanks(), c.dtype, n, c.kind, c.spec);
  const double tolerance = c.spec.op == ReduceOp::kAverage ? Tolerance(c.dtype) : 0.0;
  const accord::TensorView& out = c.in_place ? c.input.view() : c.output.view();
  ExpectValues(c.key, out, c.dtype, c.shape, expected, tolerance);
  // The handle's output is the caller's view.
  const std::vector<accord::TensorView> outputs = c.handle.outputs();
  INFO("rank " << Rank() << ": " << c.key << ": Handle::outputs()");
  CHECK(outputs.size() == 1);
  if (!outputs.empty()) CHECK(outputs[0].data == out.data);
  CHECK(c.handle.Poll());
  CHECK(c.handle.status().ok());
  CHECK(c.handle.last_joined_rank() == -1);
  if (!c.in_place) {
    std::vector<double> original = RankValues(c.key, Rank(), c.dtype, n, c.kind);
    for (double& v : original) v = RoundToDataType(c.dtype, v);
    ExpectValues(c.key + " (input, must be unchanged)", c.input.view(), c.dtype, c.shape, original);
  }
}

const ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct};

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
          c.name = std::string("matrix.") + accord::ReduceOpName(op) + "." + accord::DataTypeName(dtype) +
                   (in_place ? ".inplace" : ".out") + (scaled ? ".scaled" : "");
          c.dtype = dtype;
          c.shape = (index % 3 == 0) ? accord::Shape{1 + index % 29} : accord::Shape{1 + index % 7, 3, 2};
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
    for (DataType dtype :
         {DataType::kFloat32, DataType::kInt32, DataType::kFloat16, DataType::kBFloat16, DataType::kBool}) {
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

TEST_CASE("allreduce: lone tensors in place chunk by chunk: every op x dtype, in place and out of place, scaled") {
  // Waited one at a time, each tensor is a batch of its own, reduced in its
  // own memory in chunks of 8 staging windows (ops/allreduce_op.cc). Under
  // collectives_test_smallwindows (1000-byte windows) that is 8000 bytes:
  // these span 1 to 6 chunks, the last one short; with the default window
  // they are one call (the 72 MiB case below spans 9 chunks).
  for (AllreduceCase& c : OpDtypeMatrix()) {
    c.name = "lone_chunks." + c.name.substr(c.name.find('.') + 1);
    c.shape = {5003};
    Enqueue(c);
    WaitAndCheck(c);
  }
}

TEST_CASE("allreduce: completed by polling alone, never waited for") {
  // A process on one core runs its collectives when a thread waits or polls
  // (docs/negotiation.md): polling must be enough to finish the work.
  for (int step = 0; step < 5; ++step) {
    std::vector<AllreduceCase> cases(8);
    for (int i = 0; i < 8; ++i) {
      AllreduceCase& c = cases[i];
      c.name = "polled." + std::to_string(step) + "." + std::to_string(i);
      c.dtype = i % 2 ? DataType::kFloat32 : DataType::kInt32;
      c.shape = {17 + 101 * i};
      c.kind = KindFor(ReduceOp::kSum);
      c.spec.op = ReduceOp::kSum;
    }
    for (AllreduceCase& c : cases) Enqueue(c);
    const auto deadline = std::chrono::steady_clock::now() + HangTimeout();
    size_t done = 0;
    while (done < cases.size()) {
      done = 0;
      for (AllreduceCase& c : cases) done += c.handle.Poll() ? 1 : 0;
      if (std::chrono::steady_clock::now() > deadline) {
        FAIL("rank " << Rank() << ": step " << step << ": only " << done << " of " << cases.size()
                     << " polled allreduces completed before the hang timeout");
      }
      std::this_thread::yield();
    }
    for (AllreduceCase& c : cases) WaitAndCheck(c);  // all done: checks the values only
  }
}

// 300 tensors of 1 .. 100k elements (log-uniform), mixed dtypes and ops.
// The sizes come from a generator seeded the same on every rank.
std::vector<AllreduceCase> ManyTensors(const std::string& prefix, int count) {
  const std::vector<double> u = GenerateValues(DataType::kUInt8, count, Seed(prefix, -1));
  const ReduceOp ops[] = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin};
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

TEST_CASE("allreduce: 300 mixed tensors in flight, enqueued in a rank-dependent order", "[volume]") {
  std::vector<AllreduceCase> cases = ManyTensors("many", 300);
  // Odd ranks enqueue in reverse: matching is by name, not by order.
  if (Rank() % 2 == 0) {
    for (AllreduceCase& c : cases) Enqueue(c);
  } else {
    for (auto it = cases.rbegin(); it != cases.rend(); ++it) Enqueue(*it);
  }
  for (AllreduceCase& c : cases) WaitAndCheck(c);
}

TEST_CASE("allreduce: enqueued concurrently from several threads", "[volume]") {
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
        c.input =
            TestTensor(c.dtype, c.shape, RankValues(c.name, Rank(), c.dtype, accord::NumElements(c.shape), c.kind));
        if (!c.in_place) c.output = TestTensor(c.dtype, c.shape);
        accord::AllreduceOptions options;
        options.name = c.name;
        options.op = c.spec.op;
        results[i] = accord::Allreduce(c.input.view(), c.in_place ? c.input.view() : c.output.view(), options);
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
    c.key = "repeat.step" + std::to_string(step);
    c.dtype = DataType::kFloat32;
    c.shape = {1000};
    c.spec.op = step % 2 == 0 ? ReduceOp::kSum : ReduceOp::kAverage;
    Enqueue(c);
    WaitAndCheck(c);
  }
}

// Shapes of a small model's gradients, the same on every rank.
std::vector<accord::Shape> GradientShapes(int count) {
  const std::vector<double> u = GenerateValues(DataType::kUInt8, count, Seed("grads", -1));
  std::vector<accord::Shape> shapes;
  for (int i = 0; i < count; ++i) {
    const double fraction = std::fmod(u[i] / 9.0 + i * 0.381966011250105, 1.0);
    shapes.push_back({static_cast<int64_t>(std::llround(std::pow(20000.0, fraction))), 1 + i % 3});
  }
  return shapes;
}

TEST_CASE("a training loop: 25 steps of 60 gradients in a rank-dependent order", "[volume]") {
  const int kGrads = 60;
  const std::vector<accord::Shape> shapes = GradientShapes(kGrads);
  for (int step = 0; step < 25; ++step) {
    std::vector<AllreduceCase> grads(kGrads);
    for (int i = 0; i < kGrads; ++i) {
      grads[i].name = "grad." + std::to_string(i);  // the same every step
      grads[i].key = grads[i].name + ".step" + std::to_string(step);
      grads[i].dtype = i % 10 == 3 ? DataType::kFloat16 : (i % 10 == 7 ? DataType::kBFloat16 : DataType::kFloat32);
      grads[i].shape = shapes[i];
      grads[i].spec.op = ReduceOp::kAverage;
    }
    // Each rank starts at a different gradient; odd ranks go backwards.
    const int start = (Rank() * 7 + step * 13) % kGrads;
    for (int k = 0; k < kGrads; ++k) {
      const int i = Rank() % 2 == 0 ? (start + k) % kGrads : (start + kGrads - k) % kGrads;
      Enqueue(grads[i]);
    }
    for (AllreduceCase& g : grads) WaitAndCheck(g);
  }
}

// Float32 elements of a tensor 9/8 the size of the run's fusion buffer (72
// MiB at the default 64 MiB, 72 KiB in the 64 KiB runs; the default's when
// fusion is off), the same in every run relative to its buffer. The runs
// that split MPI calls into 7 elements set a 1 MiB buffer (tests/
// CMakeLists.txt): 72 MiB would be 2.7 million calls, each a round trip of
// every rank, which test nothing the smaller cases' pieces do not, and with
// 3 ranks on 2 cores every one of them waits for a rank to be scheduled
// (docs/reliability.md, "Tests that split MPI calls").
int64_t LargerThanFusionBuffer() {
  constexpr int64_t kDefaultThreshold = int64_t{64} << 20;
  const int64_t threshold = accord::GetMetrics().fusion_threshold_bytes;
  return (threshold > 0 ? threshold : kDefaultThreshold) / 8 * 9 / 4;
}

TEST_CASE("allreduce: a tensor larger than the fusion buffer (72 MiB by default)") {
  const std::string key = "large";
  const int64_t n = LargerThanFusionBuffer();  // float32 elements
  std::vector<uint64_t> seeds;
  for (int r = 0; r < Size(); ++r) seeds.push_back(Seed(key, r));
  TestTensor t(DataType::kFloat32, {n});
  for (int64_t i = 0; i < n; ++i) {
    WriteElement(t.view(), i, ValueAt(DataType::kFloat32, seeds[Rank()], i));
  }
  accord::AllreduceOptions options;
  options.name = key;
  options.op = ReduceOp::kSum;
  if (!WaitOk(Enqueued(accord::Allreduce(t.view(), t.view(), options), key), key)) return;
  ExpectValuesFn(key, t.view(), DataType::kFloat32, {n}, [&seeds](int64_t i) {
    double sum = 0;
    for (uint64_t seed : seeds) sum += ValueAt(DataType::kFloat32, seed, i);
    return sum;
  });
}

TEST_CASE("allreduce: large tensors enqueued together, scaled, in place and not", "[volume]") {
  // Across hosts (no staging window) each batch of one key is fused and
  // reduced in the tensors' own memory (ops/allreduce_op.cc); on one host it
  // is staged. Each key's tensors total over kRingMinBytes.
  std::vector<AllreduceCase> cases;
  for (int i = 0; i < 6; ++i) {
    AllreduceCase c;
    c.name = "large_batch." + std::to_string(i);
    c.dtype = i < 4 ? DataType::kFloat32 : DataType::kFloat16;
    c.shape = {(int64_t{1} << 18) + 1000 * i + 3};
    c.spec = i < 4 ? ReduceSpec{ReduceOp::kAverage, 2.0, 0.5} : ReduceSpec{ReduceOp::kSum};
    c.in_place = i % 2 == 0;
    cases.push_back(std::move(c));
  }
  AllreduceCase small;  // shares the float32 key
  small.name = "large_batch.small";
  small.shape = {33};
  small.spec = ReduceSpec{ReduceOp::kAverage, 2.0, 0.5};
  cases.push_back(std::move(small));
  for (AllreduceCase& c : cases) Enqueue(c);
  for (AllreduceCase& c : cases) WaitAndCheck(c);
}

TEST_CASE("Wait(timeout) returns kTimeout, and the operation completes later") {
  if (Size() < 2) return;  // alone it would complete at once (the same on every rank)
  AllreduceCase late;
  late.name = "late";
  late.shape = {20};
  late.spec.op = ReduceOp::kSum;
  // Rank 0 submits first; the others only after the barrier, which rank 0
  // enters after its timed-out wait.
  if (Rank() == 0) {
    Enqueue(late);
    const accord::Status status = late.handle.Wait(std::chrono::milliseconds(100));
    INFO("rank 0: Wait(100ms) on an operation nobody else submitted yet: " << status);
    CHECK(status.code() == accord::StatusCode::kTimeout);
    CHECK_FALSE(late.handle.Poll());
  }
  WaitOk(Enqueued(accord::Barrier(), "barrier"), "barrier");
  if (Rank() != 0) Enqueue(late);
  WaitAndCheck(late);
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
    tensors.emplace_back(DataType::kInt32, accord::Shape{7 + i}, RankValues(key, Rank(), DataType::kInt32, 7 + i));
    accord::AllreduceOptions unnamed;
    unnamed.op = ReduceOp::kSum;
    handles.push_back(Enqueued(accord::Allreduce(tensors.back().view(), tensors.back().view(), unnamed), key));
  }
  for (int i = 0; i < 5; ++i) {
    const std::string key = "unnamed." + std::to_string(i);
    if (!WaitOk(handles[i], key)) continue;
    ExpectValues(
        key, tensors[i].view(), DataType::kInt32, {7 + i},
        ReferenceAllreduce(key, AllRanks(), DataType::kInt32, 7 + i, ValueKind::kSmall, ReduceSpec{ReduceOp::kSum}));
  }
}

TEST_CASE("allreduce: scaled integer results saturate to the type's range") {
  // Every rank contributes `value`; the sum times 20 is out of range.
  struct Case {
    const char* name;
    DataType dtype;
    double value;
    double postscale;
    double expected;
  };
  const Case cases[] = {{"saturate.int8.high", DataType::kInt8, 10, 20.0, 127},
                        {"saturate.int8.low", DataType::kInt8, -10, 20.0, -128},
                        {"saturate.uint8.high", DataType::kUInt8, 10, 30.0, 255},
                        {"saturate.uint8.low", DataType::kUInt8, 10, -1.0, 0},
                        {"saturate.int16.high", DataType::kInt16, 1000, 40.0, 32767}};
  for (const Case& c : cases) {
    TestTensor t(c.dtype, {5}, std::vector<double>(5, c.value));
    accord::AllreduceOptions options;
    options.name = c.name;
    options.op = ReduceOp::kSum;
    options.postscale_factor = c.postscale;
    if (!WaitOk(Enqueued(accord::Allreduce(t.view(), t.view(), options), c.name), c.name)) {
      continue;
    }
    ExpectValues(c.name, t.view(), c.dtype, {5}, std::vector<double>(5, c.expected));
  }
}

TEST_CASE("allreduce: names with separators, control characters, non-ASCII, 4000 characters") {
  const std::vector<std::string> names = {"a,b;c|d e",
                                          "line\nbreak\ttab",
                                          std::string("nul\0inside", 10),
                                          "grad.ünïcödé.权重",
                                          std::string(4000, 'x'),
                                          "[0]",
                                          "",
                                          "   "};
  std::vector<AllreduceCase> cases(names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    cases[i].name = names[i];  // an empty name means "auto-named"
    cases[i].key = "odd_name." + std::to_string(i);
    cases[i].shape = {static_cast<int64_t>(5 + i)};
    cases[i].spec.op = ReduceOp::kSum;
    Enqueue(cases[i]);
  }
  for (AllreduceCase& c : cases) WaitAndCheck(c);
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
