// Tests for BuildResponse (agreement -> plan, every disagreement -> an error
// naming the tensor, the ranks and their values) and MessageTable (release
// once complete, release order, groups, join).
#include "negotiation/message_table.h"

#include <catch2/catch.hpp>

#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace accord {
namespace {

using Requests = std::vector<std::optional<Request>>;

Request Req(const std::string& name, OpType type, Shape shape, DataType dtype = DataType::kFloat32) {
  Request r;
  r.name = name;
  r.type = type;
  r.dtype = dtype;
  r.shape = std::move(shape);
  return r;
}

// `size` copies of `base`, then `edit(rank, request)` on each.
Requests PerRank(int size, const Request& base, const std::function<void(int, Request*)>& edit = nullptr) {
  Requests out;
  for (int r = 0; r < size; ++r) {
    Request q = base;
    if (edit) edit(r, &q);
    out.push_back(q);
  }
  return out;
}

void CheckOk(const Response& resp) {
  INFO("error: " << resp.error_message);
  REQUIRE(resp.ok());
  CHECK(resp.error_message.empty());
}

void CheckError(const Response& resp, StatusCode code, const std::vector<std::string>& mentions) {
  INFO("message: " << resp.error_message);
  CHECK(resp.error_code == code);
  CHECK_FALSE(resp.ok());
  CHECK(resp.ToStatus().code() == code);
  for (const auto& m : mentions) {
    INFO("message should mention \"" << m << "\"");
    CHECK(resp.error_message.find(m) != std::string::npos);
  }
}

TEST_CASE("agreeing allreduce requests give a plan with every field", "[message_table]") {
  Request base = Req("grad", OpType::kAllreduce, {4, 5}, DataType::kBFloat16);
  base.op = ReduceOp::kAverage;
  base.prescale_factor = 0.5;
  base.postscale_factor = 2.0;
  base.device = Device::CUDA(0);
  Response resp = BuildResponse("grad", PerRank(3, base, [](int r, Request* q) { q->device.ordinal = r; }), {});
  CheckOk(resp);
  CHECK(resp.name == "grad");
  CHECK(resp.type == OpType::kAllreduce);
  CHECK(resp.dtype == DataType::kBFloat16);
  CHECK(resp.op == ReduceOp::kAverage);
  CHECK(resp.prescale_factor == 0.5);
  CHECK(resp.postscale_factor == 2.0);
  CHECK(resp.device_type == DeviceType::kCUDA);
  CHECK(resp.shape == Shape{4, 5});
  CHECK(resp.rank_rows.empty());
  CHECK(resp.splits.empty());
}

TEST_CASE("allgather plan lists every rank's rows", "[message_table]") {
  const std::vector<int64_t> rows = {2, 5, 0, 1};
  Requests reqs = PerRank(4, Req("emb", OpType::kAllgather, {}, DataType::kInt64), [&](int r, Request* q) {
    q->shape = {rows[r], 3, 2};
  });
  Response resp = BuildResponse("emb", reqs, {});
  CheckOk(resp);
  CHECK(resp.rank_rows == rows);
  CHECK(resp.shape == Shape{2, 3, 2});  // rank 0's
  CHECK(resp.RowElements() == 6);
  CHECK(resp.dtype == DataType::kInt64);
}

TEST_CASE("alltoall plan has the full splits matrix", "[message_table]") {
  SECTION("explicit splits, row r is rank r's sends") {
    const std::vector<std::vector<int64_t>> splits = {{1, 0, 2}, {0, 0, 4}, {3, 3, 3}};
    Requests reqs = PerRank(3, Req("a2a", OpType::kAlltoall, {}), [&](int r, Request* q) {
      q->splits = splits[r];
      q->shape = {splits[r][0] + splits[r][1] + splits[r][2], 7};
    });
    Response resp = BuildResponse("a2a", reqs, {});
    CheckOk(resp);
    CHECK(resp.splits == std::vector<int64_t>{1, 0, 2, 0, 0, 4, 3, 3, 3});
    CHECK(resp.rank_rows == std::vector<int64_t>{3, 4, 9});
  }
  SECTION("no splits means an even split, and may mix with explicit ones") {
    Requests reqs = PerRank(3, Req("a2a", OpType::kAlltoall, {}), [](int r, Request* q) {
      q->shape = {r == 1 ? 5 : 3 * (r + 1), 2};
      if (r == 1) q->splits = {5, 0, 0};
    });
    Response resp = BuildResponse("a2a", reqs, {});
    CheckOk(resp);
    CHECK(resp.splits == std::vector<int64_t>{1, 1, 1, 5, 0, 0, 3, 3, 3});
  }
}

// The sum of `values` as a wrapping (unsigned) addition gives it.
int64_t WrappedSum(const std::vector<int64_t>& values) {
  uint64_t sum = 0;
  for (int64_t v : values) sum += static_cast<uint64_t>(v);
  return static_cast<int64_t>(sum);
}

// Found by fuzzing the coordinator: splits whose sum overflowed an int64 were
// undefined behaviour (and could wrap around to dim 0), and negative splits
// made a plan. Every rank checks its own splits, so only a corrupt message
// gets here, but the coordinator must refuse it rather than plan with it.
TEST_CASE("alltoall splits that overflow or are negative give an error, not a plan", "[message_table]") {
  const int64_t big = int64_t{1} << 62;
  const std::vector<std::vector<int64_t>> bad = {{big, big, big, big}, {-1, 1, 2, 2}, {big, big, -big, 0}};
  for (const auto& splits : bad) {
    Request base = Req("t", OpType::kAlltoall, {4, 2});
    Response resp = BuildResponse("t",
                                  PerRank(4, base,
                                          [&](int r, Request* q) {
                                            if (r == 2) {
                                              q->splits = splits;
                                              q->shape = {WrappedSum(splits), 2};  // what a wrapping sum matches
                                            }
                                          }),
                                  {});
    INFO("rank 2's splits " << splits[0] << ", " << splits[1] << ", " << splits[2] << ", " << splits[3]);
    CheckError(resp, StatusCode::kInvalidArgument, {"'t'", "rank 2 has splits [", "one non-negative entry per rank"});
  }
}

TEST_CASE("broadcast plan keeps the root", "[message_table]") {
  Request base = Req("w", OpType::kBroadcast, {8});
  base.root_rank = 2;
  Response resp = BuildResponse("w", PerRank(3, base), {});
  CheckOk(resp);
  CHECK(resp.root_rank == 2);
  for (int root : {-1, 3}) {
    base.root_rank = root;
    INFO("root " << root);
    CheckError(BuildResponse("w", PerRank(3, base), {}), StatusCode::kInvalidArgument,
               {"'w'", std::to_string(root), "size 3"});
  }
}

struct MismatchCase {
  const char* what;
  Request base;
  std::function<void(Request*)> odd;  // applied to rank 1 only
  std::vector<std::string> mentions;  // besides the tensor name and the ranks
};

Request WithRoot(Request r, int root) {
  r.root_rank = root;
  return r;
}

TEST_CASE("every disagreement is a mismatch naming tensor, ranks and values", "[message_table]") {
  const Request ar = Req("t", OpType::kAllreduce, {2, 3});
  const std::vector<MismatchCase> cases = {
      {"op type", ar, [](Request* q) { q->type = OpType::kAllgather; }, {"allreduce", "allgather"}},
      {"dtype", ar, [](Request* q) { q->dtype = DataType::kInt32; }, {"dtype", "float32", "int32"}},
      {"shape",
       ar,
       [](Request* q) {
         q->shape = {3, 2};
       },
       {"shape", "[2, 3]", "[3, 2]"}},
      {"reduce op", ar, [](Request* q) { q->op = ReduceOp::kMax; }, {"reduce op", "Sum", "Max"}},
      {"prescale", ar, [](Request* q) { q->prescale_factor = 0.25; }, {"prescale", "1", "0.25"}},
      {"postscale", ar, [](Request* q) { q->postscale_factor = 8; }, {"postscale", "1", "8"}},
      {"group",
       ar,
       [](Request* q) {
         q->group = "g";
         q->group_size = 2;
       },
       {"group", "'g'"}},
      {"device", ar, [](Request* q) { q->device = Device::CUDA(1); }, {"device", "cpu", "cuda"}},
      {"reducescatter shape",
       Req("t", OpType::kReducescatter, {6}),
       [](Request* q) { q->shape = {7}; },
       {"[6]", "[7]"}},
      {"broadcast shape",
       WithRoot(Req("t", OpType::kBroadcast, {6}), 0),
       [](Request* q) { q->shape = {5}; },
       {"[6]", "[5]"}},
      {"root rank",
       WithRoot(Req("t", OpType::kBroadcast, {6}), 0),
       [](Request* q) { q->root_rank = 2; },
       {"root 0", "root 2"}},
      {"allgather trailing dims",
       Req("t", OpType::kAllgather, {4, 3}),
       [](Request* q) {
         q->shape = {4, 5};
       },
       {"trailing", "[3]", "[5]"}},
      {"allgather ndim",
       Req("t", OpType::kAllgather, {4, 3}),
       [](Request* q) {
         q->shape = {4, 3, 1};
       },
       {"dimensions", "2-d", "3-d"}},
      {"alltoall trailing dims",
       Req("t", OpType::kAlltoall, {3, 3}),
       [](Request* q) {
         q->shape = {3, 4};
       },
       {"[3]", "[4]"}},
  };
  for (const auto& c : cases) {
    INFO("case: " << c.what);
    Response resp = BuildResponse("t",
                                  PerRank(3, c.base,
                                          [&](int r, Request* q) {
                                            if (r == 1) c.odd(q);
                                          }),
                                  {});
    std::vector<std::string> mentions = c.mentions;
    mentions.insert(mentions.end(), {"'t'", "ranks 0, 2 have", "rank 1 has"});
    CheckError(resp, StatusCode::kMismatch, mentions);
  }
}

TEST_CASE("bad alltoall splits are invalid arguments naming the rank", "[message_table]") {
  auto run = [](std::vector<int64_t> splits, int64_t rows) {
    return BuildResponse("x",
                         PerRank(3, Req("x", OpType::kAlltoall, {3, 2}),
                                 [&](int r, Request* q) {
                                   if (r != 2) return;
                                   q->splits = splits;
                                   q->shape[0] = rows;
                                 }),
                         {});
  };
  CheckError(run({1, 1, 1}, 4), StatusCode::kInvalidArgument, {"'x'", "rank 2", "[1, 1, 1]", "4"});
  CheckError(run({2, 2}, 4), StatusCode::kInvalidArgument, {"'x'", "rank 2", "[2, 2]", "(3)"});
  CheckError(run({}, 4), StatusCode::kInvalidArgument, {"'x'", "rank 2", "(4)", "(3)"});
}

TEST_CASE("table releases a name once every rank has it, in first-arrival order", "[message_table]") {
  MessageTable table(3);
  std::vector<Response> ready;
  CHECK_FALSE(table.Add(1, Req("b", OpType::kAllreduce, {1})));
  CHECK_FALSE(table.Add(1, Req("a", OpType::kAllreduce, {1})));
  CHECK_FALSE(table.Add(0, Req("a", OpType::kAllreduce, {1})));
  CHECK_FALSE(table.Add(0, Req("b", OpType::kAllreduce, {1})));
  table.TakeReady(&ready);
  CHECK(ready.empty());
  table.Add(2, Req("a", OpType::kAllreduce, {1}));
  table.Add(2, Req("b", OpType::kAllreduce, {1}));
  table.TakeReady(&ready);
  REQUIRE(ready.size() == 2);
  CHECK(ready[0].name == "b");  // announced first (by rank 1)
  CHECK(ready[1].name == "a");
  ready.clear();
  table.TakeReady(&ready);
  CHECK(ready.empty());  // released only once
}

TEST_CASE("table holds a group until every member is complete", "[message_table]") {
  MessageTable table(2);
  auto member = [](const std::string& name) {
    Request r = Req(name, OpType::kAllreduce, {2});
    r.group = "g";
    r.group_size = 3;
    return r;
  };
  std::vector<Response> ready;
  for (int rank : {0, 1}) table.Add(rank, member("g.0"));
  table.Add(0, member("g.1"));
  table.Add(0, member("g.2"));
  table.Add(1, member("g.2"));
  table.Add(0, Req("solo", OpType::kAllreduce, {1}));
  table.Add(1, Req("solo", OpType::kAllreduce, {1}));
  table.TakeReady(&ready);
  REQUIRE(ready.size() == 1);
  CHECK(ready[0].name == "solo");
  ready.clear();
  table.Add(1, member("g.1"));
  table.TakeReady(&ready);
  REQUIRE(ready.size() == 3);
  for (int i = 0; i < 3; ++i) {
    INFO("index " << i);
    CHECK(ready[i].name == "g." + std::to_string(i));
    CHECK(ready[i].group == "g");
    CHECK(ready[i].group_size == 3);
  }
}

// Found by the property tests (tests/python/test_property_collectives.py): a
// group with more members on one rank than on another failed only on the
// ranks with fewer; the others waited for their extra members forever (and
// with the larger group first in the table, every rank waited).
TEST_CASE("table: a group the ranks disagree about fails whole, also where only some ranks have a member",
          "[message_table]") {
  for (int larger : {0, 1}) {
    INFO("rank " << larger << " has 3 members, the other 2");
    MessageTable table(2);
    std::vector<Response> ready;
    for (int rank : {larger, 1 - larger}) {  // the larger group reaches the table first
      const int members = rank == larger ? 3 : 2;
      for (int i = 0; i < members; ++i) {
        Request r = Req("g." + std::to_string(i), OpType::kAllreduce, {4});
        r.group = "g";
        r.group_size = members;
        table.Add(rank, r);
      }
    }
    table.Add(0, Req("other", OpType::kAllreduce, {2}));
    table.TakeReady(&ready);
    REQUIRE(ready.size() == 3);
    for (int i = 0; i < 3; ++i) {
      INFO("member " << i);
      CHECK(ready[i].name == "g." + std::to_string(i));
      CHECK(ready[i].group == "g");
      CheckError(ready[i], StatusCode::kMismatch,
                 {"'g." + std::to_string(i) + "'", "disagree on the group", "group 'g' of 2", "group 'g' of 3"});
    }
    ready.clear();
    table.Add(1, Req("other", OpType::kAllreduce, {2}));  // the table holds nothing else of the group
    table.TakeReady(&ready);
    REQUIRE(ready.size() == 1);
    CHECK(ready[0].name == "other");
    CheckOk(ready[0]);
  }
}

TEST_CASE("table: joined ranks are not waited for", "[message_table]") {
  MessageTable table(3);
  std::vector<Response> ready;
  Request join;
  join.name = kJoinName;
  join.type = OpType::kJoin;
  CHECK(table.Add(2, join));  // first join of the phase
  CHECK(table.any_joined());
  table.Add(0, Req("x", OpType::kAllreduce, {4}));
  table.TakeReady(&ready);
  CHECK(ready.empty());  // rank 1 has not announced x
  table.Add(1, Req("x", OpType::kAllreduce, {4}));
  table.Add(0, Req("y", OpType::kAllgather, {4}));
  table.Add(1, Req("y", OpType::kAllgather, {4}));
  Request max = Req("m", OpType::kAllreduce, {4});
  max.op = ReduceOp::kMax;
  table.Add(0, max);
  table.Add(1, max);
  table.TakeReady(&ready);
  REQUIRE(ready.size() == 3);
  CHECK(ready[0].name == "x");
  CheckOk(ready[0]);
  CHECK(ready[0].shape == Shape{4});
  CHECK(ready[1].name == "y");
  CheckError(ready[1], StatusCode::kMismatch, {"'y'", "allgather", "rank 2 has joined"});
  CHECK(ready[2].name == "m");
  CheckError(ready[2], StatusCode::kMismatch, {"'m'", "Max", "rank 2 has joined"});
  ready.clear();

  CHECK_FALSE(table.Add(0, join));
  table.TakeReady(&ready);
  CHECK(ready.empty());  // rank 1 still runs
  CHECK_FALSE(table.Add(1, join));
  table.TakeReady(&ready);
  REQUIRE(ready.size() == 1);
  CHECK(ready[0].type == OpType::kJoin);
  CHECK(ready[0].name == kJoinName);
  CHECK(ready[0].last_joined_rank == 1);
  CHECK(ready[0].ok());
  CHECK_FALSE(table.any_joined());
  ready.clear();
  table.TakeReady(&ready);
  CHECK(ready.empty());  // one kJoin response only

  // A new join phase starts afresh; among ranks added together the highest is last.
  CHECK(table.Add(1, join));
  CHECK_FALSE(table.Add(0, join));
  CHECK_FALSE(table.Add(2, join));
  table.TakeReady(&ready);
  REQUIRE(ready.size() == 1);
  CHECK(ready[0].last_joined_rank == 2);
}

}  // namespace
}  // namespace accord
