// TensorQueue: the operations of one process set submitted on this rank and
// not yet completed, by name.
//
// User threads Enqueue (any thread); the coordinator thread takes the new
// requests for the next negotiation round and removes entries as it executes
// them. All methods are thread-safe.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "accord/tensor.h"
#include "common/spare_nodes.h"
#include "device/device.h"
#include "negotiation/message.h"
#include "runtime/handle_state.h"
#include "runtime/work_signal.h"

namespace accord {

struct TensorEntry {
  Request request;  // moved out when announced (see TakeNewRequests)
  TensorView input;
  TensorView output;  // allreduce and broadcast: where the result goes; handed to
                      // the handle as its output on completion. Left empty for an
                      // in-place allreduce (output_is_input): `input` is the output.
  bool output_is_input = false;
  Allocator allocator;  // allgather, alltoall, reducescatter
  std::shared_ptr<HandleState> handle;
  int part = 0;            // this tensor's index among the handle's outputs
  Status error;            // a local failure found while executing (e.g. the allocator
                           // failed); the collective still ran so no rank hangs
  bool announced = false;  // TakeNewRequests has handed its request to negotiation
  // CUDA tensors: the stream that produces the input (a cudaStream_t; null
  // is the legacy default stream), and the event recorded on it at enqueue,
  // which the communication stream waits for before reading the input.
  void* stream = nullptr;
  std::shared_ptr<DeviceEvent> ready;
};

// Completes the entry's part of its handle with `status`, or with the
// entry's own error if it has one, recording the output (allreduce and
// broadcast: the memory given at enqueue). Returns true when this completed
// the handle: the caller must then call NotifyWaiters() on it.
bool FinishEntry(TensorEntry& entry, OpType type, const Status& status);

class TensorQueue {
 public:
  explicit TensorQueue(WorkSignal* signal) : signal_(signal) {}

  // An entry taken out of the queue; empty where this rank had none. Owns
  // the entry without moving it (taking 256 entries out costs 256 pointer
  // moves, not 256 copies of a request).
  using Map = std::unordered_map<std::string, TensorEntry>;
  using Taken = Map::node_type;

  // Adds all entries or none: fails if a name is already in flight (or twice
  // in `entries`), or if the queue was closed. Wakes the coordinator unless
  // `wake` is false (the submitting thread will drive: fast_path.h).
  Status Enqueue(std::vector<TensorEntry> entries, bool wake = true);
  Status Enqueue(TensorEntry&& entry, bool wake = true);
  // Coordinator: requests added since the last call. Moved out of their
  // entries: the entry no longer holds its request once announced.
  std::vector<Request> TakeNewRequests();
  // Bytes of the inputs added since the last TakeNewRequests (what the next
  // round would announce).
  uint64_t NewBytes() const;
  // Coordinator: takes out the entry for each name (empty where this rank
  // has none); announced or not (a joined rank may get a response first).
  // One lock for the whole batch.
  std::vector<Taken> Remove(const std::vector<const std::string*>& names);
  // The same for one name (a carried allreduce), allocating nothing.
  Taken Remove(const std::string& name);
  // Coordinator: hands back finished entries' nodes, released of what they
  // held (the handle, the event, the allocator), for later enqueues, which
  // then allocate no node: otherwise the user thread allocates what the
  // coordinator frees, the pattern glibc's allocator handles slowest
  // (SpareNodes; docs/decisions.md). A batch's nodes are spare at once (one
  // lock); a single node (a carried allreduce) takes no lock and becomes
  // spare at the coordinator's next call that locks.
  void Recycle(std::vector<Taken>* taken);
  void Recycle(Taken* taken);
  // Appends the input of `name` to `*out` if it is in the queue and holds at
  // most `max_bytes` (host memory: the caller checks the device).
  bool CopyInput(const std::string& name, size_t max_bytes, std::string* out) const;
  // Refuses further Enqueue with `reason` and returns what was in flight.
  std::vector<TensorEntry> Close(const Status& reason);
  size_t size() const;

 private:
  WorkSignal* signal_;
  mutable std::mutex mutex_;
  Map entries_;
  // Counts the enqueue on the coordinator's signal, waking it if `wake`.
  void Signal(bool wake);
  // Refuses a name in flight. Caller holds mutex_.
  Status CheckNewName(const std::string& name) const;
  // Takes out the entry for `name` (empty if none). Caller holds mutex_.
  Taken TakeLocked(const std::string& name);
  // Inserts `entry` in a spare node if there is one. Returns the new entry,
  // or null, with `entry` untouched, if its name is in flight. Caller holds
  // mutex_.
  TensorEntry* InsertLocked(TensorEntry&& entry);
  // Releases what `taken` holds and keeps it in `*into`.
  static void Release(Taken* taken, SpareNodes<Map>* into);

  std::vector<TensorEntry*> new_entries_;  // not yet announced; map nodes do not move
  SpareNodes<Map> spare_;                  // released nodes for InsertLocked
  SpareNodes<Map> returned_;               // coordinator only: released, not yet in spare_
  Status closed_;
};

}  // namespace accord
