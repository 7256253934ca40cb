#include "negotiation/response_cache.h"

#include <algorithm>
#include <functional>

namespace accord {

std::optional<uint32_t> ResponseCache::Lookup(const std::string& name, const Request& request) const {
  auto it = by_name_.find(name);
  if (it == by_name_.end()) return std::nullopt;
  const std::optional<Request>& mine = it->second->request;
  if (!mine || !mine->SameSignature(request)) return std::nullopt;
  return it->second->slot;
}

std::optional<uint32_t> ResponseCache::Put(const Response& response, std::optional<Request> request) {
  if (!enabled()) return std::nullopt;
  Erase(response.name);
  if (static_cast<int>(by_name_.size()) >= capacity_) Erase(lru_.back().response.name);
  uint32_t slot;
  if (!free_slots_.empty()) {
    slot = free_slots_.back();
    free_slots_.pop_back();
  } else {
    slot = static_cast<uint32_t>(slots_.size());
    slots_.push_back(lru_.end());
  }
  lru_.push_front(Entry{response, std::move(request), slot});
  by_name_[response.name] = lru_.begin();
  slots_[slot] = lru_.begin();
  return slot;
}

void ResponseCache::Touch(uint32_t slot) { lru_.splice(lru_.begin(), lru_, slots_[slot]); }

void ResponseCache::Erase(const std::string& name) {
  auto it = by_name_.find(name);
  if (it == by_name_.end()) return;
  const uint32_t slot = it->second->slot;
  lru_.erase(it->second);
  by_name_.erase(it);
  slots_[slot] = lru_.end();
  // Trim free slots at the tail so the bit vector stays short.
  if (slot + 1 == slots_.size()) {
    slots_.pop_back();
    while (!slots_.empty() && slots_.back() == lru_.end()) slots_.pop_back();
    free_slots_.erase(
        std::remove_if(free_slots_.begin(), free_slots_.end(), [&](uint32_t s) { return s >= slots_.size(); }),
        free_slots_.end());
  } else {
    free_slots_.push_back(slot);
    std::sort(free_slots_.begin(), free_slots_.end(), std::greater<uint32_t>());
  }
}

void ResponseCache::Clear() {
  lru_.clear();
  by_name_.clear();
  slots_.clear();
  free_slots_.clear();
}

}  // namespace accord
