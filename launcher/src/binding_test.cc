// Tests for CoreForLocalRank: which core each rank of a host binds to, and
// when the ranks of a host are left unbound.
#include "binding.h"

#include <catch2/catch.hpp>

#include <algorithm>

#include "system_info.h"

namespace accord::launcher {
namespace {

using Cores = std::vector<std::vector<int>>;

TEST_CASE("Each local rank gets the core of its number, with all the core's hardware threads") {
  Cores cores = {{0, 4}, {1, 5}, {2, 6}, {3, 7}};
  CHECK(CoreForLocalRank(cores, 0, 2) == std::vector<int>{0, 4});
  CHECK(CoreForLocalRank(cores, 1, 2) == std::vector<int>{1, 5});
  CHECK(CoreForLocalRank(cores, 3, 4) == std::vector<int>{3, 7});
  // Another host of the same job decides for itself: one rank, one core.
  CHECK(CoreForLocalRank({{0}, {1}}, 0, 1) == std::vector<int>{0});
}

TEST_CASE("A host with more ranks than cores leaves its ranks unbound") {
  Cores two = {{0}, {1}};
  for (int local_rank = 0; local_rank < 3; ++local_rank) {
    INFO("local rank " << local_rank);
    CHECK(CoreForLocalRank(two, local_rank, 3).empty());
  }
  CHECK(CoreForLocalRank({}, 0, 1).empty());
}

TEST_CASE("Local ranks out of range bind nowhere") {
  Cores cores = {{0}, {1}, {2}};
  CHECK(CoreForLocalRank(cores, 2, 2).empty());
  CHECK(CoreForLocalRank(cores, -1, 2).empty());
  CHECK(CoreForLocalRank(cores, 0, 0).empty());
}

TEST_CASE("This machine's usable cores: every CPU once, as many as CountUsableCores") {
  Cores cores = UsableCores();
  REQUIRE_FALSE(cores.empty());
  CHECK(static_cast<int>(cores.size()) == CountUsableCores());
  std::vector<int> seen;
  for (const std::vector<int>& core : cores) {
    CHECK_FALSE(core.empty());
    seen.insert(seen.end(), core.begin(), core.end());
  }
  std::sort(seen.begin(), seen.end());
  CHECK(std::adjacent_find(seen.begin(), seen.end()) == seen.end());
}

}  // namespace
}  // namespace accord::launcher
