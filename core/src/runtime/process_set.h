// ProcessSet: one set of ranks with its own negotiation (controller and
// response cache), communicators and queue, as this rank sees it.
//
// Created at Init (user thread, before the coordinator starts) or by the
// coordinator thread when an add is agreed. User threads only read `id`,
// `ranks`, `set_rank` and use `queue`; everything else belongs to the
// coordinator thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "accord/accord.h"
#include "backends/backend.h"
#include "negotiation/control_transport.h"
#include "negotiation/controller.h"
#include "runtime/tensor_queue.h"

namespace accord {

struct ProcessSet {
  ProcessSetId id = kGlobalProcessSet;
  std::vector<int> ranks;  // global ranks, ascending
  int set_rank = -1;       // this rank within the set; -1 when not a member
  int hosts = 1;           // hosts the set's ranks are on (members know it)
  // The window its allreduces, broadcasts and allgathers are staged in
  // (Config::StagingWindowBytes).
  int64_t staging_window_bytes = 0;

  // Members only.
  std::unique_ptr<ControlTransport> transport;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Controller> controller;
  std::unique_ptr<TensorQueue> queue;

  bool member() const { return set_rank >= 0; }
  int size() const { return static_cast<int>(ranks.size()); }
  // "<op>.noname.<n>": the n-th unnamed op of this kind submitted to the set
  // here. For ops that cannot be refused once named (barrier, process-set
  // changes); the others use AutoNamer.
  std::string AutoName(const char* op);

  // Called by the coordinator thread for an agreed response that this rank
  // took no part in submitting (it has joined). If `name` is an auto-name
  // "<op>.noname.<n>", the next unnamed op of that kind here is numbered
  // n + 1 at least, as on the ranks that submitted it: a joined rank stays
  // in step with them, so unnamed ops still match once every rank joined.
  void CatchUpAutoName(const std::string& name);

  // The name of an unnamed op that checks may still refuse. The number is
  // used up only by Commit(), once the op is in the queue: an op refused on
  // this rank alone (a bad argument) leaves the count as it was, so the
  // next unnamed op still gets the name the other ranks give theirs. Holds
  // the set's naming lock while it lives, so that ops enqueued by several
  // threads at once still get distinct numbers.
  class AutoNamer {
   public:
    AutoNamer(ProcessSet& set, const char* op);
    const std::string& name() const { return name_; }
    void Commit();

   private:
    std::unique_lock<std::mutex> lock_;
    uint64_t& count_;
    std::string name_;
  };

 private:
  std::mutex names_mutex_;
  std::map<std::string, uint64_t> unnamed_counts_;
};

}  // namespace accord
