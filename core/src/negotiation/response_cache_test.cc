// Tests for ResponseCache: lookup by name and request, LRU eviction, slot
// reuse and trimming, the disabled cache, and that two caches fed the same
// operations (as two ranks are) hand out identical slots.
#include "negotiation/response_cache.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <list>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace accord {
namespace {

// A request that stands for one signature: requests made from the same
// string are the same, from different strings different.
Request Sig(const std::string& signature) {
  Request r;
  r.group = signature;
  return r;
}

Response NamedResponse(const std::string& name) {
  Response r;
  r.name = name;
  r.shape = {static_cast<int64_t>(name.size()), 2};
  return r;
}

uint32_t MustPut(ResponseCache* cache, const std::string& name, const std::string& signature = "sig") {
  std::optional<uint32_t> slot = cache->Put(NamedResponse(name), Sig(signature));
  INFO("Put('" << name << "') returned no slot");
  REQUIRE(slot.has_value());
  return *slot;
}

// The slot of `name` (with signature "sig"), or -1 if not cached.
int64_t SlotOf(const ResponseCache& cache, const std::string& name) {
  std::optional<uint32_t> slot = cache.Lookup(name, Sig("sig"));
  return slot ? static_cast<int64_t>(*slot) : -1;
}

TEST_CASE("cache: switched off it is empty and takes nothing; on again it starts empty", "[response_cache]") {
  ResponseCache cache(4);
  MustPut(&cache, "a");
  MustPut(&cache, "b");
  cache.SetEnabled(false);
  CHECK_FALSE(cache.enabled());
  CHECK(cache.capacity() == 4);
  CHECK(cache.size() == 0);
  CHECK(cache.num_slots() == 0);
  CHECK(SlotOf(cache, "a") == -1);
  CHECK_FALSE(cache.Put(NamedResponse("c"), Sig("sig")).has_value());
  CHECK(cache.size() == 0);
  cache.SetEnabled(true);
  CHECK(cache.enabled());
  CHECK(SlotOf(cache, "a") == -1);
  CHECK(MustPut(&cache, "c") == 0);
  CHECK(SlotOf(cache, "c") == 0);
  // A cache of capacity 0 stays disabled when switched on.
  ResponseCache none(0);
  none.SetEnabled(true);
  CHECK_FALSE(none.enabled());
}

TEST_CASE("cache: put then lookup by name and exact signature", "[response_cache]") {
  ResponseCache cache(4);
  CHECK(cache.enabled());
  CHECK(cache.capacity() == 4);
  CHECK(MustPut(&cache, "a", "sigA") == 0);
  CHECK(MustPut(&cache, "b", "sigB") == 1);
  CHECK(cache.size() == 2);
  CHECK(cache.num_slots() == 2);
  REQUIRE(cache.Lookup("a", Sig("sigA")).has_value());
  CHECK(*cache.Lookup("a", Sig("sigA")) == 0);
  CHECK(*cache.Lookup("b", Sig("sigB")) == 1);
  CHECK(cache.Get(0).name == "a");
  CHECK(cache.Get(1).name == "b");
  CHECK(cache.Get(1).shape == Shape{1, 2});
  CHECK_FALSE(cache.Lookup("a", Sig("sigB")).has_value());  // signature mismatch misses
  CHECK_FALSE(cache.Lookup("a", Sig("")).has_value());
  CHECK_FALSE(cache.Lookup("c", Sig("sigA")).has_value());
  // A rank that had no such tensor caches the response without a request:
  // nothing it submits later under that name hits.
  REQUIRE(cache.Put(NamedResponse("n"), std::nullopt).has_value());
  CHECK_FALSE(cache.Lookup("n", Sig("")).has_value());
  CHECK_FALSE(cache.Lookup("n", Request{}).has_value());
  CHECK(cache.Contains("a"));
  CHECK_FALSE(cache.Contains("c"));
}

TEST_CASE("cache: putting a cached name again replaces its entry", "[response_cache]") {
  ResponseCache cache(4);
  MustPut(&cache, "a", "old");
  MustPut(&cache, "b");
  Response changed = NamedResponse("a");
  changed.shape = {9};
  REQUIRE(cache.Put(changed, Sig("new")).has_value());
  CHECK(cache.size() == 2);
  CHECK_FALSE(cache.Lookup("a", Sig("old")).has_value());
  std::optional<uint32_t> slot = cache.Lookup("a", Sig("new"));
  REQUIRE(slot.has_value());
  CHECK(cache.Get(*slot).shape == Shape{9});
  CHECK(SlotOf(cache, "b") == 1);
}

TEST_CASE("cache: a full cache evicts the least recently used entry", "[response_cache]") {
  ResponseCache cache(3);
  MustPut(&cache, "a");
  MustPut(&cache, "b");
  MustPut(&cache, "c");
  SECTION("without touches, the oldest put goes") {
    CHECK(MustPut(&cache, "d") == 0);  // a's slot, freed
    CHECK(SlotOf(cache, "a") == -1);
    CHECK(SlotOf(cache, "b") == 1);
    CHECK(SlotOf(cache, "c") == 2);
    CHECK(SlotOf(cache, "d") == 0);
    CHECK(MustPut(&cache, "e") == 1);  // then b
    CHECK(SlotOf(cache, "b") == -1);
  }
  SECTION("a touch makes an entry the most recently used") {
    cache.Touch(0);                    // a
    CHECK(MustPut(&cache, "d") == 1);  // b goes instead
    CHECK(SlotOf(cache, "a") == 0);
    CHECK(SlotOf(cache, "b") == -1);
    cache.Touch(2);                    // c; order now c, d, a (most recent first)
    CHECK(MustPut(&cache, "e") == 0);  // a goes
    CHECK(SlotOf(cache, "a") == -1);
    CHECK(SlotOf(cache, "c") == 2);
    CHECK(SlotOf(cache, "d") == 1);
  }
  SECTION("replacing an entry counts as a use") {
    MustPut(&cache, "a", "sig");  // a is now the most recent
    MustPut(&cache, "d");
    CHECK(SlotOf(cache, "a") >= 0);
    CHECK(SlotOf(cache, "b") == -1);
  }
  CHECK(cache.size() == 3);
}

TEST_CASE("cache: the lowest freed slot is reused first", "[response_cache]") {
  ResponseCache cache(8);
  for (const char* name : {"a", "b", "c", "d", "e"}) MustPut(&cache, name);
  cache.Erase("d");  // slot 3
  cache.Erase("b");  // slot 1
  CHECK(cache.num_slots() == 5);
  CHECK(cache.size() == 3);
  CHECK(MustPut(&cache, "f") == 1);
  CHECK(MustPut(&cache, "g") == 3);
  CHECK(MustPut(&cache, "h") == 5);
  cache.Erase("no-such-name");  // a no-op
  CHECK(cache.size() == 6);
  CHECK(cache.num_slots() == 6);
}

TEST_CASE("cache: erasing the tail shrinks num_slots past free slots", "[response_cache]") {
  ResponseCache cache(8);
  for (const char* name : {"a", "b", "c", "d"}) MustPut(&cache, name);
  cache.Erase("b");
  CHECK(cache.num_slots() == 4);
  cache.Erase("c");
  CHECK(cache.num_slots() == 4);
  cache.Erase("d");  // slots 1..3 are all free now
  CHECK(cache.num_slots() == 1);
  CHECK(MustPut(&cache, "x") == 1);  // no stale free slot beyond the tail
  CHECK(MustPut(&cache, "y") == 2);
  CHECK(cache.num_slots() == 3);
  cache.Erase("a");
  CHECK(cache.num_slots() == 3);
  CHECK(MustPut(&cache, "z") == 0);
  cache.Erase("y");
  cache.Erase("x");
  cache.Erase("z");
  CHECK(cache.num_slots() == 0);
  CHECK(cache.size() == 0);
  CHECK(MustPut(&cache, "w") == 0);
}

TEST_CASE("cache: capacity 0 disables it", "[response_cache]") {
  ResponseCache cache(0);
  CHECK_FALSE(cache.enabled());
  CHECK_FALSE(cache.Put(NamedResponse("a"), Sig("sig")).has_value());
  CHECK(cache.size() == 0);
  CHECK(cache.num_slots() == 0);
  CHECK_FALSE(cache.Contains("a"));
  CHECK_FALSE(cache.Lookup("a", Sig("sig")).has_value());
}

TEST_CASE("cache: capacity 1 holds only the latest entry", "[response_cache]") {
  ResponseCache cache(1);
  CHECK(MustPut(&cache, "a") == 0);
  CHECK(MustPut(&cache, "b") == 0);
  CHECK(SlotOf(cache, "a") == -1);
  CHECK(SlotOf(cache, "b") == 0);
  CHECK(cache.num_slots() == 1);
}

TEST_CASE("cache: Clear empties everything and restarts slots at 0", "[response_cache]") {
  ResponseCache cache(4);
  for (const char* name : {"a", "b", "c"}) MustPut(&cache, name);
  cache.Erase("a");
  cache.Clear();
  CHECK(cache.size() == 0);
  CHECK(cache.num_slots() == 0);
  CHECK_FALSE(cache.Contains("b"));
  CHECK(SlotOf(cache, "c") == -1);
  CHECK(MustPut(&cache, "d") == 0);
  CHECK(MustPut(&cache, "e") == 1);
}

// A straightforward model of the documented behaviour: LRU order as a list of
// names, slots as a vector of names ("" = free), lowest free slot first, and
// free slots at the tail trimmed.
class ModelCache {
 public:
  explicit ModelCache(size_t capacity) : capacity_(capacity) {}
  void Put(const std::string& name) {
    Erase(name);
    if (lru_.size() >= capacity_) Erase(lru_.back());
    auto free = std::find(slots_.begin(), slots_.end(), "");
    if (free == slots_.end()) free = slots_.insert(slots_.end(), "");
    *free = name;
    lru_.push_front(name);
  }
  void Touch(const std::string& name) {
    lru_.remove(name);
    lru_.push_front(name);
  }
  void Erase(std::string name) {  // by value: it may be lru_.back()
    auto it = std::find(lru_.begin(), lru_.end(), name);
    if (it == lru_.end()) return;
    lru_.erase(it);
    *std::find(slots_.begin(), slots_.end(), name) = "";
    while (!slots_.empty() && slots_.back().empty()) slots_.pop_back();
  }
  void Clear() {
    lru_.clear();
    slots_.clear();
  }
  const std::vector<std::string>& slots() const { return slots_; }
  const std::list<std::string>& lru() const { return lru_; }

