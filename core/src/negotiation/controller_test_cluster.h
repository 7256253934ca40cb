// A simulated cluster for Controller's tests: N ranks as threads, each with
// its own Controller over one InProcHub, running negotiation rounds in step
// from a script. Every run is bounded (a round limit, and a watchdog that
// fails the test if a rank hangs).
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "negotiation/controller.h"
#include "negotiation/inproc_transport.h"

namespace accord::controller_testing {

// Forwards to another transport, counting Gather calls (full exchanges),
// and optionally corrupting what this rank gathers.
class CountingTransport : public ControlTransport {
 public:
  explicit CountingTransport(std::unique_ptr<ControlTransport> inner) : inner_(std::move(inner)) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  Status AllreduceBitAnd(std::vector<uint64_t>* bits) override { return inner_->AllreduceBitAnd(bits); }
  Status AllreduceBitAndCarrying(std::vector<uint64_t>* bits, const std::string& mine,
                                 std::vector<std::string>* carried) override {
    return inner_->AllreduceBitAndCarrying(bits, mine, carried);
  }
  Status Gather(const std::string& mine, std::vector<std::string>* gathered) override {
    ++gathers;
    return inner_->Gather(corrupt_gather ? std::string("\x01garbage") : mine, gathered);
  }
  Status Broadcast(std::string* bytes) override { return inner_->Broadcast(bytes); }

  std::atomic<int> gathers{0};
  std::atomic<bool> corrupt_gather{false};

 private:
  std::unique_ptr<ControlTransport> inner_;
};

class Cluster {
 public:
  Cluster(int size, int cache_capacity, StallOptions stall = {}) : hub_(std::make_shared<InProcHub>(size)) {
    for (int r = 0; r < size; ++r) {
      transports_.push_back(std::make_unique<CountingTransport>(std::make_unique<InProcTransport>(hub_, r)));
      controllers_.push_back(std::make_unique<Controller>(transports_.back().get(), cache_capacity, stall));
    }
  }
  int size() const { return hub_->size(); }
  Controller& controller(int r) { return *controllers_[r]; }
  CountingTransport& transport(int r) { return *transports_[r]; }
  int TotalGathers() const {
    return std::accumulate(transports_.begin(), transports_.end(), 0,
                           [](int n, const auto& t) { return n + t->gathers; });
  }

 private:
  std::shared_ptr<InProcHub> hub_;
  std::vector<std::unique_ptr<CountingTransport>> transports_;
  std::vector<std::unique_ptr<Controller>> controllers_;
};

struct Step {
  std::vector<Request> requests;  // new this round
  bool shutdown = false;
  std::string shutdown_reason;
  std::optional<TuningChoice> tuning;  // rank 0: an autotuned setting to send
  bool failed = false;                 // this rank's coordinator failed (with `shutdown`)
};
using Script = std::function<Step(int rank, int round)>;

struct RankLog {
  std::vector<Response> ready;   // every round's, in order
  std::vector<int> ready_round;  // the round each was released in
  int rounds = 0;
  int shutdown_round = -1;
  int failed_round = -1;                    // the round that said some rank failed
  std::string stop_message;                 // with shutdown_round
  bool stopped_by_error = false;            // with shutdown_round
  std::vector<std::string> stall_warnings;  // rank 0: every report it logged
  int first_warning_round = -1;
  std::vector<std::pair<int, TuningChoice>> tunings;  // (round, setting) received
  bool stopped = false;                               // the stop condition held
  Status error;
  int IndexOf(const std::string& name) const {
    auto it = std::find_if(ready.begin(), ready.end(), [&](const Response& r) { return r.name == name; });
    return it == ready.end() ? -1 : static_cast<int>(it - ready.begin());
  }
  const Response* Find(const std::string& name) const { return IndexOf(name) < 0 ? nullptr : &ready[IndexOf(name)]; }
  int RoundOf(const std::string& name) const { return IndexOf(name) < 0 ? -1 : ready_round[IndexOf(name)]; }
};
// Must depend only on what every rank sees alike (the ready lists).
using StopWhen = std::function<bool(const RankLog&)>;

inline StopWhen Released(std::vector<std::string> names) {
  return [names](const RankLog& log) {
    return std::all_of(names.begin(), names.end(), [&](const std::string& n) { return log.Find(n) != nullptr; });
  };
}

inline void RunRank(Controller* c, const Script& script, const StopWhen& stop, int max_rounds, RankLog* log) {
  for (int round = 0; round < max_rounds; ++round) {
    Step step = script(c->rank(), round);
    Result<RoundResult> result =
        c->RunRound(std::move(step.requests), step.shutdown, false, step.shutdown_reason, step.tuning, step.failed);
    log->rounds = round + 1;
    if (!result.ok()) {
      log->error = result.status();
      return;
    }
    log->ready.insert(log->ready.end(), result->ready.begin(), result->ready.end());
    log->ready_round.resize(log->ready.size(), round);
    c->Recycle(std::move(result->ready));  // as the runtime does: later rounds reuse these
    if (result->tuning) log->tunings.push_back({round, *result->tuning});
    if (!result->stall_warning.empty()) {
      if (log->stall_warnings.empty()) log->first_warning_round = round;
      log->stall_warnings.push_back(result->stall_warning);
    }
    if (result->failed) log->failed_round = round;
    if (result->shutdown) {
      log->shutdown_round = round;
      log->stop_message = result->stop_message;
      log->stopped_by_error = result->stopped_by_error;
      return;
    }
    if (stop && stop(*log)) {
      log->stopped = true;
      return;
    }
  }
}

// Runs rounds on every rank, one thread each, until `stop` holds, a rank
// shuts down or fails, or `max_rounds`. A rank still running after
// `watchdog` fails the test; its thread is left behind (it holds the cluster).
inline std::vector<RankLog> Run(const std::shared_ptr<Cluster>& cluster, Script script, StopWhen stop,
                                int max_rounds = 30, std::chrono::seconds watchdog = std::chrono::seconds(5)) {
  const int n = cluster->size();
  auto logs = std::make_shared<std::vector<RankLog>>(n);
  std::vector<std::future<void>> finished;
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    std::promise<void> done;
    finished.push_back(done.get_future());
    threads.emplace_back([=, done = std::move(done)]() mutable {
      RunRank(&cluster->controller(r), script, stop, max_rounds, &(*logs)[r]);
      done.set_value();
    });
  }
  const auto deadline = std::chrono::steady_clock::now() + watchdog;
  std::vector<int> hung;
  std::string errors;  // of the ranks that did finish (safe to read: their futures are ready)
  for (int r = 0; r < n; ++r) {
    if (finished[r].wait_until(deadline) != std::future_status::ready) {
      hung.push_back(r);
    } else if (!(*logs)[r].error.ok()) {
      errors += "; rank " + std::to_string(r) + " failed: " + (*logs)[r].error.ToString();
    }
  }
  if (!hung.empty()) {
    for (auto& t : threads) t.detach();
    FAIL("negotiation hung: " << hung.size() << " of " << n << " ranks (first: rank " << hung[0]
                              << ") still running after " << watchdog.count() << " s" << errors);
  }
  for (auto& t : threads) t.join();
  return *logs;
}

