// The narrow seam between negotiation and the network.
//
// A Controller talks to the other ranks of its process set only through this
// interface, so negotiation can be tested with N ranks as threads in one
// process (InProcTransport) and runs over MPI in production
// (MpiControlTransport). Every call is collective: all ranks of the set make
// the same calls in the same order. Only the coordinator thread calls it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "accord/status.h"

namespace accord {

class ControlTransport {
 public:
  virtual ~ControlTransport() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Bitwise AND of `bits` over all ranks, in place. Every rank passes the
  // same length.
  virtual Status AllreduceBitAnd(std::vector<uint64_t>* bits) = 0;
  // AllreduceBitAnd that also hands every rank's `mine` (at most kCarryBytes;
  // empty for none) to every rank: `carried` gets them by rank, this rank's
  // own included. A transport that cannot carry them in the same exchange
  // runs the AND alone and leaves `carried` empty, on every rank alike.
  virtual Status AllreduceBitAndCarrying(std::vector<uint64_t>* bits, const std::string& /*mine*/,
                                         std::vector<std::string>* carried) {
    carried->clear();
    return AllreduceBitAnd(bits);
  }
  // The most bytes a rank may carry with the AND.
  static constexpr size_t kCarryBytes = 1024;
  // Collects every rank's bytes on rank 0; `gathered` is filled (size()
  // entries, by rank) on rank 0 only.
  virtual Status Gather(const std::string& mine, std::vector<std::string>* gathered) = 0;
  // Rank 0's `bytes` replaces everyone else's.
  virtual Status Broadcast(std::string* bytes) = 0;
};

}  // namespace accord