 private:
  size_t capacity_;
  std::list<std::string> lru_;
  std::vector<std::string> slots_;
};

// Checks `cache` (whose signatures are name + `suffix`) against the model.
void CheckAgainstModel(const ResponseCache& cache, const ModelCache& model, const std::string& suffix,
                       const std::string& who, int step) {
  INFO(who << " after step " << step);
  REQUIRE(cache.num_slots() == model.slots().size());
  CHECK(cache.size() == model.lru().size());
  for (size_t slot = 0; slot < model.slots().size(); ++slot) {
    const std::string& name = model.slots()[slot];
    if (name.empty()) continue;
    std::optional<uint32_t> got = cache.Lookup(name, Sig(name + suffix));
    INFO("slot " << slot << ": expected '" << name << "', got "
                 << (got ? "slot " + std::to_string(*got) : std::string("a miss")));
    CHECK((got && *got == slot));
  }
}

TEST_CASE("cache: two caches fed the same operations agree on every slot", "[response_cache]") {
  // Two "ranks": same names and operations, different signatures (as an
  // allgather's dim 0 differs by rank); both are checked against the model.
  const int capacity = GENERATE(1, 3, 6);
  ResponseCache rank0(capacity);
  ResponseCache rank1(capacity);
  ModelCache model(capacity);
  std::mt19937 rng(1234 + capacity);
  for (int step = 0; step < 3000; ++step) {
    const std::string name = "t" + std::to_string(rng() % 10);
    const unsigned what = rng() % 100;
    if (what < 50) {
      rank0.Put(NamedResponse(name), Sig(name + "@0"));
      rank1.Put(NamedResponse(name), Sig(name + "@1"));
      model.Put(name);
    } else if (what < 75) {
      if (model.lru().empty()) continue;
      auto it = model.lru().begin();
      std::advance(it, rng() % model.lru().size());
      const std::string victim = *it;
      const uint32_t slot =
          static_cast<uint32_t>(std::find(model.slots().begin(), model.slots().end(), victim) - model.slots().begin());
      rank0.Touch(slot);
      rank1.Touch(slot);
      model.Touch(victim);
    } else if (what < 98) {
      rank0.Erase(name);
      rank1.Erase(name);
      model.Erase(name);
    } else {
      rank0.Clear();
      rank1.Clear();
      model.Clear();
    }
    CheckAgainstModel(rank0, model, "@0", "rank 0", step);
    CheckAgainstModel(rank1, model, "@1", "rank 1", step);
  }
}

}  // namespace
}  // namespace accord
