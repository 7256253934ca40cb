// Backend: the data plane. One collective call on one contiguous buffer.
//
// A backend gets a communicator for one process set (and later a stream);
// it never sees the runtime, the queue or negotiation. Counts are in
// elements of `dtype`; ReduceOp::kAverage is never passed (the ops layer
// turns it into Sum plus a division). Coordinator thread only.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "accord/accord.h"
#include "accord/status.h"
#include "accord/tensor.h"

namespace accord {

// One buffer of an allreduce over several (Backend::AllreduceParts).
struct BufferPart {
  void* data;
  int64_t count;  // elements
};

// What an allreduce over parts does to its result before it is complete
// (the division of an Average, a postscale): called in place on pieces of
// the result (address, elements) that together cover every element once,
// each piece after it is fully reduced and before any other rank gets it,
// so every rank ends with the same bits. Empty: nothing to do.
using AllreduceFinish = std::function<void(void* data, int64_t count)>;

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;
  virtual bool Supports(DeviceType device) const = 0;

  // In place over `count` elements.
  virtual Status Allreduce(void* buffer, int64_t count, DataType dtype, ReduceOp op) = 0;
  // Whether AllreduceParts runs an allreduce of `count` elements of `dtype`
  // in the parts' own memory, exchanging exactly the messages Allreduce on
  // their concatenation would (so in one collective some ranks may pass
  // parts and others one buffer, each through AllreduceParts: the messages
  // may carry finished values, so every rank passes the same finish).
  // Decided only by what every rank agrees on.
  virtual bool AllreducesPartsInPlace(int64_t count, DataType dtype) const {
    (void)count;
    (void)dtype;
    return false;
  }
  // Whether a batch of large tensors is worth fusing: an allreduce of a
  // kRunAloneBytes tensor or more (fusion/fusion_planner.h) goes through
  // AllreduceParts, in place, so fusing costs no copies and saves the fixed
  // cost of each separate collective.
  virtual bool FusesLargeInPlace() const { return false; }
  // In place over the concatenation of `parts`, as Allreduce on one buffer
  // holding them and then `finish` over it; only where
  // AllreducesPartsInPlace(their total, dtype).
  virtual Status AllreduceParts(const std::vector<BufferPart>& parts, DataType dtype, ReduceOp op,
                                const AllreduceFinish& finish) {
    (void)parts;
    (void)dtype;
    (void)op;
    (void)finish;
    return Status::Internal(std::string("the ") + name() + " backend has no allreduce over several buffers");
  }
  // In place: rank r's block of counts[r] elements starts at the sum of the
  // counts before it, and this rank's block is already in place.
  virtual Status Allgatherv(void* buffer, const std::vector<int64_t>& counts, DataType dtype) = 0;
  virtual Status Broadcast(void* buffer, int64_t count, DataType dtype, int root) = 0;
  // Sends send_counts[j] elements to rank j (consecutive blocks of `send`),
  // receives recv_counts[r] from rank r (consecutive blocks of `recv`).
  // `largest_total` is the most elements any rank of the set sends or
  // receives in all; every rank passes the same value, so a backend that
  // must split large exchanges decides the same way on every rank.
  virtual Status Alltoallv(const void* send, const std::vector<int64_t>& send_counts, void* recv,
                           const std::vector<int64_t>& recv_counts, int64_t largest_total, DataType dtype) = 0;
  // Reduces `send` (the sum of recv_counts elements) across ranks; this rank
  // receives its block (recv_counts[rank] elements) into `recv`.
  virtual Status ReduceScatter(const void* send, void* recv, const std::vector<int64_t>& recv_counts, DataType dtype,
                               ReduceOp op) = 0;
  // Sends `send_count` elements to rank `peer` and receives `recv_count`
  // elements from it; the peer makes the matching call with the counts
  // swapped. The buffers must not overlap. For algorithms built from pairwise
  // exchanges (Adasum, ops/adasum.h).
  virtual Status SendRecv(const void* send, int64_t send_count, void* recv, int64_t recv_count, DataType dtype,
                          int peer) = 0;
};

}  // namespace accord