// Every rank ran cleanly to the stop condition and saw the same ready lists.
inline void CheckAgreement(const std::vector<RankLog>& logs, bool expect_stopped = true) {
  for (size_t r = 0; r < logs.size(); ++r) {
    INFO("rank " << r << " error: " << logs[r].error << ", rounds " << logs[r].rounds);
    REQUIRE(logs[r].error.ok());
    if (expect_stopped) REQUIRE(logs[r].stopped);
    CHECK(logs[r].rounds == logs[0].rounds);
    CHECK(logs[r].shutdown_round == logs[0].shutdown_round);
    CHECK(logs[r].failed_round == logs[0].failed_round);
    REQUIRE(logs[r].ready.size() == logs[0].ready.size());
    for (size_t i = 0; i < logs[0].ready.size(); ++i) {
      const Response& want = logs[0].ready[i];
      const Response& got = logs[r].ready[i];
      INFO("rank " << r << " ready[" << i << "]: expected '" << want.name << "' (round " << logs[0].ready_round[i]
                   << "), got '" << got.name << "' (round " << logs[r].ready_round[i] << ")");
      CHECK(got.name == want.name);
      CHECK(logs[r].ready_round[i] == logs[0].ready_round[i]);
      CHECK(got.type == want.type);
      CHECK(got.error_code == want.error_code);
      CHECK(got.error_message == want.error_message);
      CHECK(got.shape == want.shape);
      CHECK(got.rank_rows == want.rank_rows);
      CHECK(got.splits == want.splits);
      CHECK(got.last_joined_rank == want.last_joined_rank);
    }
  }
}

inline void CheckError(const Response& resp, StatusCode code, const std::vector<std::string>& mentions) {
  INFO("'" << resp.name << "': " << resp.error_message);
  CHECK(resp.error_code == code);
  for (const auto& m : mentions) {
    INFO("the message should mention \"" << m << "\"");
    CHECK(resp.error_message.find(m) != std::string::npos);
  }
}

inline Request Make(const std::string& name, OpType type, Shape shape, DataType dtype = DataType::kFloat32,
                    int root_rank = -1) {
  Request r;
  r.name = name;
  r.type = type;
  r.shape = std::move(shape);
  r.dtype = dtype;
  r.root_rank = root_rank;
  return r;
}

inline Request Allreduce(const std::string& name, Shape shape = {4}) { return Make(name, OpType::kAllreduce, shape); }
inline Request JoinRequest() { return Make(kJoinName, OpType::kJoin, {}); }

}  // namespace accord::controller_testing
