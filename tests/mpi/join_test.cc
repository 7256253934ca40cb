// Join: ranks that run out of work join; until every rank has joined, the
// joined ranks take part in the others' allreduces with zeros (Average still
// divides by the set size), other collectives (and Min/Max allreduces) fail
// on every rank that submitted them with kMismatch, naming the joined ranks,
// and every rank's Join handle names the same last rank to join. Also: join within a process set, and work submitted by
// a rank after it joined.
#include <catch2/catch.hpp>

#include <algorithm>
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
    // Large ones that fuse with sum.float32: across hosts the active ranks
    // reduce them in their own memory, a joined rank packs zeros.
    {"sum.large.a", DataType::kFloat32, (int64_t{1} << 18) + 5, ReduceOp::kSum},
    {"sum.large.b", DataType::kFloat32, (int64_t{1} << 17) + 11, ReduceOp::kSum},
    // And an Average that fuses with avg.float32 into one the ring takes:
    // the ring divides each rank's segment before passing it on, so the
    // joined rank, packing its zeros, must divide its own segment too.
    {"avg.large", DataType::kFloat32, (int64_t{1} << 18) + 3, ReduceOp::kAverage},
};

// A process set: its id and its members' global ranks.
struct Set {
  accord::ProcessSetId id = accord::kGlobalProcessSet;
  std::vector<int> members;
};

Set GlobalSet() { return Set{accord::kGlobalProcessSet, AllRanks()}; }

// The sum over the active ranks' inputs (joined ranks add zeros), divided
// by the full set size for Average.
std::vector<double> JoinedExpected(const std::string& key, const StepTensor& t, const std::vector<int>& active,
                                   int set_size) {
  std::vector<std::vector<double>> inputs;
  for (int r : active) inputs.push_back(RankValues(key, r, t.dtype, t.elements));
  std::vector<double> sum = Reduce(t.dtype, inputs, ReduceSpec{ReduceOp::kSum});
  if (t.op == ReduceOp::kAverage) {
    for (double& v : sum) v = RoundToDataType(t.dtype, v / set_size);
  }
  return sum;
}

