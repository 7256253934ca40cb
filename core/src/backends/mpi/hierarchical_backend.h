// HierarchicalBackend: MpiBackend for a process set whose ranks span several
// hosts, with allreduce and/or allgather in two levels, so that traffic
// between hosts carries each byte once per host instead of once per rank
// (ACCORD_HIERARCHICAL_ALLREDUCE, ACCORD_HIERARCHICAL_ALLGATHER; see
// docs/decisions.md, "Hierarchical collectives"). Every other collective,
// and each of the two that is not switched on, is MpiBackend's (flat).
//
// Allreduce of n elements, per piece of at most max_count elements:
//   1. Within each host, the set's ranks there reduce-scatter the buffer
//      (MPI_Ireduce_scatter on the host's communicator): the data is cut into
//      S shards, S = the fewest ranks the set has on any host, and local
//      rank j < S gets the host's sum of shard j (local ranks >= S, which
//      only uneven layouts have, get none).
//   2. Local rank j < S allreduces shard j with local rank j of every other
//      host (the "cross" communicator of local rank j): every shard crosses
//      the network at once, each on 1/S of the data.
//   3. Within each host, the shards are allgathered back into the buffer.
// Shards differ by at most one element; any count works (0, fewer than S,
// remainders), every dtype and op MpiTypes reduces.
// Every step that is one of Open MPI's collectives (here and in the
// allgather below) is started non-blocking and polled with sleeps between
// tests, as the ring waits, not left to spin in a blocking call.
// A piece of at least kRingMinBytes on hosts with equally many ranks runs
// steps 1 and 3 as the two halves of accord's ring over the host's ranks
// (RingReduceScatter, RingAllgather: chunked, polled, contiguous segments),
// and local rank j's shard is the segment the ring leaves it
// (RingOwnedSegment): on the test bed at 10 Gbit/s, 2 hosts x 2 ranks, a
// 64 MiB allreduce took 60-80 ms in Open MPI's MPI_Ireduce_scatter alone
// and 25-28 ms in the ring's (docs/decisions.md, "Hierarchical
// collectives"). Uneven hosts, and smaller pieces, use Open MPI's
// collectives as above.
//
// Allgatherv (in place; rank r's block at the sum of the counts before it):
//   1. Within each host, an in-place MPI_Iallgatherv with every local rank's
//      block at its global position: each rank then holds its host's blocks.
//   2. One leader per host (local rank 0) exchanges the hosts' blocks with
//      the other leaders: one in-place MPI_Iallgatherv straight on the buffer
//      when each host's ranks are consecutive, else packed host by host into
//      a scratch buffer, gathered there and unpacked.
//   3. Each leader broadcasts the other hosts' blocks to its host (one
//      MPI_Ibcast with an indexed datatype over exactly those blocks).
// An allgather of more than max_count elements in all runs flat (MpiBackend
// splits it into broadcasts).
//
// Every choice depends only on the agreed counts and the layout, the same on
// every rank, so the ranks' MPI calls match. Coordinator thread only.
#pragma once

#include <vector>

#include "backends/mpi/host_layout.h"
#include "backends/mpi/mpi_backend.h"

namespace accord {

struct HierarchicalOptions {
  bool allreduce = false;
  bool allgather = false;
};

class HierarchicalBackend : public MpiBackend {
 public:
  // `comm`: the set's data communicator; `layout`: HostLayout::Of(comm).
  // Collective over `comm` (creates the cross communicator).
  static Result<std::unique_ptr<HierarchicalBackend>> Create(MpiComm comm, HostLayout layout, const MpiTypes* types,
                                                             int64_t max_count, HierarchicalOptions options);

  const char* name() const override { return "mpi-hierarchical"; }
  Status Allreduce(void* buffer, int64_t count, DataType dtype, ReduceOp op) override;
  Status Allgatherv(void* buffer, const std::vector<int64_t>& counts, DataType dtype) override;
  // Hierarchical allreduces work on one buffer (fused batches are packed);
  // flat ones are the flat backend's.
  bool AllreducesPartsInPlace(int64_t count, DataType dtype) const override {
    return !options_.allreduce && MpiBackend::AllreducesPartsInPlace(count, dtype);
  }
  bool FusesLargeInPlace() const override { return !options_.allreduce && MpiBackend::FusesLargeInPlace(); }

 private:
  HierarchicalBackend(MpiComm comm, HostLayout layout, const MpiTypes* types, int64_t max_count,
                      HierarchicalOptions options);
  // Steps 1-3 of the allreduce on n <= max_count_ elements.
  Status AllreduceInHosts(char* data, int n, DataType dtype, ReduceOp op);
  Status AllreduceRingsInHosts(char* data, int n, DataType dtype, ReduceOp op);
  // Step 2 (local ranks with a cross communicator): `n` elements at `data`
  // with the same local rank on every other host.
  Status CrossAllreduce(char* data, int n, DataType dtype, ReduceOp op);
  // Steps 2 (leaders only) and 3 of the allgather; `offsets[r]` is where
  // set rank r's block starts.
  Status ExchangeHostBlocks(char* data, const std::vector<int64_t>& counts, const std::vector<int64_t>& offsets,
                            DataType dtype);
  Status BroadcastOtherHosts(char* data, const std::vector<int64_t>& counts, const std::vector<int64_t>& offsets,
                             DataType dtype);

  HostLayout layout_;
  HierarchicalOptions options_;
  bool hosts_contiguous_ = false;
  bool even_hosts_ = false;  // every host has as many of the set's ranks
  // Local rank j < S: the set's local rank j of every host, ordered by host.
  MpiComm cross_;
  std::vector<char> scratch_;  // the leaders' exchange when hosts are not contiguous
};

}  // namespace accord
