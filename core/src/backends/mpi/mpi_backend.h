// MpiBackend: collectives on CPU memory over one process set's MPI
// communicator (owned here, separate from the negotiation communicator).
// Blocking MPI calls are fine here: negotiation has already established that
// every rank is ready. Coordinator thread only.
//
// MPI counts and displacements are ints. A call over more than `max_count`
// elements (2^31-1 by default, ACCORD_MPI_MAX_COUNT) is split into several:
// an allreduce or broadcast into consecutive pieces, an allgather into
// broadcasts of each rank's block, a reduce-scatter into reductions to each
// rank, an alltoall into point-to-point messages, a send-receive into
// consecutive exchanges. The choice depends only
// on arguments every rank agrees on, so all ranks split the same way.
#pragma once

#include <algorithm>

#include "backends/backend.h"
#include "backends/mpi/mpi_comm.h"
#include "backends/mpi/mpi_types.h"
#include "backends/mpi/ring_allreduce.h"
#include "backends/mpi/ring_pace.h"

namespace accord {

class MpiBackend : public Backend {
 public:
  // `across_hosts`: the set's ranks span hosts, so large allreduces go
  // round a ring of chunked messages (backends/mpi/ring_allreduce.h)
  // instead of MPI_Allreduce.
  MpiBackend(MpiComm comm, const MpiTypes* types, int64_t max_count, bool across_hosts = false);
  const char* name() const override { return "mpi"; }
  bool Supports(DeviceType device) const override { return device == DeviceType::kCPU; }
  Status Allreduce(void* buffer, int64_t count, DataType dtype, ReduceOp op) override;
  // Across hosts, an allreduce that takes the ring (one piece, at least
  // kRingMinBytes) works on the parts in place, with the ring's messages.
  bool AllreducesPartsInPlace(int64_t count, DataType dtype) const override;
  bool FusesLargeInPlace() const override { return ring_across_hosts_; }
  // The ring finishes each chunk of the segment a rank reduces last, before
  // sending it on: that chunk is still in cache, and the result takes no
  // second pass over the whole buffer.
  Status AllreduceParts(const std::vector<BufferPart>& parts, DataType dtype, ReduceOp op,
                        const AllreduceFinish& finish) override;
  Status Allgatherv(void* buffer, const std::vector<int64_t>& counts, DataType dtype) override;
  Status Broadcast(void* buffer, int64_t count, DataType dtype, int root) override;
  Status Alltoallv(const void* send, const std::vector<int64_t>& send_counts, void* recv,
                   const std::vector<int64_t>& recv_counts, int64_t largest_total, DataType dtype) override;
  Status ReduceScatter(const void* send, void* recv, const std::vector<int64_t>& recv_counts, DataType dtype,
                       ReduceOp op) override;
  Status SendRecv(const void* send, int64_t send_count, void* recv, int64_t recv_count, DataType dtype,
                  int peer) override;

 protected:
  // Calls call(first element, elements) for consecutive pieces of at most
  // max_count_ elements of [0, count), stopping at the first error.
  template <typename Call>
  Status ForEachPiece(int64_t count, Call&& call) const {
    for (int64_t at = 0; at < count; at += max_count_) {
      ACCORD_RETURN_IF_ERROR(call(at, static_cast<int>(std::min(max_count_, count - at))));
    }
    return Status::OK();
  }

  MpiComm comm_;
  const MpiTypes* types_;
  int64_t max_count_;  // elements per MPI call, at most INT_MAX
  int rank_ = 0;
  int size_ = 1;

  // MPI_Allreduce in place on `comm`, or the chunked ring when `ring` and the
  // buffer is large enough; n <= max_count_.
  Status AllreduceOn(MPI_Comm comm, bool ring, void* data, int n, DataType dtype, ReduceOp op);

  // The ring's chunk for `dtype`, in elements.
  int64_t RingChunk(DataType dtype) const;
  // The ring's window in chunks within a host (kRingWindowBytes of
  // kRingChunkBytes); rings across hosts are paced (PacedRing).
  static constexpr int RingWindow() { return RingWindowChunks(kRingChunkBytes); }
  // Whether an allreduce of `count` elements of `dtype` is large enough for
  // the ring (where `ring` allows it).
  static bool RingSized(int64_t count, DataType dtype) {
    return count * static_cast<int64_t>(DataTypeSize(dtype)) >= kRingMinBytes;
  }

  // Runs ring(window chunks), an allreduce of `count` elements round the
  // ring across hosts on `comm`, with the window ring_pace_ gives, and
  // records its time there.
  template <typename Ring>
  Status PacedRing(MPI_Comm comm, int64_t count, DataType dtype, Ring&& ring);

  bool ring_across_hosts_ = false;
  std::vector<char> ring_scratch_;
  RingPace ring_pace_;
};

}  // namespace accord
