// Tests for device/layout_cache.h: which segment lists a stream's device
// tables hold. A repeated layout hits; a changed address, count or length
// misses; past kEntries the least recently used entry is the one reused; a
// forgotten entry holds nothing; lists too long or empty are never kept.
#include "device/layout_cache.h"

#include <catch2/catch.hpp>

#include <vector>

namespace accord {
namespace {

// `n` segments of 16 elements from base + 1 KiB * i, packed one after the other.
std::vector<CopySegment> Layout(char* base, size_t n) {
  CopyPlan plan;
  plan.dtype = DataType::kFloat32;
  static char out[1 << 20];
  for (size_t i = 0; i < n; ++i) plan.Add(base + 1024 * i, out + 64 * i, 16);
  return plan.segments;
}

TEST_CASE("layout cache: a repeated layout hits its entry, a changed one misses", "[device]") {
  static char memory[1 << 16];
  LayoutCache cache;
  const std::vector<CopySegment> a = Layout(memory, 8);
  const auto first = cache.Find(a);
  REQUIRE(first.has_value());
  CHECK_FALSE(first->hit);
  for (int i = 0; i < 3; ++i) {
    const auto again = cache.Find(a);
    REQUIRE(again.has_value());
    CHECK(again->hit);
    CHECK(again->entry == first->entry);
  }
  // Another address, another count, another length: each a new entry.
  std::vector<CopySegment> moved = a;
  moved[3].src = memory + 7;
  std::vector<CopySegment> counted = a;
  counted[5].count = 15;
  std::vector<CopySegment> shorter = Layout(memory, 7);
  for (const std::vector<CopySegment>* other : {&moved, &counted, &shorter}) {
    const auto slot = cache.Find(*other);
    REQUIRE(slot.has_value());
    CHECK_FALSE(slot->hit);
    CHECK(slot->entry != first->entry);
  }
  // The first is still held, whatever came between.
  const auto back = cache.Find(a);
  REQUIRE(back.has_value());
  CHECK(back->hit);
  CHECK(back->entry == first->entry);
  CHECK(cache.size() == 4);
}

TEST_CASE("layout cache: past kEntries layouts the least recently used entry is reused", "[device]") {
  static char memory[LayoutCache::kEntries + 1][1 << 14];
  LayoutCache cache;
  std::vector<std::vector<CopySegment>> layouts;
  for (size_t i = 0; i <= LayoutCache::kEntries; ++i) layouts.push_back(Layout(memory[i], 4));
  for (size_t i = 0; i < LayoutCache::kEntries; ++i) CHECK_FALSE(cache.Find(layouts[i])->hit);
  // Rotating through exactly kEntries layouts: every one hits.
  for (size_t i = 0; i < LayoutCache::kEntries; ++i) CHECK(cache.Find(layouts[i])->hit);
  // Layouts 0-2 used again: layout 3 is now the least recently used, and
  // a new layout takes its entry.
  for (size_t i = 0; i < 3; ++i) CHECK(cache.Find(layouts[i])->hit);
  const size_t entry3 = cache.Find(layouts[3])->entry;
  for (size_t i = 4; i < LayoutCache::kEntries; ++i) CHECK(cache.Find(layouts[i])->hit);
  for (size_t i = 0; i < 3; ++i) CHECK(cache.Find(layouts[i])->hit);
  const auto fresh = cache.Find(layouts[LayoutCache::kEntries]);
  CHECK_FALSE(fresh->hit);
  CHECK(fresh->entry == entry3);
  CHECK(cache.size() == LayoutCache::kEntries);
  CHECK(cache.Find(layouts[0])->hit);
  CHECK_FALSE(cache.Find(layouts[3])->hit);
}

TEST_CASE("layout cache: a forgotten entry holds nothing; too long or empty lists are not kept", "[device]") {
  static char memory[1 << 16];
  LayoutCache cache;
  const std::vector<CopySegment> a = Layout(memory, 5);
  const size_t entry = cache.Find(a)->entry;
  cache.Forget(entry);
  const auto after = cache.Find(a);
  REQUIRE(after.has_value());
  CHECK_FALSE(after->hit);
  CHECK(cache.Find(a)->hit);

  std::vector<CopySegment> longest(LayoutCache::kMaxSegments, a[0]);
  CHECK(cache.Find(longest).has_value());
  longest.push_back(a[0]);
  CHECK_FALSE(cache.Find(longest).has_value());
  CHECK_FALSE(cache.Find({}).has_value());
}

}  // namespace
}  // namespace accord
