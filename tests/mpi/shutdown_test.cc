// Shutdown and re-initialisation (its own program, since it shuts down):
// rank 0 shuts down while the other ranks wait on an operation rank 0 never
// submits; every pending handle on every rank completes with kShutDown (also
// for a thread blocked in Wait()); enqueues after it fail with kShutDown;
// Init() again works and collectives are correct after it.
#include <catch2/catch.hpp>

#include <string>
#include <thread>
#include <vector>

#include "test_util.h"

namespace {

using accord::DataType;
using accord::ReduceOp;
using accord::StatusCode;
using namespace accord_test;

accord::AllreduceOptions SumOptions(const std::string& name) {
  accord::AllreduceOptions options;
  options.name = name;
  options.op = ReduceOp::kSum;
  return options;
}

// An allreduce Sum over all ranks, checked.
void CheckAllreduce(const std::string& name) {
  TestTensor t(DataType::kFloat32, {100}, RankValues(name, Rank(), DataType::kFloat32, 100));
  if (!WaitOk(Enqueued(accord::Allreduce(t.view(), t.view(), SumOptions(name)), name), name)) {
    return;
  }
  ExpectValues(name, t.view(), DataType::kFloat32, {100},
               ReferenceAllreduce(name, AllRanks(), DataType::kFloat32, 100, ValueKind::kSmall,
                                  ReduceSpec{ReduceOp::kSum}));
}

// Enqueueing after shutdown fails at once with kShutDown.
void CheckEnqueueRefused(const std::string& what) {
  TestTensor t(DataType::kFloat32, {4});
  accord::Result<accord::Handle> result =
      accord::Allreduce(t.view(), t.view(), SumOptions("after_shutdown"));
  INFO("rank " << Rank() << ": enqueue " << what << ": " << result.status());
  CHECK(result.status().code() == StatusCode::kShutDown);
  if (result.ok()) (void)result.value().Wait(std::chrono::seconds(5));  // keep `t` alive
}

// Init() again; checks the rank queries come back.
void Reinit() {
  const accord::Status status = accord::Init();
  INFO("rank " << Rank() << ": Init() after Shutdown(): " << status);
  CHECK(status.ok());
  CHECK(accord::IsInitialized());
  CHECK(accord::Rank() == Rank());
  CHECK(accord::Size() == Size());
}

void CheckShutDownHere(const std::string& what) {
  INFO("rank " << Rank() << ": " << what);
  CHECK_FALSE(accord::IsInitialized());
  CHECK(accord::Rank() == -1);
  CHECK(accord::Size() == -1);
}

TEST_CASE("shutdown: rank 0 shuts down while the others wait; re-init works") {
  CheckAllreduce("warmup");
  // Each side has an operation the other never submits (with one rank there
  // is no other side, and the operation would simply complete).
  const bool pending_ops = Size() >= 2;
  TestTensor t(DataType::kFloat32, {16});
  accord::Handle pending;
  if (pending_ops) {
    const std::string name = Rank() == 0 ? "only.rank0" : "only.others";
    pending = Enqueued(accord::Allreduce(t.view(), t.view(), SumOptions(name)), name);
  }
  // After this every rank's pending op is certainly enqueued.
  WaitOk(Enqueued(accord::Barrier(), "barrier"), "barrier before shutdown");

  // A second thread blocked in Wait() must be woken too. (No Catch
  // assertions off the main thread: it only records the status.)
  accord::Status waiter_status = accord::Status::Internal("waiter did not run");
  std::thread waiter;
  if (pending_ops) {
    waiter = std::thread([&pending, &waiter_status] { waiter_status = pending.Wait(); });
  }

  if (Rank() == 0) {
    const accord::Status status = accord::Shutdown();
    INFO("rank 0: Shutdown(): " << status);
    CHECK(status.ok());
    CheckShutDownHere("after its own Shutdown()");
  }
  if (pending_ops) {
    const accord::Status status = WaitFor(pending, "the pending op");
    INFO("rank " << Rank() << ": pending op after rank 0's Shutdown(): " << status);
    CHECK(status.code() == StatusCode::kShutDown);
    waiter.join();
    INFO("the thread blocked in Wait() got " << waiter_status);
    CHECK(waiter_status.code() == StatusCode::kShutDown);
  }
  if (Rank() != 0) {
    // This rank saw the shutdown through its pending op (with more than one rank).
    if (pending_ops) CheckEnqueueRefused("after rank 0 shut down");
    const accord::Status status = accord::Shutdown();
    INFO("rank " << Rank() << ": Shutdown() after rank 0's: " << status);
    CHECK(status.ok());
    CheckShutDownHere("after its own Shutdown()");
  }
  CheckEnqueueRefused("after Shutdown()");

  Reinit();
  CheckAllreduce("warmup");  // a name used before the shutdown
  CheckAllreduce("after_reinit");
}

TEST_CASE("shutdown: every rank at once, with operations in flight; re-init works") {
  // Per-rank names: nobody else submits them, so they stay pending.
  const std::string name = "in_flight." + std::to_string(Rank());
  TestTensor t(DataType::kFloat32, {8});
  accord::Handle pending =
      Size() >= 2 ? Enqueued(accord::Allreduce(t.view(), t.view(), SumOptions(name)), name)
                  : accord::Handle();
  const accord::Status status = accord::Shutdown();
  INFO("rank " << Rank() << ": Shutdown(): " << status);
  CHECK(status.ok());
  if (pending.valid()) {
    const accord::Status pending_status = WaitFor(pending, name);
    INFO(name << ": " << pending_status);
    CHECK(pending_status.code() == StatusCode::kShutDown);
  }
  CheckShutDownHere("after Shutdown()");
  CheckEnqueueRefused("after Shutdown()");
  Reinit();
  CheckAllreduce("after_second_reinit");
}

TEST_CASE("shutdown: several Init/Shutdown cycles in a row") {
  for (int cycle = 0; cycle < 3; ++cycle) {
    const accord::Status status = accord::Shutdown();
    INFO("rank " << Rank() << ": cycle " << cycle << ": Shutdown(): " << status);
    CHECK(status.ok());
    Reinit();
    CheckAllreduce("cycle." + std::to_string(cycle));
  }
}

}  // namespace
