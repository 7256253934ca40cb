// Tests for FailureProtocol: the first fatal error wins and becomes the
// request to stop, with a bounded wait; a stall inspector's stop keeps the
// first reason; the first stop status wins.
#include "runtime/failure_protocol.h"

#include <catch2/catch.hpp>

#include <chrono>

namespace accord {
namespace {

using std::chrono::duration;

double Seconds(std::chrono::steady_clock::duration d) { return duration<double>(d).count(); }

TEST_CASE("FailureWait: the stall shutdown time, capped at 30 s, plus two cycle times", "[failure_protocol]") {
  Config config;
  config.stall_check_disable = false;
  config.stall_shutdown_time_seconds = 3;
  CHECK(Seconds(FailureWait(config, 0)) == Approx(3));
  CHECK(Seconds(FailureWait(config, 5)) == Approx(3.01));
  config.stall_shutdown_time_seconds = 100;
  CHECK(Seconds(FailureWait(config, 0)) == Approx(30));
  config.stall_shutdown_time_seconds = 0;  // the inspector never stops the job
  CHECK(Seconds(FailureWait(config, 0)) == Approx(30));
  config.stall_shutdown_time_seconds = 3;
  config.stall_check_disable = true;
  CHECK(Seconds(FailureWait(config, 0)) == Approx(30));
}

TEST_CASE("FailureProtocol: the first fatal error asks every rank to stop", "[failure_protocol]") {
  Config config;
  FailureProtocol failures;
  CHECK(failures.Absorb(Status::OK(), 2, config, 0).ok());
  CHECK_FALSE(failures.failed());
  CHECK(*failures.deadline() == std::chrono::steady_clock::time_point::max());

  const auto before = std::chrono::steady_clock::now();
  CHECK(failures.Absorb(Status::Internal("broken"), 2, config, 0).ok());  // absorbed: go on with the rounds
  CHECK(failures.failed());
  CHECK(failures.stop_requested());
  CHECK(failures.ended_by_error());
  CHECK(*failures.deadline() > before);
  CHECK(failures.stop_reason() == "rank 2's coordinator failed: INTERNAL: broken");
  CHECK(failures.FinalStatus().message() == "accord stopped: rank 2's coordinator failed: INTERNAL: broken");
  CHECK(failures.FinalStatus().code() == StatusCode::kInternal);

  const Status later = failures.Absorb(Status::Timeout("no answer"), 2, config, 0);  // the rounds failed too
  CHECK(later.code() == StatusCode::kTimeout);
  CHECK(failures.stop_reason() == "rank 2's coordinator failed: INTERNAL: broken");
}

TEST_CASE("FailureProtocol: stops of a process set, reports and stop statuses", "[failure_protocol]") {
  FailureProtocol failures;
  failures.StopForSet(3, "accord was stopped by the stall inspector");
  CHECK(failures.stop_requested());
  CHECK(failures.stop_reason() == "process set 3 was stopped by the stall inspector");
  failures.StopForSet(4, "tensor x stalled");
  CHECK(failures.stop_reason() == "process set 3 was stopped by the stall inspector");
  CHECK_FALSE(failures.ended_by_error());

  RoundResult result;
  result.shutdown = true;
  result.stopped_by_error = true;
  result.stop_message = "accord stopped: process set 3 was stopped";
  failures.GlobalRoundEnded(result);
  CHECK(failures.ended_by_error());
  CHECK(failures.FinalStatus().code() == StatusCode::kShutDown);
  CHECK(failures.FinalStatus().message() == "accord stopped: process set 3 was stopped; the operation cannot complete");

  failures.Report(Status::Aborted("first"));
  failures.Report(Status::Aborted("second"));
  CHECK(failures.TakeReported().message() == "first");
  CHECK(failures.TakeReported().ok());

  failures.set_running();
  CHECK(failures.running());
  CHECK(failures.MarkStopped(Status::ShutDown("one")).message() == "one");
  CHECK(failures.MarkStopped(Status::ShutDown("two")).message() == "one");
  CHECK_FALSE(failures.running());
  CHECK(failures.stop_status().message() == "one");
}

}  // namespace
}  // namespace accord
