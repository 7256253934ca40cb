#include "runtime/process_set_registry.h"

#include <string>
#include <utility>

namespace accord {

void ProcessSetRegistry::Add(std::shared_ptr<ProcessSet> set) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (set->id == kGlobalProcessSet) global_ = set;
  sets_[set->id] = std::move(set);
}

Result<std::shared_ptr<ProcessSet>> ProcessSetRegistry::Remove(ProcessSetId id) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = sets_.find(id);
  if (it == sets_.end() || id == kGlobalProcessSet) {
    return Status::InvalidArgument("process set " + std::to_string(id) + " does not exist or cannot be removed");
  }
  std::shared_ptr<ProcessSet> removed = std::move(it->second);
  sets_.erase(it);
  return removed;
}

void ProcessSetRegistry::Clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  sets_.clear();
  global_.reset();
}

Result<std::shared_ptr<ProcessSet>> ProcessSetRegistry::Find(ProcessSetId id) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = sets_.find(id);
  if (it == sets_.end()) return Status::InvalidArgument("process set " + std::to_string(id) + " does not exist");
  return it->second;
}

Result<std::shared_ptr<ProcessSet>> ProcessSetRegistry::FindMember(ProcessSetId id, int rank) const {
  ACCORD_ASSIGN_OR_RETURN(auto set, Find(id));
  if (!set->member()) {
    std::string ranks;
    for (int r : set->ranks) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
    return Status::PreconditionFailed("rank " + std::to_string(rank) + " is not a member of process set " +
                                      std::to_string(id) + " (ranks " + ranks + ")");
  }
  return set;
}

std::vector<ProcessSetId> ProcessSetRegistry::Ids() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<ProcessSetId> ids;
  for (const auto& [id, set] : sets_) ids.push_back(id);
  return ids;
}

bool ProcessSetRegistry::OnlyGlobal() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return sets_.size() == 1;
}

std::vector<std::shared_ptr<ProcessSet>> ProcessSetRegistry::MemberSetsAfterGlobal() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::shared_ptr<ProcessSet>> sets;
  for (const auto& [id, set] : sets_) {
    if (id != kGlobalProcessSet && set->member()) sets.push_back(set);
  }
  return sets;
}

uint64_t ProcessSetRegistry::NewBytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  uint64_t bytes = 0;
  for (const auto& [id, set] : sets_) {
    if (set->member()) bytes += set->queue->NewBytes();
  }
  return bytes;
}

void ProcessSetRegistry::ForEachMember(const std::function<void(ProcessSet&)>& fn) const {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& [id, set] : sets_) {
    if (set->member()) fn(*set);
  }
}

}  // namespace accord
