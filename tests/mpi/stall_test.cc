// The stall inspector across real ranks (run with a small
// ACCORD_STALL_CHECK_TIME_SECONDS and ACCORD_STALL_SHUTDOWN_TIME_SECONDS):
// every rank but the last submits "stall.cached" (announced as a cache bit,
// having run once before); the last rank submits "stall.only_last", which
// nobody else does. Rank 0 logs a warning naming both tensors, then the job
// stops: every rank's pending handle fails with kShutDown and the report
// (which tensor, who submitted it, who is missing), within the shutdown time.
// After Shutdown() and Init() collectives work again. A stall inside a
// process set stops the whole job the same way.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "test_util.h"

namespace {

using accord::DataType;
using accord::ReduceOp;
using accord::StatusCode;
using namespace accord_test;

void CheckAllreduce(const std::string& name) { CheckSumAllreduce(name, 32); }

double EnvSeconds(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? std::atof(value) : 0.0;
}

// "ranks 0, 1" for 0 .. n-1 (or "rank 0" for n == 1).
std::string RankRange(int n) {
  std::string out = n == 1 ? "rank " : "ranks ";
  for (int r = 0; r < n; ++r) out += (r ? ", " : "") + std::to_string(r);
  return out;
}

// Sends this process's stderr to a file while alive, then restores it; the
// captured text is kept for checking (and echoed, so the run log shows it).
class StderrCapture {
 public:
  StderrCapture() : path_("/tmp/accord_stall_test_stderr." + std::to_string(getpid())) {
    std::fflush(stderr);
    saved_ = dup(2);
    FILE* file = std::fopen(path_.c_str(), "w");
    dup2(fileno(file), 2);
    std::fclose(file);
  }
  std::string Finish() {
    std::fflush(stderr);
    dup2(saved_, 2);
    close(saved_);
    std::ifstream in(path_);
    std::stringstream text;
    text << in.rdbuf();
    std::remove(path_.c_str());
    std::fputs(text.str().c_str(), stderr);
    return text.str();
  }

