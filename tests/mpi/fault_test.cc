// A rank's coordinator fails (a fatal error, injected through the internal
// hook in core/src/runtime/fault_injection.h): every rank's pending
// operations fail with an error that names that rank and the cause, later
// enqueues are refused with the same error, no rank hangs, and Init() works
// again afterwards. The fault is injected where the other ranks are not
// inside a collective with the failing rank; the last resort for the case
// where they are is fault_abort_main.cc.
#include <catch2/catch.hpp>

#include <chrono>
#include <string>
#include <vector>

#include "runtime/fault_injection.h"
#include "test_util.h"

namespace {

using accord::DataType;
using accord::StatusCode;
using accord::testing::FaultPoint;
using namespace accord_test;

constexpr int kCulprit = 1;

std::string Cause(const std::string& where) { return "injected by fault_test (" + where + ")"; }

// What every rank's error says, the failing rank's own included.
std::string Explanation(const std::string& where) {
  return "accord stopped: rank " + std::to_string(kCulprit) + "'s coordinator failed: INTERNAL: " + Cause(where);
}

// The failing rank keeps its own error's code; the others were shut down by it.
void CheckFailure(const accord::Status& status, const std::string& where, const std::string& what) {
  INFO("rank " << Rank() << ": " << what << ": " << status);
  CHECK_THAT(status.message(), Catch::StartsWith(Explanation(where)));
  if (Rank() == kCulprit) {
    CHECK(status.code() == StatusCode::kInternal);
    CHECK(status.message() == Explanation(where));
  } else {
    CHECK(status.code() == StatusCode::kShutDown);
    CHECK(status.message() == Explanation(where) + "; the operation cannot complete");
  }
}

// After the failure an enqueue is refused at once, with the same error.
void CheckEnqueueRefused(const std::string& where) {
  TestTensor t(DataType::kFloat32, {4});
  accord::Result<accord::Handle> result = accord::Allreduce(t.view(), t.view(), SumOptions("fault.later"));
  {
    INFO("rank " << Rank() << ": an enqueue after the failure was accepted");
    CHECK_FALSE(result.ok());
  }
  if (result.ok()) {
    (void)WaitFor(result.value(), "fault.later");  // keeps `t` alive while it is in flight
    return;
  }
  CheckFailure(result.status(), where, "an enqueue after the failure");
  CHECK_FALSE(accord::IsInitialized());
}

// Shutdown() and Init() again on every rank; a collective works.
void Restart(const std::string& name) {
  CHECK(accord::Shutdown().ok());
  const accord::Status status = accord::Init();
  INFO("rank " << Rank() << ": Init() after the failure: " << status);
  REQUIRE(status.ok());
  CheckSumAllreduce(name, 64);
}

// Rank kCulprit arms the fault and then enqueues an operation of its own in
// `set`; returns that operation's outcome (it may be refused at enqueue if
// the coordinator has already stopped: the same error either way).
accord::Status ArmAndSubmit(FaultPoint point, const std::string& where, accord::ProcessSetId set, TestTensor* tensor) {
  accord::testing::InjectCoordinatorFault(point, Cause(where));
  accord::AllreduceOptions opts = SumOptions("fault.mine");
  opts.process_set = set;
  accord::Result<accord::Handle> mine = accord::Allreduce(tensor->view(), tensor->view(), opts);
  return mine.ok() ? WaitFor(mine.value(), "fault.mine") : mine.status();
}

TEST_CASE("fault: rank 1's coordinator fails between rounds; every rank's operations fail naming it", "[fault]") {
  if (Size() < 2) return;  // needs a failing rank and others to tell (the same on every rank)
  const std::string where = "between rounds";
  CheckSumAllreduce("fault.warmup", 32);
  // The others wait for an operation rank 1 never submits.
  TestTensor t(DataType::kFloat32, {16});
  accord::Handle pending;
  if (Rank() != kCulprit)
    pending = Enqueued(accord::Allreduce(t.view(), t.view(), SumOptions("fault.others")), "fault.others");
  WaitOk(Enqueued(accord::Barrier(), "barrier"), "barrier before the fault");

  const auto start = std::chrono::steady_clock::now();
  const accord::Status status = Rank() == kCulprit
                                    ? ArmAndSubmit(FaultPoint::kIteration, where, accord::kGlobalProcessSet, &t)
                                    : WaitFor(pending, "fault.others");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CheckFailure(status, where, "the pending operation");
  {
    // No waiting for a timeout: the others hear of it in the next round.
    INFO("rank " << Rank() << ": the failure took " << seconds << " s to arrive");
    CHECK(seconds < 10);
  }
  CheckEnqueueRefused(where);
  Restart("fault.after_restart");
}

TEST_CASE("fault: rank 1 fails before a process set's round; its members and the other ranks learn it", "[fault]") {
  if (Size() < 2) return;
  const std::string where = "before a process set's round";
  // With 3 ranks or more rank 0 is outside the set and hears of the failure
  // only through the global set.
  const std::vector<int> members = Size() == 2 ? std::vector<int>{0, 1} : std::vector<int>{1, 2};
  accord::Result<accord::ProcessSetId> added = accord::AddProcessSet(members);
  {
    INFO("rank " << Rank() << ": AddProcessSet: " << added.status());
    REQUIRE(added.ok());
  }
  const accord::ProcessSetId set = *added;
  bool member = false;
  for (int r : members) member = member || r == Rank();

  TestTensor t(DataType::kFloat32, {16});
  accord::Handle pending;
  if (Rank() != kCulprit) {
    accord::AllreduceOptions opts = SumOptions(member ? "fault.set.others" : "fault.global.others");
    if (member) opts.process_set = set;
    pending = Enqueued(accord::Allreduce(t.view(), t.view(), opts), opts.name);
  }
  WaitOk(Enqueued(accord::Barrier(), "barrier"), "barrier before the fault");

  const accord::Status status =
      Rank() == kCulprit ? ArmAndSubmit(FaultPoint::kSetRound, where, set, &t) : WaitFor(pending, "pending");
  CheckFailure(status, where, member ? "the pending operation in the process set" : "the pending global operation");
  CheckEnqueueRefused(where);
  Restart("fault.after_set_restart");
}

}  // namespace
