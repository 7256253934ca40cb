// Tests for Controller on a simulated cluster (controller_test_cluster.h):
// agreement, the response cache, mismatches, join, groups, shutdown and
// autotuned settings. The stall inspector's cases are in
// controller_stall_test.cc.
#include "negotiation/controller.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "negotiation/controller_test_cluster.h"

namespace accord {
namespace {

using namespace controller_testing;  // NOLINT(google-build-using-namespace): the tests' own harness

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

TEST_CASE("controller: rank 0's tuning setting reaches every rank in the same round, even all cached", "[controller]") {
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
    if (round == 2) step.requests = {Member(0), Member(1)};            // hit on both ranks
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

TEST_CASE("controller: a lone small cached allreduce is carried only where every rank sent it", "[controller]") {
  constexpr int kSize = 3;
  Cluster cluster(kSize, 16);
  // Rank r carries the float r + 1 for a tensor named "x" unless `refuse[r]`.
  std::vector<std::atomic<bool>> refuse(kSize);
  for (int r = 0; r < kSize; ++r) {
    cluster.controller(r).SetCarrier([r, &refuse](const Request& request, std::string* data) {
      if (refuse[r] || request.name != "x") return false;
      const float value = static_cast<float>(r + 1);
      data->append(reinterpret_cast<const char*>(&value), sizeof(value));
      return true;
    });
  }
  // One round on every rank, each rank announcing `requests(rank)`.
  auto round = [&](const std::function<std::vector<Request>(int)>& requests) {
    std::vector<std::future<Result<RoundResult>>> futures;
    for (int r = 0; r < kSize; ++r) {
      futures.push_back(
          std::async(std::launch::async, [&, r] { return cluster.controller(r).RunRound(requests(r), false); }));
    }
    std::vector<RoundResult> results;
    for (auto& f : futures) {
      Result<RoundResult> result = f.get();
      REQUIRE(result.ok());
      results.push_back(std::move(*result));
    }
    return results;
  };
  const auto x = [](int) { return std::vector<Request>{Allreduce("x", {1})}; };
  auto carried_floats = [](const RoundResult& result) {
    std::vector<float> values;
    for (const std::string& bytes : result.carried) {
      REQUIRE(bytes.size() == sizeof(float));
      float value;
      std::memcpy(&value, bytes.data(), sizeof(value));
      values.push_back(value);
    }
    return values;
  };

  // Negotiated in full the first time: nothing is carried (it is not cached yet).
  for (const RoundResult& result : round(x)) {
    REQUIRE(result.ready.size() == 1);
    CHECK(result.carried.empty());
  }
  // Cached: every rank carries its input, every rank gets all of them by rank.
  for (const RoundResult& result : round(x)) {
    REQUIRE(result.ready.size() == 1);
    CHECK(result.ready[0].name == "x");
    CHECK(carried_floats(result) == std::vector<float>{1, 2, 3});
  }
  // One rank does not carry: the tensor is agreed and runs as a collective everywhere.
  refuse[1] = true;
  for (const RoundResult& result : round(x)) {
    REQUIRE(result.ready.size() == 1);
    CHECK(result.carried.empty());
  }
  refuse[1] = false;
  // Two cached tensors in one round: fused, nothing carried.
  const auto xy = [](int) { return std::vector<Request>{Allreduce("x", {1}), Allreduce("y", {2})}; };
  round(xy);  // y is negotiated in full, x with it: a round with messages carries nothing
  for (const RoundResult& result : round(xy)) {
    CHECK(result.ready.size() == 2);
    CHECK(result.carried.empty());
  }
  // A rank late with x: the others' carried inputs are dropped, x waits.
  for (const RoundResult& result :
       round([](int r) { return r == 2 ? std::vector<Request>{} : std::vector<Request>{Allreduce("x", {1})}; })) {
    CHECK(result.ready.empty());
    CHECK(result.carried.empty());
  }
  for (const RoundResult& result :
       round([](int r) { return r == 2 ? std::vector<Request>{Allreduce("x", {1})} : std::vector<Request>{}; })) {
    REQUIRE(result.ready.size() == 1);
    CHECK(carried_floats(result) == std::vector<float>{1, 2, 3});
  }
}

}  // namespace
}  // namespace accord
