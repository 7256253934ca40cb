// Tests for Controller: N ranks as threads, each with its own Controller over
// one InProcHub, run negotiation rounds in step. Every run is bounded (a
// round limit, and a watchdog that fails the test if a rank hangs).
#include "negotiation/controller.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "negotiation/inproc_transport.h"

namespace accord {
namespace {

// Forwards to another transport, counting Gather calls (full exchanges),
// and optionally corrupting what this rank gathers.
class CountingTransport : public ControlTransport {
 public:
  explicit CountingTransport(std::unique_ptr<ControlTransport> inner) : inner_(std::move(inner)) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  Status AllreduceBitAnd(std::vector<uint64_t>* bits) override { return inner_->AllreduceBitAnd(bits); }
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
  int failed_round = -1;                   // the round that said some rank failed
  std::string stop_message;                // with shutdown_round
  bool stopped_by_error = false;           // with shutdown_round
  std::vector<std::string> stall_warnings; // rank 0: every report it logged
  int first_warning_round = -1;
  std::vector<std::pair<int, TuningChoice>> tunings;  // (round, setting) received
  bool stopped = false;          // the stop condition held
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

StopWhen Released(std::vector<std::string> names) {
  return [names](const RankLog& log) {
    return std::all_of(names.begin(), names.end(), [&](const std::string& n) { return log.Find(n) != nullptr; });
  };
}

void RunRank(Controller* c, const Script& script, const StopWhen& stop, int max_rounds, RankLog* log) {
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
std::vector<RankLog> Run(const std::shared_ptr<Cluster>& cluster, Script script, StopWhen stop,
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
void CheckAgreement(const std::vector<RankLog>& logs, bool expect_stopped = true) {
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

void CheckError(const Response& resp, StatusCode code, const std::vector<std::string>& mentions) {
  INFO("'" << resp.name << "': " << resp.error_message);
  CHECK(resp.error_code == code);
  for (const auto& m : mentions) {
    INFO("the message should mention \"" << m << "\"");
    CHECK(resp.error_message.find(m) != std::string::npos);
  }
}

Request Make(const std::string& name, OpType type, Shape shape, DataType dtype = DataType::kFloat32,
             int root_rank = -1) {
  Request r;
  r.name = name;
  r.type = type;
  r.shape = std::move(shape);
  r.dtype = dtype;
  r.root_rank = root_rank;
  return r;
}

Request Allreduce(const std::string& name, Shape shape = {4}) { return Make(name, OpType::kAllreduce, shape); }
Request JoinRequest() { return Make(kJoinName, OpType::kJoin, {}); }

// The same requests from every rank in round 0, nothing after.
Script AllAtOnce(std::vector<Request> requests) {
  return [requests](int, int round) { return Step{round == 0 ? requests : std::vector<Request>{}}; };
}

// Ten tensors of four kinds; rank r announces tensor i in round AnnounceRound(i, r).
int AnnounceRound(int i, int r) { return (3 * i + 2 * r) % 4; }
constexpr int kMixed = 10;
std::string MixedName(int i) { return "mixed." + std::to_string(i); }
Script MixedScript(int size) {
  return [size](int rank, int round) {
    Step step;
    for (int i = 0; i < kMixed; ++i) {
      if (AnnounceRound(i, rank) != round) continue;
      const std::string name = MixedName(i);
      switch (i % 4) {
        case 0: step.requests.push_back(Allreduce(name, {i + 1, 2})); break;
        case 1: step.requests.push_back(Make(name, OpType::kAllgather, {rank + 1, 3})); break;
        case 2: step.requests.push_back(Make(name, OpType::kBroadcast, {5}, DataType::kFloat32, i % size)); break;
        default: step.requests.push_back(Make(name, OpType::kAlltoall, {2 * size, 1})); break;
      }
    }
    return step;
  };
}
std::vector<std::string> MixedNames() {
  std::vector<std::string> names;
  for (int i = 0; i < kMixed; ++i) names.push_back(MixedName(i));
  return names;
}

// Every tensor was released once, without error, in the round its last rank
// announced it (not before every rank had it, and not later).
void CheckMixed(const std::vector<RankLog>& logs, int size) {
  const RankLog& log = logs[0];
  REQUIRE(log.ready.size() == kMixed);
  for (int i = 0; i < kMixed; ++i) {
    const std::string name = MixedName(i);
    const Response* resp = log.Find(name);
    INFO("tensor " << name << ", size " << size);
    REQUIRE(resp);
    CHECK(resp->ok());
    int last = 0;
    for (int r = 0; r < size; ++r) last = std::max(last, AnnounceRound(i, r));
    CHECK(log.RoundOf(name) == last);
    std::vector<int64_t> rows(size);
    for (int r = 0; r < size; ++r) rows[r] = r + 1;
    if (i % 4 == 1) CHECK(resp->rank_rows == rows);
    if (i % 4 == 2) CHECK(resp->root_rank == i % size);
    if (i % 4 == 3) CHECK(resp->splits == std::vector<int64_t>(size * size, 2));
  }
}

TEST_CASE("controller: every rank gets the same ready list; repeats go through the cache", "[controller]") {
  const int size = GENERATE(range(1, 9));
  const int capacity = GENERATE(64, 1, 0);
  auto cluster = std::make_shared<Cluster>(size, capacity);
  for (int pass = 0; pass < 3; ++pass) {
    INFO("size " << size << " cache capacity " << capacity << " pass " << pass);
    const int gathers = cluster->TotalGathers();
    auto logs = Run(cluster, MixedScript(size), Released(MixedNames()));
    CheckAgreement(logs);
    CheckMixed(logs, size);
    for (int r = 0; r < size; ++r) {
      INFO("rank " << r);
      CHECK(cluster->controller(r).cache().size() == static_cast<size_t>(std::min(capacity, kMixed)));
      CHECK(cluster->controller(r).num_pending() == 0);
    }
    if (pass > 0 && capacity >= kMixed) CHECK(cluster->TotalGathers() == gathers);  // bits only
    if (capacity == 0) CHECK(cluster->TotalGathers() > gathers);
  }
}

TEST_CASE("controller: rank 0's tuning setting reaches every rank in the same round, even all cached",
          "[controller]") {
  const int size = GENERATE(1, 2, 3);
  INFO("size " << size);
  auto cluster = std::make_shared<Cluster>(size, 8);
  CheckAgreement(Run(cluster, AllAtOnce({Allreduce("w")}), Released({"w"})));
  // Now "w" is cached: round 0 goes as bits only, unless a setting is sent.
  TuningChoice choice{int64_t{4} << 20, 1.0, false};
  choice.cache_enabled = false;
  Script script = [&](int rank, int round) {
    Step step;
    if (round == 0) step.requests = {Allreduce("w")};
    // Only rank 0's setting counts; another rank's is ignored.
    if (round == 1) step.tuning = rank == 0 ? choice : TuningChoice{1, 2.0, true};
    return step;
  };
  const int gathers = cluster->TotalGathers();
  auto logs = Run(cluster, script, nullptr, 3);
  CheckAgreement(logs, false);
  CHECK(cluster->TotalGathers() > gathers);  // the setting forced a full round
  for (int r = 0; r < size; ++r) {
    INFO("rank " << r);
    REQUIRE(logs[r].tunings.size() == 1);
    CHECK(logs[r].tunings[0].first == 1);
    CHECK(logs[r].tunings[0].second.fusion_threshold_bytes == choice.fusion_threshold_bytes);
    CHECK(logs[r].tunings[0].second.cycle_time_ms == choice.cycle_time_ms);
    CHECK_FALSE(logs[r].tunings[0].second.final);
    CHECK_FALSE(logs[r].tunings[0].second.cache_enabled);
    CHECK(logs[r].RoundOf("w") == 0);
  }
}

TEST_CASE("controller: a changed shape for a cached name is a mismatch on every rank", "[controller]") {
  const int size = GENERATE(2, 3, 5);
  INFO("size " << size);
  auto cluster = std::make_shared<Cluster>(size, 8);
  CheckAgreement(Run(cluster, AllAtOnce({Allreduce("w"), Allreduce("v")}), Released({"w", "v"})));
  auto changed = [size](int rank, int round) {
    return Step{round == 0 ? std::vector<Request>{Allreduce("w", {rank == size - 1 ? 5 : 4}), Allreduce("v")}
                           : std::vector<Request>{}};
  };
  auto logs = Run(cluster, changed, Released({"w", "v"}));
  CheckAgreement(logs);
  const Response* w = logs[0].Find("w");
  REQUIRE(w);
  CheckError(*w, StatusCode::kMismatch, {"'w'", "[4]", "[5]", "rank " + std::to_string(size - 1) + " has [5]"});
  REQUIRE(logs[0].Find("v"));
  CHECK(logs[0].Find("v")->ok());
  for (int r = 0; r < size; ++r) {
    INFO("rank " << r);
    CHECK_FALSE(cluster->controller(r).cache().Contains("w"));
    CHECK(cluster->controller(r).cache().Contains("v"));
  }
  // The name recovers: announced alike again, it succeeds and is cached anew.
  CheckAgreement(Run(cluster, AllAtOnce({Allreduce("w")}), Released({"w"})));
  const int gathers = cluster->TotalGathers();
  auto again = Run(cluster, AllAtOnce({Allreduce("w")}), Released({"w"}));
  CheckAgreement(again);
  CHECK(again[0].ready.at(0).ok());
  CHECK(cluster->TotalGathers() == gathers);
}

TEST_CASE("controller: a dtype mismatch fails that tensor on every rank, not the others", "[controller]") {
  const int size = GENERATE(2, 3, 5);
  auto cluster = std::make_shared<Cluster>(size, 8);
  auto script = [](int rank, int round) {
    if (round > 0) return Step{};
    const DataType dtype = rank == 0 ? DataType::kInt32 : DataType::kFloat32;
    return Step{{Allreduce("ok.1"), Make("bad", OpType::kAllreduce, {4}, dtype), Allreduce("ok.2")}};
  };
  auto logs = Run(cluster, script, Released({"ok.1", "bad", "ok.2"}));
  CheckAgreement(logs);
  INFO("size " << size);
  CHECK(logs[0].rounds == 1);
  const Response* bad = logs[0].Find("bad");
  REQUIRE(bad);
  CheckError(*bad, StatusCode::kMismatch, {"'bad'", "rank 0 has int32", "float32"});
  CHECK(logs[0].Find("ok.1")->ok());
  CHECK(logs[0].Find("ok.2")->ok());
  CHECK_FALSE(cluster->controller(0).cache().Contains("bad"));
}

TEST_CASE("controller: one rank's shutdown request stops every rank in the same round", "[controller]") {
  const int size = GENERATE(range(1, 9));
  auto cluster = std::make_shared<Cluster>(size, 8);
  auto script = [size](int rank, int round) {
    return Step{{Allreduce("t" + std::to_string(round))}, rank == size / 2 && round == 3};
  };
  auto logs = Run(cluster, script, nullptr);
  CheckAgreement(logs, false);
  INFO("size " << size);
  CHECK(logs[0].shutdown_round == 3);
  CHECK(logs[0].rounds == 4);
  CHECK(logs[0].ready.size() == 4);  // the shutdown round's tensors still negotiated
  // A plain Shutdown() is no error: the ranks finalize MPI as usual at exit.
  for (const RankLog& log : logs) CHECK_FALSE(log.stopped_by_error);
}

TEST_CASE("controller: joined ranks are not waited for; the last join completes it", "[controller]") {
  const int size = GENERATE(2, 3, 6);
  INFO("size " << size);
  auto cluster = std::make_shared<Cluster>(size, 8);
  CheckAgreement(Run(cluster, AllAtOnce({Allreduce("x")}), Released({"x"})));
  auto script = [](int rank, int round) {
    Step step;
    if (rank % 2 == 1 && round == 0) step.requests = {JoinRequest()};
    if (rank % 2 == 0 && round == 1) step.requests = {Allreduce("x"), Make("g", OpType::kAllgather, {2})};
    if (rank % 2 == 0 && round == 2) step.requests = {Allreduce("y", {3})};
    if (rank % 2 == 0 && rank > 0 && round == 3) step.requests = {JoinRequest()};
    if (rank == 0 && round == 4) step.requests = {JoinRequest()};
    return step;
  };
  auto logs = Run(cluster, script, Released({kJoinName}));
  CheckAgreement(logs);
  const RankLog& log = logs[0];
  CHECK(log.RoundOf("x") == 1);
  CHECK(log.RoundOf("g") == 1);
  CHECK(log.RoundOf("y") == 2);
  CHECK(log.RoundOf(kJoinName) == 4);
  REQUIRE(log.ready.size() == 4);
  CHECK(log.Find("x")->ok());
  CHECK(log.Find("y")->shape == Shape{3});
  // The allgather fails as a mismatch, naming every joined (odd) rank.
  std::string odd_ranks;
  for (int r = 1; r < size; r += 2) odd_ranks += (odd_ranks.empty() ? "" : ", ") + std::to_string(r);
  const std::string joined = size > 3 ? "ranks " + odd_ranks + " have joined" : "rank 1 has joined";
  CheckError(*log.Find("g"), StatusCode::kMismatch, {"'g'", "allgather", joined});
  CHECK(log.Find(kJoinName)->type == OpType::kJoin);
  CHECK(log.Find(kJoinName)->last_joined_rank == 0);
  for (int r = 0; r < size; ++r) CHECK(cluster->controller(r).num_pending() == 0);

  // After the join, caching works again.
  CheckAgreement(Run(cluster, AllAtOnce({Allreduce("x")}), Released({"x"})));
  const int gathers = cluster->TotalGathers();
  CheckAgreement(Run(cluster, AllAtOnce({Allreduce("x")}), Released({"x"})));
  CHECK(cluster->TotalGathers() == gathers);
}

TEST_CASE("controller: all ranks joining together give one join response", "[controller]") {
  const int size = GENERATE(1, 2, 4);
  auto cluster = std::make_shared<Cluster>(size, 8);
  auto logs = Run(cluster, AllAtOnce({JoinRequest()}), Released({kJoinName}));
  CheckAgreement(logs);
  REQUIRE(logs[0].ready.size() == 1);
  CHECK(logs[0].ready[0].last_joined_rank == size - 1);
  CHECK(logs[0].rounds == 1);
}

Request Member(int m, Shape shape = {2}) {
  Request r = Allreduce("g." + std::to_string(m), shape);
  r.group = "g";
  r.group_size = 3;
  return r;
}

TEST_CASE("controller: a group is released together, fresh and cached", "[controller]") {
  const int size = GENERATE(2, 3, 4);
  const int capacity = GENERATE(0, 1, 2, 16);
  INFO("size " << size << " cache capacity " << capacity);
  auto cluster = std::make_shared<Cluster>(size, capacity);
  // Each rank submits the whole group at once, in round r; member 2 has shape
  // odd_shape on the odd rank.
  auto grouped = [](int odd_rank, int64_t odd_shape) {
    return [=](int rank, int round) {
      Step step;
      if (round == rank) step.requests = {Member(0), Member(1), Member(2, {rank == odd_rank ? odd_shape : 2})};
      if (round == 0) step.requests.push_back(Allreduce("solo"));
      return step;
    };
  };
  for (int pass = 0; pass < 3; ++pass) {
    INFO("pass " << pass);
    const int gathers = cluster->TotalGathers();
    auto logs = Run(cluster, grouped(1, pass == 2 ? 7 : 2), Released({"g.0", "g.1", "g.2", "solo"}));
    CheckAgreement(logs);
    if (pass == 1 && capacity >= 4) CHECK(cluster->TotalGathers() == gathers);  // all four cached
    const RankLog& log = logs[0];
    CHECK(log.RoundOf("solo") == 0);
    for (int m = 0; m < 3; ++m) {
      const std::string name = "g." + std::to_string(m);
      INFO(name);
      CHECK(log.RoundOf(name) == log.RoundOf("g.0"));
      if (pass < 2) CHECK(log.RoundOf(name) == size - 1);
      REQUIRE(log.Find(name));
      CHECK(log.Find(name)->ok() == (pass < 2 || m < 2));
    }
    if (pass == 2) CheckError(*log.Find("g.2"), StatusCode::kMismatch, {"'g.2'", "rank 1 has [7]"});
    for (int r = 0; r < size; ++r) CHECK(cluster->controller(r).cache().size() <= static_cast<size_t>(capacity));
  }
}

// A corrupt message reaching the coordinator should fail every rank, not
// leave the others waiting in the broadcast that rank 0 never enters.
TEST_CASE("controller: a corrupt gathered message fails every rank", "[controller]") {
  auto cluster = std::make_shared<Cluster>(2, 8);
  cluster->transport(1).corrupt_gather = true;
  auto logs = Run(cluster, AllAtOnce({Allreduce("x")}), Released({"x"}), 5, std::chrono::seconds(2));
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r);
    CHECK_FALSE(logs[r].error.ok());
  }
}

// Not reachable through the runtime (TensorQueue enqueues a group's members
// together), but nothing in Controller's contract says so: when one member
// went to the coordinator as a message and the others later hit the cache,
// neither path ever sees the whole group.
TEST_CASE("controller: group members announced in different rounds on one rank", "[controller]") {
  auto cluster = std::make_shared<Cluster>(2, 8);
  CheckAgreement(Run(cluster, AllAtOnce({Member(0), Member(1), Member(2)}), Released({"g.0", "g.1", "g.2"})));
  auto script = [](int rank, int round) {
    Step step;
    if (round == 0) step.requests = {Member(2, {rank == 1 ? 3 : 2})};  // misses the cache on rank 1
    if (round == 2) step.requests = {Member(0), Member(1)};             // hit on both ranks
    return step;
  };
  CheckAgreement(Run(cluster, script, Released({"g.0", "g.1", "g.2"})));
}

TEST_CASE("controller: the shutdown message names the lowest rank that asked, and why", "[controller]") {
  const int size = GENERATE(2, 3, 5);
  auto cluster = std::make_shared<Cluster>(size, 8);
  // Ranks 1 and up ask in round 2, rank 1 without a reason (Shutdown()), the
  // others with their own.
  auto script = [](int rank, int round) {
    Step step{{Allreduce("t" + std::to_string(round))}, rank >= 1 && round == 2};
    if (rank >= 2) step.shutdown_reason = "reason of rank " + std::to_string(rank);
    return step;
  };
  auto logs = Run(cluster, script, nullptr);
  CheckAgreement(logs, false);
  for (int r = 0; r < size; ++r) {
    INFO("rank " << r << " of " << size);
    CHECK(logs[r].shutdown_round == 2);
    CHECK(logs[r].stop_message == "accord was shut down by rank 1 (it called Shutdown)");
    // Ranks 2 and up gave reasons (as a rank whose process set stalled
    // does): an error's stop, so the job does not finalize at exit.
    CHECK(logs[r].stopped_by_error == (size >= 3));
  }
}

TEST_CASE("controller: a failed rank's reason wins over a plain shutdown, and every rank learns it in one round",
          "[controller]") {
  const int size = GENERATE(1, 2, 3, 5);
  const int failing = size - 1;
  auto cluster = std::make_shared<Cluster>(size, 8);
  const std::string reason = "rank " + std::to_string(failing) + "'s coordinator failed: INTERNAL: boom";
  // "w" every round: a cache hit from round 1 on, so without the failure
  // round 2 would be bits only. In round 2 the last rank fails and, with 3
  // ranks or more, rank 1 calls Shutdown() in the same round.
  auto script = [&](int rank, int round) {
    Step step{{Allreduce("w")}};
    if (round == 2 && rank == failing) {
      step.shutdown = true;
      step.failed = true;
      step.shutdown_reason = reason;
    } else if (round == 2 && rank == 1 && size >= 3) {
      step.shutdown = true;
    }
    return step;
  };
  const int gathers_before = cluster->TotalGathers();
  auto logs = Run(cluster, script, nullptr);
  CheckAgreement(logs, false);
  INFO("size " << size);
  CHECK(cluster->TotalGathers() > gathers_before);
  for (int r = 0; r < size; ++r) {
    INFO("rank " << r << ": " << logs[r].stop_message);
    CHECK(logs[r].shutdown_round == 2);
    CHECK(logs[r].failed_round == 2);
    CHECK(logs[r].stop_message == "accord stopped: " + reason);
    CHECK(logs[r].stopped_by_error);
    // The controller still reports what the round agreed; the runtime does
    // not execute it.
    CHECK(logs[r].ready.size() == 3);
  }
}

TEST_CASE("controller: the response cache switched off and on again on every rank", "[controller]") {
  const int size = GENERATE(1, 2, 3);
  INFO("size " << size);
  auto cluster = std::make_shared<Cluster>(size, 8);
  const std::vector<std::string> names = {"w", "v"};
  auto once = AllAtOnce({Allreduce("w"), Allreduce("v", {7})});
  CheckAgreement(Run(cluster, once, Released(names)));
  auto check_cache = [&](size_t entries) {
    for (int r = 0; r < size; ++r) {
      INFO("rank " << r);
      CHECK(cluster->controller(r).cache().size() == entries);
    }
  };
  check_cache(2);
  int gathers = cluster->TotalGathers();
  CheckAgreement(Run(cluster, once, Released(names)));
  CHECK(cluster->TotalGathers() == gathers);  // all cached: bits only

  // Off (between two rounds, on every rank): emptied, and requests go in full.
  for (int r = 0; r < size; ++r) cluster->controller(r).SetCacheEnabled(false);
  check_cache(0);
  for (int pass = 0; pass < 2; ++pass) {
    INFO("cache off, pass " << pass);
    gathers = cluster->TotalGathers();
    const uint64_t hits = cluster->controller(0).cache_hits();
    auto logs = Run(cluster, once, Released(names));
    CheckAgreement(logs);
    CHECK(logs[0].Find("w")->ok());
    CHECK(logs[0].Find("v")->shape == Shape{7});
    CHECK(cluster->TotalGathers() > gathers);
    CHECK(cluster->controller(0).cache_hits() == hits);
    check_cache(0);
  }

  // On again: the first pass fills the cache, the next one is bits only.
  for (int r = 0; r < size; ++r) cluster->controller(r).SetCacheEnabled(true);
  gathers = cluster->TotalGathers();
  CheckAgreement(Run(cluster, once, Released(names)));
  CHECK(cluster->TotalGathers() > gathers);
  check_cache(2);
  gathers = cluster->TotalGathers();
  CheckAgreement(Run(cluster, once, Released(names)));
  CHECK(cluster->TotalGathers() == gathers);
}

namespace {

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

}  // namespace

TEST_CASE("controller: stall inspector reports an uncached tensor missing on one rank, then stops", "[controller][stall]") {
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
    CHECK(logs[r].Find("fine") != nullptr);     // the rest of the job went on
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
