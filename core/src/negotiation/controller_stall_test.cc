// The stall inspector seen through Controller on a simulated cluster
// (controller_test_cluster.h): what it reports, when it stops the job, and
// when it stays silent.
#include <catch2/catch.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "negotiation/controller.h"
#include "negotiation/controller_test_cluster.h"

namespace accord {
namespace {

using namespace controller_testing;  // NOLINT(google-build-using-namespace): the tests' own harness

bool Contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Runs until every rank stops or `max_rounds`; each round rank 0 first
// sleeps `tick` so that the stall timers advance in few rounds.
std::vector<RankLog> RunTicking(const std::shared_ptr<Cluster>& cluster, const Script& script, int max_rounds,
                                std::chrono::milliseconds tick = std::chrono::milliseconds(2)) {
  auto ticking = [script, tick](int rank, int round) {
    if (rank == 0) std::this_thread::sleep_for(tick);
    return script(rank, round);
  };
  return Run(cluster, ticking, nullptr, max_rounds, std::chrono::seconds(20));
}

TEST_CASE("controller: stall inspector reports an uncached tensor missing on one rank, then stops",
          "[controller][stall]") {
  const int size = GENERATE(2, 3, 4);
  const int late = size - 1;  // never submits "stuck"
  auto cluster = std::make_shared<Cluster>(size, 8, StallOptions{0.05, 0.3});
  auto script = [late](int rank, int round) {
    Step step;
    if (round == 0 && rank != late) step.requests = {Allreduce("stuck")};
    if (round == 1) step.requests = {Allreduce("fine")};
    return step;
  };
  auto logs = RunTicking(cluster, script, 2000);
  CheckAgreement(logs, false);
  INFO("size " << size);
  REQUIRE(logs[0].shutdown_round > 0);
  std::string submitted = size == 2 ? "submitted by rank 0;" : "submitted by ranks 0";
  for (int r = 1; r < late; ++r) submitted += ", " + std::to_string(r);
  if (size > 2) submitted += ";";
  const std::string missing = "missing on rank " + std::to_string(late);
  for (int r = 0; r < size; ++r) {
    INFO("rank " << r << ": " << logs[r].stop_message);
    CHECK(Contains(logs[r].stop_message, "accord was stopped by the stall inspector: allreduce 'stuck' (waiting "));
    CHECK(logs[r].stopped_by_error);
    CHECK(Contains(logs[r].stop_message, submitted));
    CHECK(Contains(logs[r].stop_message, missing));
    CHECK_FALSE(Contains(logs[r].stop_message, "'fine'"));
    CHECK(logs[r].Find("fine") != nullptr);  // the rest of the job went on
    CHECK(logs[r].Find("stuck") == nullptr);
    if (r > 0) CHECK(logs[r].stall_warnings.empty());  // only the coordinator rank warns
  }
  // Rank 0 warned before it stopped the job, with the same report.
  REQUIRE_FALSE(logs[0].stall_warnings.empty());
  CHECK(logs[0].first_warning_round < logs[0].shutdown_round);
  CHECK(Contains(logs[0].stall_warnings[0], "allreduce 'stuck'"));
  CHECK(Contains(logs[0].stall_warnings[0], missing));
}

TEST_CASE("controller: stall inspector sees a cached tensor pending on some ranks only", "[controller][stall]") {
  const int size = GENERATE(2, 3, 4);
  auto cluster = std::make_shared<Cluster>(size, 8, StallOptions{0.05, 0.3});
  // Round 0 caches "c"; from round 2 every rank but rank 1 submits it again
  // (announced as a cache bit, which the AND alone would lose).
  auto script = [](int rank, int round) {
    Step step;
    if (round == 0 || (round == 2 && rank != 1)) step.requests = {Allreduce("c")};
    return step;
  };
  auto logs = RunTicking(cluster, script, 2000);
  CheckAgreement(logs, false);
  INFO("size " << size);
  REQUIRE(logs[0].shutdown_round > 0);
  REQUIRE(logs[0].ready.size() == 1);  // the first "c" only
  for (int r = 0; r < size; ++r) {
    INFO("rank " << r << ": " << logs[r].stop_message);
    CHECK(Contains(logs[r].stop_message, "allreduce 'c'"));
    CHECK(Contains(logs[r].stop_message, "missing on rank 1"));
    CHECK(Contains(logs[r].stop_message, size == 2 ? "submitted by rank 0;" : "submitted by ranks 0, 2"));
  }
  REQUIRE_FALSE(logs[0].stall_warnings.empty());
  CHECK(logs[0].first_warning_round < logs[0].shutdown_round);
}

TEST_CASE("controller: stall inspector without a shutdown time only warns; off, it is silent", "[controller][stall]") {
  const bool enabled = GENERATE(true, false);
  auto cluster = std::make_shared<Cluster>(3, 8, enabled ? StallOptions{0.02, 0} : StallOptions{});
  auto script = [](int rank, int round) {
    Step step;
    if (round == 0 && rank == 2) step.requests = {Allreduce("only.2")};
    return step;
  };
  auto logs = RunTicking(cluster, script, 100);  // at least 0.2 s
  CheckAgreement(logs, false);
  INFO("enabled " << enabled);
  CHECK(logs[0].rounds == 100);
  CHECK(logs[0].shutdown_round == -1);
  if (enabled) {
    REQUIRE(logs[0].stall_warnings.size() >= 2);  // repeated, about once per check time
    CHECK(Contains(logs[0].stall_warnings[0], "allreduce 'only.2'"));
    CHECK(Contains(logs[0].stall_warnings[0], "submitted by rank 2; missing on ranks 0, 1"));
  } else {
    CHECK(logs[0].stall_warnings.empty());
  }
}

}  // namespace
}  // namespace accord
