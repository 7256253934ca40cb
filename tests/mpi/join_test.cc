// Join: ranks that run out of work join; until every rank has joined, the
// joined ranks take part in the others' allreduces with zeros (Average still
// divides by the set size), other collectives fail with kPreconditionFailed,
// and every rank's Join handle names the same last rank to join.
#include <catch2/catch.hpp>

#include <functional>
#include <string>
#include <vector>

#include "test_util.h"

namespace {

using accord::DataType;
using accord::ReduceOp;
using namespace accord_test;

struct StepTensor {
  const char* name;
  DataType dtype;
  int64_t elements;
  ReduceOp op;
};

// Submitted by every active rank each step, under the same names each step.
const StepTensor kStepTensors[] = {
    {"sum.float32", DataType::kFloat32, 100, ReduceOp::kSum},
    {"avg.float32", DataType::kFloat32, 50, ReduceOp::kAverage},
    {"sum.int32", DataType::kInt32, 17, ReduceOp::kSum},
    {"avg.int32", DataType::kInt32, 9, ReduceOp::kAverage},
    {"avg.float64", DataType::kFloat64, 7, ReduceOp::kAverage},
};

// The sum over the active ranks' inputs (joined ranks add zeros), divided
// by the full size for Average.
std::vector<double> JoinedExpected(const std::string& key, const StepTensor& t,
                                   const std::vector<int>& active) {
  std::vector<std::vector<double>> inputs;
  for (int r : active) inputs.push_back(RankValues(key, r, t.dtype, t.elements));
  std::vector<double> sum = Reduce(t.dtype, inputs, ReduceSpec{ReduceOp::kSum});
  if (t.op == ReduceOp::kAverage) {
    for (double& v : sum) v = RoundToDataType(t.dtype, v / Size());
  }
  return sum;
}

// This rank's steps: allreduces of kStepTensors, each step checked against
// the ranks still active then (those with steps_of(r) > step).
void RunSteps(const std::string& prefix, const std::function<int(int)>& steps_of) {
  for (int step = 0; step < steps_of(Rank()); ++step) {
    std::vector<TestTensor> tensors;
    std::vector<accord::Handle> handles;
    for (const StepTensor& t : kStepTensors) {
      const std::string name = prefix + "." + t.name;
      const std::string key = name + ".step" + std::to_string(step);
      tensors.emplace_back(t.dtype, accord::Shape{t.elements},
                           RankValues(key, Rank(), t.dtype, t.elements));
      accord::AllreduceOptions options;
      options.name = name;
      options.op = t.op;
      handles.push_back(
          Enqueued(accord::Allreduce(tensors.back().view(), tensors.back().view(), options), key));
    }
    std::vector<int> active;
    for (int r = 0; r < Size(); ++r) {
      if (steps_of(r) > step) active.push_back(r);
    }
    for (size_t i = 0; i < handles.size(); ++i) {
      const StepTensor& t = kStepTensors[i];
      const std::string key = prefix + "." + t.name + ".step" + std::to_string(step);
      if (!WaitOk(handles[i], key)) continue;
      const double tolerance = t.op == ReduceOp::kAverage ? Tolerance(t.dtype) : 0.0;
      ExpectValues(key, tensors[i].view(), t.dtype, {t.elements}, JoinedExpected(key, t, active),
                   tolerance);
    }
  }
}

// Checks with an accord allreduce (Max of [v, -v]) that `value` is the same
// on every rank.
void CheckSameOnEveryRank(const std::string& what, int value) {
  TestTensor t(DataType::kInt32, {2}, {static_cast<double>(value), -static_cast<double>(value)});
  accord::AllreduceOptions options;
  options.name = "agree." + what;
  options.op = ReduceOp::kMax;
  if (!WaitOk(Enqueued(accord::Allreduce(t.view(), t.view(), options), options.name),
              options.name)) {
    return;
  }
  INFO("rank " << Rank() << ": " << what << " is " << value << " here; across ranks it ranges "
               << -ReadElement(t.view(), 1) << " .. " << ReadElement(t.view(), 0));
  CHECK(ReadElement(t.view(), 0) == value);
  CHECK(-ReadElement(t.view(), 1) == value);
}

// Joins, waits for every rank to have joined, and checks last_joined_rank().
void JoinAndCheck(const std::string& what, int expected_last) {
  accord::Handle join = Enqueued(accord::Join(), what);
  if (!WaitOk(join, what)) return;
  INFO("rank " << Rank() << ": " << what);
  if (expected_last >= 0) CHECK(join.last_joined_rank() == expected_last);
  CHECK(join.last_joined_rank() >= 0);
  CHECK(join.last_joined_rank() < Size());
  CheckSameOnEveryRank(what + ".last_joined_rank", join.last_joined_rank());
}

// After a join, plain allreduces with every rank work again.
void CheckAllRanksBack(const std::string& name) {
  TestTensor t(DataType::kFloat32, {40}, RankValues(name, Rank(), DataType::kFloat32, 40));
  accord::AllreduceOptions options;
  options.name = name;
  options.op = ReduceOp::kSum;
  if (!WaitOk(Enqueued(accord::Allreduce(t.view(), t.view(), options), name), name)) return;
  ExpectValues(name, t.view(), DataType::kFloat32, {40},
               ReferenceAllreduce(name, AllRanks(), DataType::kFloat32, 40, ValueKind::kSmall,
                                  ReduceSpec{ReduceOp::kSum}));
}

TEST_CASE("join: rank r runs r+1 steps; the highest rank joins last") {
  // Rank size-1 cannot finish its last step before every other rank has
  // joined, so it is the last to join.
  RunSteps("join.up", [](int r) { return r + 1; });
  JoinAndCheck("join.up", Size() - 1);
  CheckAllRanksBack("join.up.after");
}

TEST_CASE("join: rank r runs size-r steps; rank 0 joins last") {
  RunSteps("join.down", [](int r) { return Size() - r; });
  JoinAndCheck("join.down", 0);
  CheckAllRanksBack("join.down.after");
}

TEST_CASE("join: every rank joins with no work, twice in a row") {
  // Every rank joins at once, twice: nothing to do but agree.
  JoinAndCheck("join.idle.1", -1);
  JoinAndCheck("join.idle.2", -1);
  CheckAllRanksBack("join.idle.after");
}

TEST_CASE("join: non-allreduce collectives fail while a rank has joined") {
  if (Size() < 2) return;  // needs a joined rank and an active one (same on every rank)
  if (Rank() == 0) {
    JoinAndCheck("join.pre", -1);
  } else {
    // The allreduce can only complete once rank 0's join is known, so the
    // allgather after it is submitted while rank 0 has joined.
    const StepTensor& t = kStepTensors[0];
    const std::string key = "join.pre.sync";
    TestTensor sync(t.dtype, {t.elements}, RankValues(key, Rank(), t.dtype, t.elements));
    accord::AllreduceOptions options;
    options.name = key;
    options.op = ReduceOp::kSum;
    if (WaitOk(Enqueued(accord::Allreduce(sync.view(), sync.view(), options), key), key)) {
      std::vector<int> active;
      for (int r = 1; r < Size(); ++r) active.push_back(r);
      ExpectValues(key, sync.view(), t.dtype, {t.elements}, JoinedExpected(key, t, active));
    }
    TestTensor rows(DataType::kFloat32, {2, 2});
    accord::CollectiveOptions gather_options;
    gather_options.name = "join.pre.gather";
    accord::Result<accord::Handle> gather =
        accord::Allgather(rows.view(), nullptr, gather_options);
    const accord::Status status =
        gather.ok() ? WaitFor(gather.value(), "join.pre.gather") : gather.status();
    INFO("rank " << Rank() << ": allgather while rank 0 has joined: " << status.ToString());
    CHECK(status.code() == accord::StatusCode::kPreconditionFailed);
    JoinAndCheck("join.pre", -1);
  }
  CheckAllRanksBack("join.pre.after");
}

}  // namespace
