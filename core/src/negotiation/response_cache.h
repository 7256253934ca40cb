// ResponseCache: responses that every rank has seen, so that a request seen
// before is announced as one bit instead of a full message.
//
// Each rank holds its own instance, and every rank applies the same sequence
// of Put/Touch/Erase/Clear (all driven by agreed negotiation results), so the
// slot ids are identical everywhere: bit i of the round's bit vector means
// "the tensor cached in slot i is ready here". Each entry also keeps this
// rank's own request for the name; ranks may differ there (e.g. allgather's
// dim 0), and a later request hits only if it is the same (SameSignature).
// Eviction is least-recently-used. Only the coordinator thread uses it.
#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "negotiation/message.h"

namespace accord {

class ResponseCache {
 public:
  explicit ResponseCache(int capacity) : capacity_(capacity) {}

  int capacity() const { return capacity_; }
  // Caching happens: a capacity above 0, and not switched off.
  bool enabled() const { return capacity_ > 0 && switched_on_; }
  // Off empties the cache and makes Put a no-op until it is switched on
  // again (ACCORD_AUTOTUNE tries both; see Controller::SetCacheEnabled).
  void SetEnabled(bool on) {
    switched_on_ = on;
    if (!on) Clear();
  }
  size_t size() const { return by_name_.size(); }
  // One more than the highest slot id in use: the bit vector's length.
  uint32_t num_slots() const { return static_cast<uint32_t>(slots_.size()); }

  // Slot of `name` if cached with a request the same as `request` but for
  // its name.
  std::optional<uint32_t> Lookup(const std::string& name, const Request& request) const;
  bool Contains(const std::string& name) const { return by_name_.count(name) != 0; }
  // The cached response in `slot` (which must be in use).
  const Response& Get(uint32_t slot) const { return slots_[slot]->response; }

  // Caches `response` with this rank's request for it (none: a rank that
  // had no such tensor; it never hits), replacing an entry of the same name,
  // and evicting the least recently used entry when full. Returns the slot
  // used. No-op (returns nullopt) when disabled.
  std::optional<uint32_t> Put(const Response& response, std::optional<Request> request);
  // Marks `slot` as used now (for LRU).
  void Touch(uint32_t slot);
  void Erase(const std::string& name);
  void Clear();

 private:
  struct Entry {
    Response response;
    std::optional<Request> request;
    uint32_t slot;
  };
  int capacity_;
  bool switched_on_ = true;
  std::list<Entry> lru_;  // front: most recently used
  std::unordered_map<std::string, std::list<Entry>::iterator> by_name_;
  std::vector<std::list<Entry>::iterator> slots_;  // slot -> entry (end() when free)
  std::vector<uint32_t> free_slots_;               // kept sorted descending: lowest id reused first
};

}  // namespace accord
