// Tests for ProcessSetRegistry: ids in order of addition, lookups that say
// why a set cannot be used, removal of any set but the global one, and the
// order the rounds of the other sets run in.
#include "runtime/process_set_registry.h"

#include <catch2/catch.hpp>

#include <memory>
#include <string>
#include <vector>

namespace accord {
namespace {

// A set this rank is (`set_rank` >= 0) or is not (-1) a member of.
std::shared_ptr<ProcessSet> Set(ProcessSetId id, std::vector<int> ranks, int set_rank, WorkSignal* signal) {
  auto set = std::make_shared<ProcessSet>();
  set->id = id;
  set->ranks = std::move(ranks);
  set->set_rank = set_rank;
  if (set->member()) set->queue = std::make_unique<TensorQueue>(signal);
  return set;
}

TEST_CASE("ProcessSetRegistry: ids, lookups and removal", "[process_set_registry]") {
  WorkSignal signal;
  ProcessSetRegistry sets;  // as rank 1 of 3 sees it
  sets.Add(Set(sets.NextId(), {0, 1, 2}, 1, &signal));
  CHECK(sets.OnlyGlobal());
  sets.Add(Set(sets.NextId(), {0, 2}, -1, &signal));
  sets.Add(Set(sets.NextId(), {1, 2}, 0, &signal));
  CHECK(sets.NextId() == 3);
  CHECK_FALSE(sets.OnlyGlobal());
  REQUIRE(sets.global());
  CHECK(sets.global()->id == kGlobalProcessSet);
  CHECK(sets.Ids() == std::vector<ProcessSetId>{0, 1, 2});

  CHECK(sets.Find(1).ok());
  const Status missing = sets.Find(7).status();
  CHECK(missing.code() == StatusCode::kInvalidArgument);
  CHECK(missing.message() == "process set 7 does not exist");
  const Status outside = sets.FindMember(1, 1).status();
  CHECK(outside.code() == StatusCode::kPreconditionFailed);
  CHECK(outside.message() == "rank 1 is not a member of process set 1 (ranks 0, 2)");
  CHECK(sets.FindMember(2, 1).ok());

  std::vector<ProcessSetId> after_global;
  for (const auto& set : sets.MemberSetsAfterGlobal()) after_global.push_back(set->id);
  CHECK(after_global == std::vector<ProcessSetId>{2});

  CHECK(sets.Remove(kGlobalProcessSet).status().message() == "process set 0 does not exist or cannot be removed");
  CHECK(sets.Remove(9).status().code() == StatusCode::kInvalidArgument);
  auto removed = sets.Remove(2);
  REQUIRE(removed.ok());
  CHECK((*removed)->id == 2);
  CHECK(sets.Ids() == std::vector<ProcessSetId>{0, 1});
  CHECK(sets.MemberSetsAfterGlobal().empty());

  sets.Clear();
  CHECK(sets.Ids().empty());
  CHECK_FALSE(sets.global());
}

}  // namespace
}  // namespace accord
