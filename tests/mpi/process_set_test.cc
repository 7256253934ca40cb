// Process sets added at run time (Init is in main, so none exist at init):
// queries, even and odd sets working at the same time with the same tensor
// names, submissions from outside a set, removal (pending operations fail
// with kAborted) and re-adding.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "test_util.h"

namespace {

using accord::DataType;
using accord::ProcessSetId;
using accord::ReduceOp;
using namespace accord_test;

std::vector<int> RanksWithParity(int parity) {
  std::vector<int> ranks;
  for (int r = parity; r < Size(); r += 2) ranks.push_back(r);
  return ranks;
}

// Adds a set on every rank; -1 (and a failure) if it could not be added.
ProcessSetId AddSet(const std::vector<int>& ranks, const std::string& what) {
  accord::Result<ProcessSetId> id = accord::AddProcessSet(ranks);
  INFO("rank " << Rank() << ": AddProcessSet(" << what << "): " << id.status().ToString());
  CHECK(id.ok());
  return id.ok() ? id.value() : -1;
}

void RemoveSet(ProcessSetId id, const std::string& what) {
  if (id < 0) return;
  const accord::Status status = accord::RemoveProcessSet(id);
  INFO("rank " << Rank() << ": RemoveProcessSet(" << what << "): " << status.ToString());
  CHECK(status.ok());
}

bool Contains(const std::vector<ProcessSetId>& ids, ProcessSetId id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

// An allreduce Sum of float32 in `set` over `members`, checked.
void CheckSetAllreduce(ProcessSetId set, const std::vector<int>& members, const std::string& name) {
  TestTensor t(DataType::kFloat32, {64}, RankValues(name, Rank(), DataType::kFloat32, 64));
  accord::AllreduceOptions options;
  options.name = name;
  options.op = ReduceOp::kSum;
  options.process_set = set;
  if (!WaitOk(Enqueued(accord::Allreduce(t.view(), t.view(), options), name), name)) return;
  ExpectValues(
      name, t.view(), DataType::kFloat32, {64},
      ReferenceAllreduce(name, members, DataType::kFloat32, 64, ValueKind::kSmall, ReduceSpec{ReduceOp::kSum}));
}

TEST_CASE("process sets: add, ids, ranks, rank") {
  const std::vector<int> evens = RanksWithParity(0);
  const std::vector<int> odds = RanksWithParity(1);
  const ProcessSetId even = AddSet(evens, "evens");
  const ProcessSetId odd = Size() >= 2 ? AddSet(odds, "odds") : -1;

  const std::vector<ProcessSetId> ids = accord::ProcessSetIds();
  INFO("rank " << Rank() << ": " << ids.size() << " process set ids");
  CHECK(std::is_sorted(ids.begin(), ids.end()));
  CHECK(Contains(ids, accord::kGlobalProcessSet));
  CHECK(Contains(ids, even));
  if (Size() >= 2) CHECK(Contains(ids, odd));
  CHECK(even != accord::kGlobalProcessSet);
  CHECK(even != odd);

  accord::Result<std::vector<int>> global_ranks = accord::ProcessSetRanks(accord::kGlobalProcessSet);
  CHECK(global_ranks.ok());
  if (global_ranks.ok()) CHECK(global_ranks.value() == AllRanks());
  accord::Result<std::vector<int>> even_ranks = accord::ProcessSetRanks(even);
  CHECK(even_ranks.ok());
  if (even_ranks.ok()) CHECK(even_ranks.value() == evens);

  accord::Result<int> global_rank = accord::ProcessSetRank(accord::kGlobalProcessSet);
  CHECK(global_rank.ok());
  if (global_rank.ok()) CHECK(global_rank.value() == Rank());
  accord::Result<int> even_rank = accord::ProcessSetRank(even);
  CHECK(even_rank.ok());
  if (even_rank.ok()) CHECK(even_rank.value() == (Rank() % 2 == 0 ? Rank() / 2 : -1));
  if (Size() >= 2) {
    accord::Result<int> odd_rank = accord::ProcessSetRank(odd);
    CHECK(odd_rank.ok());
    if (odd_rank.ok()) CHECK(odd_rank.value() == (Rank() % 2 == 1 ? Rank() / 2 : -1));
  }
  CHECK_FALSE(accord::ProcessSetRanks(12345).ok());
  CHECK_FALSE(accord::ProcessSetRank(12345).ok());

  RemoveSet(odd, "odds");
  RemoveSet(even, "evens");
}

TEST_CASE("process sets: invalid rank lists are rejected on every rank") {
  const std::vector<std::vector<int>> invalid = {
      {}, {0, 0}, {Size()}, {-1}, Size() >= 2 ? std::vector<int>{1, 0} : std::vector<int>{0, 0}};
  for (const std::vector<int>& ranks : invalid) {
    accord::Result<ProcessSetId> id = accord::AddProcessSet(ranks);
    INFO("rank " << Rank() << ": AddProcessSet of an invalid list of " << ranks.size()
                 << " ranks: " << id.status().ToString());
    CHECK_FALSE(id.ok());
    if (id.ok()) RemoveSet(id.value(), "invalid");
  }
  CHECK_FALSE(accord::RemoveProcessSet(accord::kGlobalProcessSet).ok());

  // Ranks that disagree about the members: an error on every rank, no set.
  if (Size() >= 2) {
    const std::vector<ProcessSetId> before = accord::ProcessSetIds();
    const std::vector<int> ranks = Rank() == 0 ? std::vector<int>{0} : std::vector<int>{0, 1};
    accord::Result<ProcessSetId> id = accord::AddProcessSet(ranks);
    INFO("rank " << Rank() << ": AddProcessSet with ranks that differ per rank: " << id.status().ToString());
    CHECK_FALSE(id.ok());
    if (id.ok()) RemoveSet(id.value(), "disagreed");
    CHECK(accord::ProcessSetIds() == before);
  }
}

TEST_CASE("process sets: even and odd sets at the same time, same tensor names") {
  const std::vector<int> evens = RanksWithParity(0);
  const std::vector<int> odds = RanksWithParity(1);
  const ProcessSetId even = AddSet(evens, "evens");
  const ProcessSetId odd = Size() >= 2 ? AddSet(odds, "odds") : -1;
  const bool in_even = Rank() % 2 == 0;
  const ProcessSetId mine = in_even ? even : odd;
  const std::vector<int>& members = in_even ? evens : odds;
  const int set_size = static_cast<int>(members.size());
  const int set_rank = Rank() / 2;
  // Data keys differ per set; operation names do not.
  const std::string set_key = in_even ? "even" : "odd";

  TestTensor sum(DataType::kFloat32, {257}, RankValues(set_key + ".sum", Rank(), DataType::kFloat32, 257));
  TestTensor avg(DataType::kInt32, {31}, RankValues(set_key + ".avg", Rank(), DataType::kInt32, 31));
  const accord::Shape gather_shape{set_rank + 1, 2};
  TestTensor gather(DataType::kFloat64, gather_shape,
                    RankValues(set_key + ".gather", Rank(), DataType::kFloat64, 2 * (set_rank + 1)));
  const accord::Shape rs_shape{2 * set_size + 1, 2};
  TestTensor rs(DataType::kFloat32, rs_shape,
                RankValues(set_key + ".rs", Rank(), DataType::kFloat32, 2 * (2 * set_size + 1)));
  TestTensor global(DataType::kInt64, {11}, RankValues("ps.global", Rank(), DataType::kInt64, 11));

  accord::AllreduceOptions ar;
  ar.process_set = mine;
  ar.name = "ps.sum";
  ar.op = ReduceOp::kSum;
  accord::Handle h_sum = Enqueued(accord::Allreduce(sum.view(), sum.view(), ar), "ps.sum");
  ar.name = "ps.avg";
  ar.op = ReduceOp::kAverage;
  accord::Handle h_avg = Enqueued(accord::Allreduce(avg.view(), avg.view(), ar), "ps.avg");
  accord::CollectiveOptions ag;
  ag.process_set = mine;
  ag.name = "ps.gather";
  accord::Handle h_gather = Enqueued(accord::Allgather(gather.view(), nullptr, ag), "ps.gather");
  accord::ReducescatterOptions rso;
  rso.process_set = mine;
  rso.name = "ps.rs";
  rso.op = ReduceOp::kSum;
  accord::Handle h_rs = Enqueued(accord::Reducescatter(rs.view(), nullptr, rso), "ps.rs");
  accord::AllreduceOptions global_options;
  global_options.name = "ps.global";
  global_options.op = ReduceOp::kSum;
  accord::Handle h_global = Enqueued(accord::Allreduce(global.view(), global.view(), global_options), "ps.global");

  if (WaitOk(h_sum, "ps.sum")) {
    ExpectValues("ps.sum in the " + set_key + " set", sum.view(), DataType::kFloat32, {257},
                 ReferenceAllreduce(set_key + ".sum", members, DataType::kFloat32, 257, ValueKind::kSmall,
                                    ReduceSpec{ReduceOp::kSum}));
  }
  if (WaitOk(h_avg, "ps.avg")) {
    ExpectValues("ps.avg in the " + set_key + " set", avg.view(), DataType::kInt32, {31},
                 ReferenceAllreduce(set_key + ".avg", members, DataType::kInt32, 31, ValueKind::kSmall,
                                    ReduceSpec{ReduceOp::kAverage}));
  }
  if (WaitOk(h_gather, "ps.gather")) {
    std::vector<double> expected;
    for (int i = 0; i < set_size; ++i) {
      const std::vector<double> part = RankValues(set_key + ".gather", members[i], DataType::kFloat64, 2 * (i + 1));
      expected.insert(expected.end(), part.begin(), part.end());
    }
    const std::vector<accord::TensorView> out = h_gather.outputs();
    CHECK(out.size() == 1);
    if (!out.empty()) {
      ExpectValues("ps.gather in the " + set_key + " set", out[0], DataType::kFloat64,
                   {set_size * (set_size + 1) / 2, 2}, expected);
    }
  }
  if (WaitOk(h_rs, "ps.rs")) {
    const int64_t first = ReducescatterFirstRow(rs_shape[0], set_size, set_rank);
    const int64_t rows = ReducescatterRows(rs_shape[0], set_size, set_rank);
    std::vector<double> full = ReferenceAllreduce(set_key + ".rs", members, DataType::kFloat32, rs_shape[0] * 2,
                                                  ValueKind::kSmall, ReduceSpec{ReduceOp::kSum});
    const std::vector<accord::TensorView> out = h_rs.outputs();
    CHECK(out.size() == 1);
    if (!out.empty()) {
      ExpectValues("ps.rs in the " + set_key + " set", out[0], DataType::kFloat32, {rows, 2},
                   std::vector<double>(full.begin() + 2 * first, full.begin() + 2 * (first + rows)));
    }
  }
  if (WaitOk(h_global, "ps.global")) {
    ExpectValues("ps.global", global.view(), DataType::kInt64, {11},
                 ReferenceAllreduce("ps.global", AllRanks(), DataType::kInt64, 11, ValueKind::kSmall,
                                    ReduceSpec{ReduceOp::kSum}));
  }
  // Broadcast from the set's last member: root_rank counts within the set
  // (as in Horovod), so it is set rank set_size - 1.
  {
    const std::string key = set_key + ".bcast";
    TestTensor b(DataType::kInt16, {9}, RankValues(key, Rank(), DataType::kInt16, 9));
    accord::CollectiveOptions bo;
    bo.name = "ps.bcast";
    bo.process_set = mine;
    if (WaitOk(Enqueued(accord::Broadcast(b.view(), set_size - 1, bo), key), key)) {
      ExpectValues(key, b.view(), DataType::kInt16, {9}, RankValues(key, members.back(), DataType::kInt16, 9));
    }
  }
  // A barrier of the set.
  WaitOk(Enqueued(accord::Barrier(mine), "ps barrier"), "barrier of the " + set_key + " set");
  RemoveSet(odd, "odds");
  RemoveSet(even, "evens");
}

TEST_CASE("process sets: overlapping sets and the global set, all in flight at once") {
  // A = every rank but the last, B = every rank but the first: ranks in
  // the middle are in both, so their coordinator serves three sets at once.
  if (Size() < 3) return;  // the sets would not overlap (same on every rank)
  std::vector<int> a_ranks = AllRanks();
  a_ranks.pop_back();
  std::vector<int> b_ranks = AllRanks();
  b_ranks.erase(b_ranks.begin());
  const ProcessSetId a = AddSet(a_ranks, "all but the last");
  const ProcessSetId b = AddSet(b_ranks, "all but the first");
  struct Member {
    ProcessSetId set;
    const std::vector<int>* ranks;
    std::string key;
  };
  std::vector<Member> mine;
  if (Rank() != Size() - 1) mine.push_back({a, &a_ranks, "overlap.a"});
  if (Rank() != 0) mine.push_back({b, &b_ranks, "overlap.b"});
  mine.push_back({accord::kGlobalProcessSet, nullptr, "overlap.global"});
  // Middle ranks submit in a rank-dependent order of sets.
  if (Rank() % 2 == 1) std::reverse(mine.begin(), mine.end());
  const int kTensors = 8;
  std::vector<TestTensor> tensors;
  std::vector<accord::Handle> handles;
  for (const Member& m : mine) {
    for (int i = 0; i < kTensors; ++i) {
      const std::string key = m.key + "." + std::to_string(i);
      tensors.emplace_back(DataType::kFloat32, accord::Shape{100 + i},
                           RankValues(key, Rank(), DataType::kFloat32, 100 + i));
      accord::AllreduceOptions options;
      options.name = "overlap." + std::to_string(i);  // the same names in every set
      options.op = ReduceOp::kSum;
      options.process_set = m.set;
      handles.push_back(Enqueued(accord::Allreduce(tensors.back().view(), tensors.back().view(), options), key));
    }
  }
  for (size_t k = 0; k < handles.size(); ++k) {
    const Member& m = mine[k / kTensors];
    const int i = static_cast<int>(k % kTensors);
    const std::string key = m.key + "." + std::to_string(i);
    if (!WaitOk(handles[k], key)) continue;
    ExpectValues(key, tensors[k].view(), DataType::kFloat32, {100 + i},
                 ReferenceAllreduce(key, m.ranks != nullptr ? *m.ranks : AllRanks(), DataType::kFloat32, 100 + i,
                                    ValueKind::kSmall, ReduceSpec{ReduceOp::kSum}));
  }
  RemoveSet(b, "all but the first");
  RemoveSet(a, "all but the last");
}

TEST_CASE("process sets: eight sets at once, each with work in flight") {
  // Set k holds the ranks r with (r + k) % 3 != 0 (all ranks if that
  // leaves none): different, overlapping memberships.
  const int kSets = 8;
  std::vector<std::vector<int>> members(kSets);
  std::vector<ProcessSetId> ids(kSets, -1);
  for (int k = 0; k < kSets; ++k) {
    for (int r = 0; r < Size(); ++r) {
      if ((r + k) % 3 != 0) members[k].push_back(r);
    }
    if (members[k].empty()) members[k] = AllRanks();
    ids[k] = AddSet(members[k], "set " + std::to_string(k));
  }
  std::vector<TestTensor> tensors;
  std::vector<accord::Handle> handles;
  std::vector<int> set_of;
  for (int k = 0; k < kSets; ++k) {
    if (ids[k] < 0 || std::find(members[k].begin(), members[k].end(), Rank()) == members[k].end()) {
      continue;
    }
    const std::string key = "many_sets." + std::to_string(k);
    tensors.emplace_back(DataType::kInt32, accord::Shape{50 + k}, RankValues(key, Rank(), DataType::kInt32, 50 + k));
    accord::AllreduceOptions options;
    options.name = "many_sets";  // one name in every set
    options.op = ReduceOp::kSum;
    options.process_set = ids[k];
    handles.push_back(Enqueued(accord::Allreduce(tensors.back().view(), tensors.back().view(), options), key));
    set_of.push_back(k);
  }
  for (size_t i = 0; i < handles.size(); ++i) {
    const int k = set_of[i];
    const std::string key = "many_sets." + std::to_string(k);
    if (!WaitOk(handles[i], key)) continue;
    ExpectValues(
        key, tensors[i].view(), DataType::kInt32, {50 + k},
        ReferenceAllreduce(key, members[k], DataType::kInt32, 50 + k, ValueKind::kSmall, ReduceSpec{ReduceOp::kSum}));
  }
  for (int k = kSets - 1; k >= 0; --k) RemoveSet(ids[k], "set " + std::to_string(k));
  CHECK(accord::ProcessSetIds() == std::vector<ProcessSetId>{accord::kGlobalProcessSet});
}

TEST_CASE("process sets: submitting from outside the set fails at enqueue") {
  const ProcessSetId even = AddSet(RanksWithParity(0), "evens");
  const ProcessSetId odd = Size() >= 2 ? AddSet(RanksWithParity(1), "odds") : -1;
  if (Size() >= 2) {
    const ProcessSetId other = Rank() % 2 == 0 ? odd : even;
    TestTensor t(DataType::kFloat32, {4});
    accord::AllreduceOptions options;
    options.name = "ps.outside";
    options.process_set = other;
    accord::Result<accord::Handle> ar = accord::Allreduce(t.view(), t.view(), options);
    INFO("rank " << Rank() << ": allreduce into a set without this rank: " << ar.status());
    CHECK(ar.status().code() == accord::StatusCode::kPreconditionFailed);
    accord::Result<accord::Handle> barrier = accord::Barrier(other);
    INFO("barrier of a set without this rank: " << barrier.status());
    CHECK(barrier.status().code() == accord::StatusCode::kPreconditionFailed);
  }
  TestTensor t(DataType::kFloat32, {4});
  accord::AllreduceOptions options;
  options.name = "ps.unknown";
  options.process_set = 12345;
  accord::Result<accord::Handle> unknown = accord::Allreduce(t.view(), t.view(), options);
  INFO("rank " << Rank() << ": allreduce into a set that does not exist: " << unknown.status());
  CHECK_FALSE(unknown.ok());
  // The sets still work after the refused submissions.
  CheckSetAllreduce(Rank() % 2 == 0 ? even : odd, RanksWithParity(Rank() % 2), "ps.after_outside");
  RemoveSet(odd, "odds");
  RemoveSet(even, "evens");
}

TEST_CASE("process sets: remove, then add again") {
  const std::vector<int> evens = RanksWithParity(0);
  const ProcessSetId first = AddSet(evens, "evens");
  if (Rank() % 2 == 0) CheckSetAllreduce(first, evens, "ps.readd");
  RemoveSet(first, "evens");
  CHECK_FALSE(Contains(accord::ProcessSetIds(), first));
  CHECK_FALSE(accord::ProcessSetRanks(first).ok());
  TestTensor t(DataType::kFloat32, {4});
  accord::AllreduceOptions options;
  options.name = "ps.removed";
  options.process_set = first;
  accord::Result<accord::Handle> removed = accord::Allreduce(t.view(), t.view(), options);
  INFO("rank " << Rank() << ": allreduce into a removed set: " << removed.status());
  CHECK_FALSE(removed.ok());

  const ProcessSetId second = AddSet(evens, "evens again");
  CHECK(Contains(accord::ProcessSetIds(), second));
  // The same name as in the first incarnation: nothing cached may leak over.
  if (Rank() % 2 == 0) CheckSetAllreduce(second, evens, "ps.readd");
  RemoveSet(second, "evens again");
}

TEST_CASE("process sets: removing a set fails its pending operations with kAborted") {
  if (Size() < 2) return;  // one rank's op would just complete (same on every rank)
  const ProcessSetId all = AddSet(AllRanks(), "all");
  // Per-rank names: no other rank ever submits them, so they stay pending.
  const std::string name = "ps.orphan." + std::to_string(Rank());
  TestTensor t(DataType::kFloat32, {8});
  accord::AllreduceOptions options;
  options.name = name;
  options.process_set = all;
  accord::Handle pending = Enqueued(accord::Allreduce(t.view(), t.view(), options), name);
  RemoveSet(all, "all");
  const accord::Status status = WaitFor(pending, name);
  INFO("rank " << Rank() << ": " << name << " after its set was removed: " << status);
  CHECK(status.code() == accord::StatusCode::kAborted);
  CheckSetAllreduce(accord::kGlobalProcessSet, AllRanks(), "ps.after_abort");
}

}  // namespace