 private:
  std::string path_;
  int saved_ = -1;
};

TEST_CASE("stall: a tensor missing on one rank is reported, and the job stops") {
  if (Size() < 2) return;  // nothing can be missing with one rank
  const double check = EnvSeconds("ACCORD_STALL_CHECK_TIME_SECONDS");
  const double stop = EnvSeconds("ACCORD_STALL_SHUTDOWN_TIME_SECONDS");
  REQUIRE(check > 0);
  REQUIRE(stop > check);
  const int last = Size() - 1;

  CheckAllreduce("stall.cached");  // now in every rank's response cache
  // Every rank has it cached before anyone submits again.
  WaitOk(Enqueued(accord::Barrier(), "barrier"), "barrier");

  StderrCapture capture;  // rank 0's warning goes to stderr
  const auto start = std::chrono::steady_clock::now();
  const std::string name = Rank() == last ? "stall.only_last" : "stall.cached";
  TestTensor t(DataType::kFloat32, {32});
  accord::Handle pending = Enqueued(accord::Allreduce(t.view(), t.view(), SumOptions(name)), name);
  const accord::Status status = WaitFor(pending, name);
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::string log = capture.Finish();

  INFO("rank " << Rank() << ": " << name << " failed after " << waited << " s with: " << status);
  CHECK(status.code() == StatusCode::kShutDown);
  const std::string& message = status.message();
  CHECK_THAT(message, Catch::Contains("accord was stopped by the stall inspector: "));
  CHECK_THAT(message, Catch::Contains("allreduce 'stall.cached' (waiting "));
  CHECK_THAT(message, Catch::Contains("'stall.cached' (waiting "));
  CHECK_THAT(message, Catch::Contains("submitted by " + RankRange(last) + "; missing on rank " + std::to_string(last)));
  CHECK_THAT(message, Catch::Contains("allreduce 'stall.only_last' (waiting "));
  CHECK_THAT(message, Catch::Contains("submitted by rank " + std::to_string(last) + "; missing on " + RankRange(last)));
  // Stopped within the shutdown time (a cached tensor reaches the
  // coordinator's table one check time late), with room for a slow machine.
  CHECK(waited >= stop);
  CHECK(waited < stop + check + 10.0);
  if (Rank() == 0) {
    INFO("rank 0's stderr:\n" << log);
    CHECK_THAT(log, Catch::Contains("warning rank 0"));
    CHECK_THAT(log, Catch::Contains("stall: some ranks have submitted tensors that others have not:"));
    // (The first warnings may come before "stall.cached", announced as a
    // cache bit, has reached rank 0's table: it is not checked here.)
    CHECK_THAT(log, Catch::Contains("allreduce 'stall.only_last' (waiting "));
    CHECK_THAT(log, Catch::Contains("submitted by rank " + std::to_string(last) + "; missing on " + RankRange(last)));
  }

  // Later enqueues fail the same way; Shutdown() and Init() start afresh.
  TestTensor late(DataType::kFloat32, {4});
  accord::Result<accord::Handle> after = accord::Allreduce(late.view(), late.view(), SumOptions("after_stop"));
  CHECK(after.status().code() == StatusCode::kShutDown);
  if (after.ok()) (void)after.value().Wait(std::chrono::seconds(5));
  CHECK(accord::Shutdown().ok());
  REQUIRE(accord::Init().ok());
  CheckAllreduce("after_reinit");
}

TEST_CASE("stall: a stall inside a process set stops the whole job") {
  if (Size() < 2) return;
  // Set {0, 1}: rank 0 submits "set.only0", rank 1 "set.only1" (each
  // missing on the other). Ranks outside the set wait on a global operation
  // that only fails when the job stops.
  accord::Result<accord::ProcessSetId> set = accord::AddProcessSet({0, 1});
  REQUIRE(set.ok());
  const auto start = std::chrono::steady_clock::now();
  TestTensor t(DataType::kFloat32, {8});
  accord::Handle pending;
  std::string name;
  if (Rank() <= 1) {
    name = "set.only" + std::to_string(Rank());
    accord::AllreduceOptions options = SumOptions(name);
    options.process_set = set.value();
    pending = Enqueued(accord::Allreduce(t.view(), t.view(), options), name);
  } else {
    name = "outside." + std::to_string(Rank());
    pending = Enqueued(accord::Allreduce(t.view(), t.view(), SumOptions(name)), name);
  }
  const accord::Status status = WaitFor(pending, name);
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  INFO("rank " << Rank() << ": " << name << " failed after " << waited << " s with: " << status);
  CHECK(status.code() == StatusCode::kShutDown);
  CHECK(waited < EnvSeconds("ACCORD_STALL_SHUTDOWN_TIME_SECONDS") + 10.0);
  if (Size() == 2) {
    // Only the set's report can have stopped it; ranks 0 and 1 both asked,
    // the lowest is named.
    CHECK_THAT(status.message(),
               Catch::Contains("accord was shut down by rank 0 (process set " + std::to_string(set.value()) +
                               " was stopped by the stall inspector: "));
    CHECK_THAT(status.message(), Catch::Contains("allreduce 'set.only0' (waiting "));
    CHECK_THAT(status.message(), Catch::Contains("submitted by rank 0; missing on rank 1"));
    CHECK_THAT(status.message(), Catch::Contains("submitted by rank 1; missing on rank 0"));
  } else {
    // The global set's own inspector (the outside ranks' tensors) may win.
    CHECK_THAT(status.message(), Catch::Contains("stopped by the stall inspector: "));
  }
  CHECK(accord::Shutdown().ok());
  REQUIRE(accord::Init().ok());
  CheckAllreduce("after_set_stall");
}

}  // namespace
