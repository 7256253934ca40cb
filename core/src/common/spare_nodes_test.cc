// Tests for SpareNodes: kept nodes come back with their key and value, empty
// handles are not kept, and no more than kMax are kept.
#include "common/spare_nodes.h"

#include <catch2/catch.hpp>

#include <string>
#include <unordered_map>

namespace accord {
namespace {

using Map = std::unordered_map<std::string, int>;

TEST_CASE("SpareNodes keeps nodes for reuse, up to its bound", "[spare_nodes]") {
  Map map;
  SpareNodes<Map> spare;
  CHECK(spare.empty());
  spare.Keep(map.extract("absent"));  // an empty handle is not kept
  CHECK(spare.empty());

  map["a"] = 1;
  Map::node_type node = map.extract("a");
  spare.Keep(std::move(node));
  CHECK_FALSE(node);
  REQUIRE_FALSE(spare.empty());
  Map::node_type again = spare.Take();
  CHECK(spare.empty());
  CHECK(again.key() == "a");
  CHECK(again.mapped() == 1);
  again.key() = "b";
  CHECK(map.insert(std::move(again)).inserted);
  CHECK(map.at("b") == 1);

  // Past the bound, a node is freed instead of kept; KeepAll moves what fits.
  SpareNodes<Map> other;
  for (size_t i = 0; i < SpareNodes<Map>::kMax + 3; ++i) {
    map[std::to_string(i)] = static_cast<int>(i);
    spare.Keep(map.extract(std::to_string(i)));
    other.Keep(map.extract("b"));  // a node once, then empty handles
  }
  size_t kept = 0;
  while (!spare.empty()) {
    (void)spare.Take();
    ++kept;
  }
  CHECK(kept == SpareNodes<Map>::kMax);
  spare.KeepAll(&other);
  CHECK(other.empty());
  CHECK(spare.Take().key() == "b");
  CHECK(spare.empty());
}

}  // namespace
}  // namespace accord
