// Shutdown and re-initialisation (its own program, since it shuts down):
// rank 0 shuts down while the other ranks wait on an operation rank 0 never
// submits; every pending handle on every rank completes with kShutDown (also
// for a thread blocked in Wait()); enqueues after it fail with kShutDown;
// Init() again works and collectives are correct after it. The other ranks'
// errors name the rank that shut down first.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <mpi.h>

#include "test_util.h"

namespace {

using accord::DataType;
using accord::ReduceOp;
using accord::StatusCode;
using namespace accord_test;

void CheckAllreduce(const std::string& name) { CheckSumAllreduce(name, 100); }

// Enqueueing after shutdown fails at once with kShutDown.
void CheckEnqueueRefused(const std::string& what) {
  TestTensor t(DataType::kFloat32, {4});
  accord::Result<accord::Handle> result = accord::Allreduce(t.view(), t.view(), SumOptions("after_shutdown"));
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
    // The message says who stopped the job and why.
    if (Rank() != 0) CHECK_THAT(status.message(), Catch::Contains("shut down by rank 0 (it called Shutdown)"));
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

TEST_CASE("shutdown: a rank whose collective failed shuts down; the others' errors name it") {
  if (Size() < 2) return;  // needs a rank that fails and others that wait for it
  const int culprit = Size() - 1;
  // A mismatched shape: the collective fails on every rank, naming the ranks.
  const int64_t n = Rank() == culprit ? 3 : 4;
  TestTensor bad(DataType::kFloat32, {n});
  const accord::Status failed = WaitFor(
      Enqueued(accord::Allreduce(bad.view(), bad.view(), SumOptions("fe.mismatch")), "fe.mismatch"), "fe.mismatch");
  INFO("rank " << Rank() << ": the mismatched allreduce: " << failed);
  CHECK(failed.code() == StatusCode::kMismatch);
  CHECK_THAT(failed.message(), Catch::Contains("rank " + std::to_string(culprit)));
  // The failing rank gives up and shuts down while the others wait for an
  // operation it will never submit: their errors say who stopped the job.
  TestTensor t(DataType::kFloat32, {8});
  accord::Handle pending;
  if (Rank() != culprit)
    pending = Enqueued(accord::Allreduce(t.view(), t.view(), SumOptions("fe.pending")), "fe.pending");
  WaitOk(Enqueued(accord::Barrier(), "barrier"), "barrier before the shutdown");
  if (Rank() == culprit) {
    CHECK(accord::Shutdown().ok());
  } else {
    const accord::Status status = WaitFor(pending, "fe.pending");
    INFO("rank " << Rank() << ": the pending op after rank " << culprit << "'s Shutdown(): " << status);
    CHECK(status.code() == StatusCode::kShutDown);
    CHECK_THAT(status.message(),
               Catch::Contains("shut down by rank " + std::to_string(culprit) + " (it called Shutdown)"));
    CHECK(accord::Shutdown().ok());
  }
  CheckShutDownHere("after Shutdown()");
  Reinit();
  CheckAllreduce("after_failed_rank_shutdown");
}

TEST_CASE("shutdown: every rank at once, with operations in flight; re-init works") {
  // Per-rank names: nobody else submits them, so they stay pending.
  const std::string name = "in_flight." + std::to_string(Rank());
  TestTensor t(DataType::kFloat32, {8});
  accord::Handle pending =
      Size() >= 2 ? Enqueued(accord::Allreduce(t.view(), t.view(), SumOptions(name)), name) : accord::Handle();
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

TEST_CASE("shutdown: a pending Join fails with kShutDown") {
  // Rank 0 joins; the others never do, and shut down instead.
  if (Size() < 2) return;  // a lone join completes at once (same on every rank)
  accord::Handle join;
  if (Rank() == 0) {
    join = Enqueued(accord::Join(), "join");
  } else {
    // Completes only once rank 0's join is known (a barrier would fail
    // while a rank has joined).
    TestTensor sync(DataType::kFloat32, {2});
    WaitOk(Enqueued(accord::Allreduce(sync.view(), sync.view(), SumOptions("sync")), "sync"), "sync");
  }
  if (Rank() == 1) {
    const accord::Status status = accord::Shutdown();
    CHECK(status.ok());
  }
  if (Rank() == 0) {
    const accord::Status status = WaitFor(join, "join");
    INFO("rank 0: join after rank 1 shut down: " << status);
    CHECK(status.code() == StatusCode::kShutDown);
    CHECK_THAT(status.message(), Catch::Contains("accord was shut down by rank 1 (it called Shutdown)"));
  }
  if (Rank() != 1) {
    // Learn of rank 1's shutdown through an operation that cannot complete.
    TestTensor t(DataType::kFloat32, {2});
    const std::string name = "after_join.";
    accord::Result<accord::Handle> probe =
        accord::Allreduce(t.view(), t.view(), SumOptions(name + std::to_string(Rank())));
    const accord::Status probe_status = probe.ok() ? WaitFor(probe.value(), "probe") : probe.status();
    {
      INFO("rank " << Rank() << ": an operation after rank 1 shut down: " << probe_status);
      CHECK(probe_status.code() == StatusCode::kShutDown);
    }
    const accord::Status status = accord::Shutdown();
    CHECK(status.ok());
  }
  Reinit();
  CheckAllreduce("after_join_shutdown");
}

TEST_CASE("shutdown: Init() fails on every rank when ranks disagree on the config") {
  if (Size() < 2) return;  // nothing to disagree with (same on every rank)
  // Each knob that decides which collectives a rank issues.
  const char* variable = GENERATE("ACCORD_FUSION_THRESHOLD", "ACCORD_STAGING_WINDOW_BYTES", "ACCORD_MPI_MAX_COUNT");
  const char* original = std::getenv(variable);
  const std::string saved = original != nullptr ? original : "";
  const accord::Status shutdown = accord::Shutdown();
  CHECK(shutdown.ok());
  setenv(variable, Rank() == 0 ? "1048576" : "2097152", 1);
  const accord::Status status = accord::Init();
  {
    INFO("rank " << Rank() << ": Init() with " << variable << " differing across ranks: " << status);
    CHECK_FALSE(status.ok());
    CHECK_THAT(status.message(), Catch::Contains(variable));
  }
  if (status.ok()) (void)accord::Shutdown();
  if (original != nullptr) {
    setenv(variable, saved.c_str(), 1);
  } else {
    unsetenv(variable);
  }
  Reinit();
  CheckAllreduce(std::string("after_config_mismatch.") + variable);
}

TEST_CASE("shutdown: while other threads keep enqueuing") {
  // Two threads enqueue operations under per-rank names (so they stay
  // pending) until an enqueue fails; the main thread shuts down once both
  // have enqueued some. Every enqueue must either fail with kShutDown or
  // give a handle that completes with kShutDown.
  const int kPerThread = 2000;
  struct Work {
    std::vector<TestTensor> tensors;
    std::vector<accord::Handle> handles;
    accord::Status refused;  // the enqueue that ended the loop
  };
  std::vector<Work> work(2);
  std::atomic<int> enqueued{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&work, &enqueued, t] {
      Work& w = work[t];
      w.tensors.reserve(kPerThread);
      for (int i = 0; i < kPerThread; ++i) {
        w.tensors.emplace_back(DataType::kFloat32, accord::Shape{4});
        const std::string name = "busy." + std::to_string(Rank()) + "." + std::to_string(t) + "." + std::to_string(i);
        accord::Result<accord::Handle> h =
            accord::Allreduce(w.tensors.back().view(), w.tensors.back().view(), SumOptions(name));
        if (!h.ok()) {
          w.refused = h.status();
          return;
        }
        w.handles.push_back(h.value());
        ++enqueued;
      }
    });
  }
  while (enqueued.load() < 100) std::this_thread::yield();
  const accord::Status status = accord::Shutdown();
  for (std::thread& thread : threads) thread.join();
  INFO("rank " << Rank() << ": Shutdown() with enqueuing threads: " << status);
  CHECK(status.ok());
  for (int t = 0; t < 2; ++t) {
    INFO("thread " << t << " enqueued " << work[t].handles.size() << ", then got " << work[t].refused);
    if (work[t].handles.size() < static_cast<size_t>(kPerThread)) {
      CHECK(work[t].refused.code() == StatusCode::kShutDown);
    }
    int not_shut_down = 0;
    for (const accord::Handle& h : work[t].handles) {
      // One rank's operations never match, except with a single rank.
      const accord::Status s = WaitFor(h, "busy op");
      if (!(s.code() == StatusCode::kShutDown || (Size() == 1 && s.ok()))) ++not_shut_down;
    }
    CHECK(not_shut_down == 0);
  }
  Reinit();
  CheckAllreduce("after_busy_shutdown");
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

// The rank queries against references computed here with MPI itself (MPI
// is MPI_THREAD_MULTIPLE, so this thread may call it beside the coordinator).
TEST_CASE("init: rank, local and cross queries and the thread level agree with MPI") {
  int rank = -1, size = -1, provided = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Query_thread(&provided);
  MPI_Comm local, cross;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local);
  int local_rank = -1, local_size = -1, cross_rank = -1, cross_size = -1;
  MPI_Comm_rank(local, &local_rank);
  MPI_Comm_size(local, &local_size);
  MPI_Comm_split(MPI_COMM_WORLD, local_rank, rank, &cross);
  MPI_Comm_rank(cross, &cross_rank);
  MPI_Comm_size(cross, &cross_size);
  MPI_Comm_free(&cross);
  MPI_Comm_free(&local);
  INFO("rank " << rank);
  CHECK(accord::IsInitialized());
  CHECK(accord::Rank() == rank);
  CHECK(accord::Size() == size);
  CHECK(accord::LocalRank() == local_rank);
  CHECK(accord::LocalSize() == local_size);
  CHECK(accord::CrossRank() == cross_rank);
  CHECK(accord::CrossSize() == cross_size);
  CHECK(accord::MpiThreadLevel() == provided);
  CHECK(accord::MpiThreadsSupported() == (provided == MPI_THREAD_MULTIPLE));
  const accord::BuildInfo build = accord::GetBuildInfo();
  CHECK(build.mpi);
  CHECK((!build.nccl || build.cuda));  // NCCL needs CUDA
  // One host here: every rank is local, and the cross set is this rank alone.
  CHECK(local_size == size);
  CHECK(cross_size == 1);
}

TEST_CASE("shutdown: process sets given to Init() exist with ids 1, 2, ... and work") {
  // Even ranks and odd ranks, passed to Init() after a Shutdown().
  std::vector<int> even, odd;
  for (int r = 0; r < Size(); ++r) (r % 2 == 0 ? even : odd).push_back(r);
  accord::InitOptions options;
  options.process_sets.push_back(even);
  if (!odd.empty()) options.process_sets.push_back(odd);
  CHECK(accord::Shutdown().ok());
  const accord::Status status = accord::Init(options);
  INFO("rank " << Rank() << ": Init() with process sets: " << status);
  CHECK(status.ok());
  const std::vector<accord::ProcessSetId> ids = accord::ProcessSetIds();
  CHECK(ids.size() == options.process_sets.size() + 1);
  for (size_t i = 0; i < options.process_sets.size(); ++i) {
    const accord::ProcessSetId id = static_cast<accord::ProcessSetId>(i + 1);
    accord::Result<std::vector<int>> ranks = accord::ProcessSetRanks(id);
    CHECK(ranks.ok());
    if (ranks.ok()) CHECK(*ranks == options.process_sets[i]);
  }
  // Each rank reduces in its own set: the sum runs over that set's ranks only.
  const std::vector<int>& mine = Rank() % 2 == 0 ? even : odd;
  const accord::ProcessSetId my_set = Rank() % 2 == 0 ? 1 : 2;
  const std::string name = "init_set.sum";
  TestTensor t(DataType::kInt32, {33}, RankValues(name, Rank(), DataType::kInt32, 33));
  accord::AllreduceOptions opts = SumOptions(name);
  opts.process_set = my_set;
  if (WaitOk(Enqueued(accord::Allreduce(t.view(), t.view(), opts), name), name)) {
    ExpectValues(name, t.view(), DataType::kInt32, {33},
                 ReferenceAllreduce(name, mine, DataType::kInt32, 33, ValueKind::kSmall, ReduceSpec{ReduceOp::kSum}));
  }
  CheckAllreduce("init_set.global");

  // A malformed set fails Init() on every rank with kInvalidArgument.
  CHECK(accord::Shutdown().ok());
  accord::InitOptions bad;
  bad.process_sets.push_back({Size()});  // not a rank
  const accord::Status refused = accord::Init(bad);
  INFO("rank " << Rank() << ": Init() with a bad set: " << refused);
  CHECK(refused.code() == StatusCode::kInvalidArgument);
  CHECK(refused.message().find("outside") != std::string::npos);
  Reinit();
  CheckAllreduce("init_set.after");
}

}  // namespace
