// ProcessSetRegistry: the process sets of one runtime, by id.
//
// The global set (id 0, every rank) is added first and lives as long as the
// registry; the others come from Init's list and from agreed adds, each with
// the next unused id, and leave when an agreed remove takes them out.
//
// Threads: Add, NextId and Remove are called by the coordinator thread (and
// by Runtime::Create before the coordinator starts); Find, FindMember, Ids
// and the other queries by any thread. Every method takes the registry's
// mutex, except global(), which is set once before any other thread can see
// the registry and never changes. A set handed out by Find stays valid for
// its holder after a remove; only the coordinator frees its communicators.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "accord/accord.h"
#include "runtime/process_set.h"

namespace accord {

class ProcessSetRegistry {
 public:
  // The id the next added set gets (0, the global set's, the first time);
  // each call uses one up.
  ProcessSetId NextId() { return next_id_++; }
  // Adds `set` under its id; the set with id 0 becomes global().
  void Add(std::shared_ptr<ProcessSet> set);
  // Takes the set out (kInvalidArgument for the global set or one that does
  // not exist). The caller frees its communicators.
  Result<std::shared_ptr<ProcessSet>> Remove(ProcessSetId id);
  // Drops every set, the global one too. Only once the coordinator has stopped.
  void Clear();

  // The global set (every rank is a member).
  const std::shared_ptr<ProcessSet>& global() const { return global_; }
  // The set (kInvalidArgument if there is no such set).
  Result<std::shared_ptr<ProcessSet>> Find(ProcessSetId id) const;
  // The set, if it exists and rank `rank` is a member (kPreconditionFailed
  // otherwise, kInvalidArgument if there is no such set).
  Result<std::shared_ptr<ProcessSet>> FindMember(ProcessSetId id, int rank) const;
  std::vector<ProcessSetId> Ids() const;
  // True if there is no set but the global one.
  bool OnlyGlobal() const;
  // The sets other than the global one that this rank belongs to, by
  // ascending id: the order of their rounds, the same on every rank.
  std::vector<std::shared_ptr<ProcessSet>> MemberSetsAfterGlobal() const;
  // Bytes enqueued on this rank, in every set it belongs to, that no round
  // has announced yet.
  uint64_t NewBytes() const;
  // Calls `fn` on every set this rank belongs to, by ascending id, with the
  // registry's mutex held (`fn` must not call back into the registry).
  void ForEachMember(const std::function<void(ProcessSet&)>& fn) const;

 private:
  mutable std::mutex mutex_;
  std::map<ProcessSetId, std::shared_ptr<ProcessSet>> sets_;  // GUARDED_BY(mutex_)
  std::shared_ptr<ProcessSet> global_;                        // also in sets_; set once by Add
  ProcessSetId next_id_ = kGlobalProcessSet;                  // coordinator thread (and Create)
};

}  // namespace accord