// This rank's steps in `set`: allreduces of kStepTensors under the same
// names every step, each step checked against the members still active
// then (those with steps_of(global rank) > step). Steps are numbered from
// `first_step` in the data keys.
void RunSteps(const std::string& prefix, const std::function<int(int)>& steps_of, const Set& set = GlobalSet(),
              int first_step = 0) {
  for (int step = 0; step < steps_of(Rank()); ++step) {
    const std::string suffix = ".step" + std::to_string(first_step + step);
    std::vector<TestTensor> tensors;
    std::vector<accord::Handle> handles;
    for (const StepTensor& t : kStepTensors) {
      const std::string name = prefix + "." + t.name;
      tensors.emplace_back(t.dtype, accord::Shape{t.elements}, RankValues(name + suffix, Rank(), t.dtype, t.elements));
      accord::AllreduceOptions options;
      options.name = name;
      options.op = t.op;
      options.process_set = set.id;
      handles.push_back(
          Enqueued(accord::Allreduce(tensors.back().view(), tensors.back().view(), options), name + suffix));
    }
    std::vector<int> active;
    for (int r : set.members) {
      if (steps_of(r) > step) active.push_back(r);
    }
    for (size_t i = 0; i < handles.size(); ++i) {
      const StepTensor& t = kStepTensors[i];
      const std::string key = prefix + "." + t.name + suffix;
      if (!WaitOk(handles[i], key)) continue;
      const double tolerance = t.op == ReduceOp::kAverage ? Tolerance(t.dtype) : 0.0;
      ExpectValues(key, tensors[i].view(), t.dtype, {t.elements},
                   JoinedExpected(key, t, active, static_cast<int>(set.members.size())), tolerance);
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
  if (!WaitOk(Enqueued(accord::Allreduce(t.view(), t.view(), options), options.name), options.name)) {
    return;
  }
  INFO("rank " << Rank() << ": " << what << " is " << value << " here; across ranks it ranges "
               << -ReadElement(t.view(), 1) << " .. " << ReadElement(t.view(), 0));
  CHECK(ReadElement(t.view(), 0) == value);
  CHECK(-ReadElement(t.view(), 1) == value);
}

// Joins `set`, waits for every member to have joined, and checks
// last_joined_rank() (a rank within the set, like broadcast's root_rank).
void JoinAndCheck(const std::string& what, int expected_last, const Set& set = GlobalSet()) {
  accord::Handle join = Enqueued(accord::Join(set.id), what);
  if (!WaitOk(join, what)) return;
  INFO("rank " << Rank() << ": " << what);
  if (expected_last >= 0) CHECK(join.last_joined_rank() == expected_last);
  CHECK(join.last_joined_rank() >= 0);
  CHECK(join.last_joined_rank() < static_cast<int>(set.members.size()));
  if (set.id == accord::kGlobalProcessSet) {
    CheckSameOnEveryRank(what + ".last_joined_rank", join.last_joined_rank());
  }
}

// After a join, plain allreduces with every rank work again.
void CheckAllRanksBack(const std::string& name) {
  TestTensor t(DataType::kFloat32, {40}, RankValues(name, Rank(), DataType::kFloat32, 40));
  accord::AllreduceOptions options;
  options.name = name;
  options.op = ReduceOp::kSum;
  if (!WaitOk(Enqueued(accord::Allreduce(t.view(), t.view(), options), name), name)) return;
  ExpectValues(
      name, t.view(), DataType::kFloat32, {40},
      ReferenceAllreduce(name, AllRanks(), DataType::kFloat32, 40, ValueKind::kSmall, ReduceSpec{ReduceOp::kSum}));
}

TEST_CASE("join: rank r runs r+1 steps; the highest rank joins last") {
  // Rank size-1 cannot finish its last step before every other rank has
  // joined, so it is the last to join.
  RunSteps("join.up", [](int r) { return r + 1; });
  JoinAndCheck("join.up", Size() - 1);
  CheckAllRanksBack("join.up.after");
  // The same names again with every rank: nothing from the join lingers.
  RunSteps(
      "join.up", [](int) { return 2; }, GlobalSet(), Size());
}

TEST_CASE("join: lone tensors over several in-place chunks while ranks have joined") {
  // Each tensor waited before the next is a batch of its own: the active
  // ranks reduce it in place in chunks of 8 staging windows (8 MiB by
  // default; 8000 bytes under join_test_smallwindows), a joined rank stages
  // its zeros through windows of the same size. An Average, prescaled and
  // postscaled, is finished chunk by chunk.
  const StepTensor lone[] = {
      {"lone.sum", DataType::kFloat32, (int64_t{1} << 21) + 7, ReduceOp::kSum},
      {"lone.avg", DataType::kFloat32, (int64_t{1} << 21) + 1029, ReduceOp::kAverage},
  };
  const int steps = Rank() + 1;
  for (int step = 0; step < steps; ++step) {
    std::vector<int> active;
    for (int r = 0; r < Size(); ++r) {
      if (r + 1 > step) active.push_back(r);
    }
    for (const StepTensor& t : lone) {
      const std::string key = std::string("join.") + t.name + ".step" + std::to_string(step);
      TestTensor tensor(t.dtype, accord::Shape{t.elements}, RankValues(key, Rank(), t.dtype, t.elements));
      accord::AllreduceOptions options;
      options.name = std::string("join.") + t.name;
      options.op = t.op;
      if (t.op == ReduceOp::kAverage) {
        options.prescale_factor = 2.0;
        options.postscale_factor = 0.5;
      }
      if (!WaitOk(Enqueued(accord::Allreduce(tensor.view(), tensor.view(), options), key), key)) continue;
      // Scaling by 2 and 0.5 is exact: the expected values are those unscaled.
      const double tolerance = t.op == ReduceOp::kAverage ? Tolerance(t.dtype) : 0.0;
      ExpectValues(key, tensor.view(), t.dtype, {t.elements}, JoinedExpected(key, t, active, Size()), tolerance);
    }
  }
  JoinAndCheck("join.lone", Size() - 1);
  CheckAllRanksBack("join.lone.after");
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

TEST_CASE("join: work a joined rank submits anyway fails cleanly, round after round") {
  // Rank 0 joins, then submits a barrier like everyone else. The barrier
  // fails with kMismatch on every rank (a rank has joined); it
  // must not take the process down. Its response can reach rank 0 before
  // rank 0 announced its own request, hence the repetitions.
  for (int round = 0; round < 20; ++round) {
    const std::string what = "join.then_barrier." + std::to_string(round);
    accord::Handle join;
    if (Rank() == 0) join = Enqueued(accord::Join(), what);
    accord::Result<accord::Handle> barrier = accord::Barrier();
    const accord::Status status = barrier.ok() ? WaitFor(barrier.value(), what) : barrier.status();
    if (Size() >= 2) {
      INFO("rank " << Rank() << ": barrier while rank 0 has joined: " << status);
      CHECK(status.code() == accord::StatusCode::kMismatch);
    }
    if (Rank() != 0) join = Enqueued(accord::Join(), what);
    WaitOk(join, what);
  }
  CheckAllRanksBack("join.then_barrier.after");
}

TEST_CASE("join: within a process set, while the other set carries on") {
  // Even set: member i runs i+1 steps, then joins. Odd set (if any): two
  // steps with no join, at the same time and under the same names.
  std::vector<int> evens, odds;
  for (int r = 0; r < Size(); ++r) (r % 2 == 0 ? evens : odds).push_back(r);
  accord::Result<accord::ProcessSetId> even_id = accord::AddProcessSet(evens);
  CHECK(even_id.ok());
  const Set even{even_id.ok() ? even_id.value() : -1, evens};
  Set odd{-1, odds};
  if (!odds.empty()) {
    accord::Result<accord::ProcessSetId> odd_id = accord::AddProcessSet(odds);
    CHECK(odd_id.ok());
    if (odd_id.ok()) odd.id = odd_id.value();
  }
  if (even.id < 0 || (!odds.empty() && odd.id < 0)) return;  // failed on every rank alike
  if (Rank() % 2 == 0) {
    RunSteps(
        "join.set", [](int r) { return r / 2 + 1; }, even);
    // The last even rank joins last: set rank evens.size() - 1.
    JoinAndCheck("join.set", static_cast<int>(evens.size()) - 1, even);
  } else {
    RunSteps(
        "join.set", [](int) { return 2; }, odd);
  }
  CheckAllRanksBack("join.set.after");
  CHECK(accord::RemoveProcessSet(even.id).ok());
  if (odd.id >= 0) CHECK(accord::RemoveProcessSet(odd.id).ok());
}

// Checks that `status` is the failure of a collective submitted while the
// ranks in `joined` had joined: kMismatch, naming the operation and the ranks.
void ExpectJoinedFailure(const accord::Status& status, const std::string& operation, const std::string& joined) {
  INFO("rank " << Rank() << ": " << operation << " while " << joined << ": " << status.ToString());
  CHECK(status.code() == accord::StatusCode::kMismatch);
  CHECK(status.message().find(operation) != std::string::npos);
  CHECK(status.message().find(joined) != std::string::npos);
}

accord::Status Outcome(const accord::Result<accord::Handle>& submitted, const std::string& what) {
  return submitted.ok() ? WaitFor(submitted.value(), what) : submitted.status();
}

TEST_CASE("join: collectives other than Sum/Average allreduce fail while ranks have joined") {
  if (Size() < 2) return;  // needs a joined rank and an active one (same on every rank)
  // Rank 0 joins; from 4 ranks on, rank 2 too. The others' allgather,
  // broadcast and Max allreduce complete (as failures) only once every
  // joiner's join is known, so the message names all of them.
  std::vector<int> joiners = {0};
  if (Size() >= 4) joiners.push_back(2);
  const bool joins = std::find(joiners.begin(), joiners.end(), Rank()) != joiners.end();
  const std::string joined = joiners.size() == 1 ? "rank 0 has joined" : "ranks 0, 2 have joined";
  if (joins) {
    JoinAndCheck("join.pre", -1);
  } else {
    std::vector<int> active;
    for (int r = 0; r < Size(); ++r) {
      if (std::find(joiners.begin(), joiners.end(), r) == joiners.end()) active.push_back(r);
    }
    const StepTensor& t = kStepTensors[0];
    const std::string key = "join.pre.sync";
    TestTensor sync(t.dtype, {t.elements}, RankValues(key, Rank(), t.dtype, t.elements));
    accord::AllreduceOptions options;
    options.name = key;
    options.op = ReduceOp::kSum;
    if (WaitOk(Enqueued(accord::Allreduce(sync.view(), sync.view(), options), key), key)) {
      ExpectValues(key, sync.view(), t.dtype, {t.elements}, JoinedExpected(key, t, active, Size()));
    }
    TestTensor rows(DataType::kFloat32, {2, 2});
    accord::CollectiveOptions gather_options;
    gather_options.name = "join.pre.gather";
    ExpectJoinedFailure(Outcome(accord::Allgather(rows.view(), nullptr, gather_options), "join.pre.gather"),
                        "allgather", joined);
    TestTensor bcast(DataType::kFloat32, {3});
    accord::CollectiveOptions bcast_options;
    bcast_options.name = "join.pre.broadcast";
    ExpectJoinedFailure(Outcome(accord::Broadcast(bcast.view(), active[0], bcast_options), "join.pre.broadcast"),
                        "broadcast", joined);
    // Joined ranks can only stand in for Sum and Average.
    TestTensor max_input(DataType::kFloat32, {3});
    accord::AllreduceOptions max_options;
    max_options.name = "join.pre.max";
    max_options.op = ReduceOp::kMax;
    ExpectJoinedFailure(Outcome(accord::Allreduce(max_input.view(), max_input.view(), max_options), "join.pre.max"),
                        "Max", joined);
    JoinAndCheck("join.pre", -1);
  }
  CheckAllRanksBack("join.pre.after");
}

TEST_CASE("join: unnamed ops line up again once every rank has joined") {
  // Unnamed ops match by their numbers ("allreduce.noname.<n>"). Rank r runs
  // r unnamed allreduces before it joins, and while rank 0 has joined the
  // others' unnamed allgather fails: the joined ranks count those ops too,
  // so after the join every rank's next unnamed ops carry the same names.
  for (int i = 0; i < Rank(); ++i) {
    const std::string key = "join.unnamed.step" + std::to_string(i);
    TestTensor t(DataType::kFloat32, {4}, RankValues(key, Rank(), DataType::kFloat32, 4));
    accord::AllreduceOptions sum;
    sum.op = ReduceOp::kSum;
    if (WaitOk(Enqueued(accord::Allreduce(t.view(), t.view(), sum), key), key)) {
      std::vector<int> active;
      for (int r = i + 1; r < Size(); ++r) active.push_back(r);
      ExpectValues(key, t.view(), DataType::kFloat32, {4},
                   JoinedExpected(key, StepTensor{"", DataType::kFloat32, 4, ReduceOp::kSum}, active, Size()));
    }
    if (Size() >= 2 && i == 0) {
      TestTensor rows(DataType::kFloat32, {2, 2});
      ExpectJoinedFailure(Outcome(accord::Allgather(rows.view()), "join.unnamed.gather"), "allgather",
                          "rank 0 has joined");
    }
  }
  JoinAndCheck("join.unnamed", Size() - 1);

  TestTensor sum(DataType::kFloat32, {5}, RankValues("join.unnamed.after", Rank(), DataType::kFloat32, 5));
  accord::AllreduceOptions plain;
  plain.op = ReduceOp::kSum;
  accord::Handle reduced = Enqueued(accord::Allreduce(sum.view(), sum.view(), plain), "unnamed allreduce after");
  TestTensor mine(DataType::kFloat32, {1}, {static_cast<double>(Rank())});
  accord::Result<accord::Handle> gathered = accord::Allgather(mine.view());
  if (WaitOk(reduced, "unnamed allreduce after")) {
    ExpectValues("unnamed allreduce after", sum.view(), DataType::kFloat32, {5},
                 ReferenceAllreduce("join.unnamed.after", AllRanks(), DataType::kFloat32, 5, ValueKind::kSmall,
                                    ReduceSpec{ReduceOp::kSum}));
  }
  const accord::Status gather_status = Outcome(gathered, "unnamed allgather after");
  INFO("rank " << Rank() << ": unnamed allgather after the join: " << gather_status.ToString());
  CHECK(gather_status.ok());
}

}  // namespace
