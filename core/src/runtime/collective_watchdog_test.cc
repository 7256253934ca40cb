// Tests for CollectiveWatchdog (runtime/collective_watchdog.h): a step that
// outlives the timeout is reported once, with its tensors, process set and
// ranks; a step that ends in time, or no step at all, is never reported; a
// timeout of 0 starts no thread.
#include "runtime/collective_watchdog.h"

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>

#include "runtime/process_set.h"

namespace accord {
namespace {

using namespace std::chrono_literals;

struct Reports {
  std::mutex mutex;
  std::vector<std::string> messages;
  std::atomic<int> count{0};
  std::function<void(const std::string&)> action() {
    return [this](const std::string& message) {
      std::lock_guard<std::mutex> lock(mutex);
      messages.push_back(message);
      ++count;
    };
  }
};

// Waits (at most 10 s) for the first report.
void WaitForReport(const Reports& reports) {
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (reports.count == 0 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(10ms);
}

void MakeSet(ProcessSet& set) {
  set.id = 3;
  set.ranks = {0, 2, 5};
}

TEST_CASE("a collective that outlives the timeout is reported with its tensors, set and ranks") {
  Reports reports;
  ProcessSet set;
  MakeSet(set);
  std::vector<Response> responses(10);
  std::vector<OpItem> items;
  for (size_t i = 0; i < responses.size(); ++i) {
    responses[i].type = OpType::kAllreduce;
    responses[i].name = "grad." + std::to_string(i);
    items.push_back({&responses[i], nullptr});
  }
  {
    CollectiveWatchdog dog(0.1, reports.action());
    CollectiveWatchdog::Scope step(dog, set, &items);
    WaitForReport(reports);
  }
  REQUIRE(reports.count >= 1);
  const std::string& message = reports.messages.front();
  CHECK_THAT(message, Catch::Contains("allreduce of 10 tensors ('grad.0', 'grad.1'"));
  CHECK_THAT(message, Catch::Contains("'grad.7', and 2 more)"));
  CHECK_THAT(message, Catch::Contains("on process set 3 (ranks 0, 2, 5)"));
  CHECK_THAT(message, Catch::Contains("has not finished after"));
  CHECK_THAT(message, Catch::Contains("ACCORD_COLLECTIVE_TIMEOUT_SECONDS=0.1"));
  CHECK_THAT(message, Catch::Contains("exit status 124"));
}

TEST_CASE("a negotiation round that outlives the timeout is reported as one") {
  Reports reports;
  ProcessSet set;
  MakeSet(set);
  {
    CollectiveWatchdog dog(0.1, reports.action());
    CollectiveWatchdog::Scope step(dog, set, nullptr);
    WaitForReport(reports);
  }
  REQUIRE(reports.count >= 1);
  CHECK_THAT(reports.messages.front(), Catch::StartsWith("a negotiation round on process set 3 (ranks 0, 2, 5)"));
}

TEST_CASE("steps that end within the timeout, and idle time, are never reported") {
  Reports reports;
  ProcessSet set;
  MakeSet(set);
  {
    CollectiveWatchdog dog(0.3, reports.action());
    // Many short steps spanning several timeouts in all, then idle time.
    const auto until = std::chrono::steady_clock::now() + 1s;
    while (std::chrono::steady_clock::now() < until) {
      CollectiveWatchdog::Scope step(dog, set, nullptr);
      std::this_thread::sleep_for(20ms);
    }
    std::this_thread::sleep_for(700ms);
  }
  CHECK(reports.count == 0);
}

TEST_CASE("a timeout of 0 turns the watchdog off") {
  Reports reports;
  ProcessSet set;
  MakeSet(set);
  {
    CollectiveWatchdog dog(0, reports.action());
    CollectiveWatchdog::Scope step(dog, set, nullptr);
    std::this_thread::sleep_for(200ms);
  }
  CHECK(reports.count == 0);
}

}  // namespace
}  // namespace accord
