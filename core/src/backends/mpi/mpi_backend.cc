#include "backends/mpi/mpi_backend.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <string>

#include "backends/mpi/mpi_check.h"
#include "backends/mpi/ring_allreduce.h"

namespace accord {

namespace {

int64_t Sum(const std::vector<int64_t>& counts) {
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  return total;
}

// Counts and displacements (prefix sums) as the ints one MPI call takes;
// the caller has checked that their sum fits.
void IntCounts(const std::vector<int64_t>& counts, std::vector<int>* out, std::vector<int>* displs) {
  out->resize(counts.size());
  displs->resize(counts.size());
  int64_t offset = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    (*out)[i] = static_cast<int>(counts[i]);
    (*displs)[i] = static_cast<int>(offset);
    offset += counts[i];
  }
}

}  // namespace

MpiBackend::MpiBackend(MpiComm comm, const MpiTypes* types, int64_t max_count, bool across_hosts)
    : comm_(std::move(comm)),
      types_(types),
      max_count_(std::clamp<int64_t>(max_count, 1, INT_MAX)),
      ring_across_hosts_(across_hosts) {
  MPI_Comm_rank(comm_.get(), &rank_);
  MPI_Comm_size(comm_.get(), &size_);
}

Status MpiBackend::Allreduce(void* buffer, int64_t count, DataType dtype, ReduceOp op) {
  char* base = static_cast<char*>(buffer);
  const size_t element = DataTypeSize(dtype);
  return ForEachPiece(count, [&](int64_t at, int n) {
    return AllreduceOn(comm_.get(), ring_across_hosts_, base + at * element, n, dtype, op);
  });
}

int64_t MpiBackend::RingChunk(DataType dtype) const {
  return std::clamp<int64_t>(kRingChunkBytes / static_cast<int64_t>(DataTypeSize(dtype)), 1, max_count_);
}

template <typename Ring>
Status MpiBackend::PacedRing(MPI_Comm comm, int64_t count, DataType dtype, Ring&& ring) {
  const int64_t element = static_cast<int64_t>(DataTypeSize(dtype));
  int size = 1;
  MPI_Comm_size(comm, &size);
  const auto start = std::chrono::steady_clock::now();
  ACCORD_RETURN_IF_ERROR(ring(ring_pace_.WindowChunks(RingChunk(dtype) * element)));
  // Each rank sends 2 (size - 1) / size of the buffer.
  ring_pace_.Record(2 * (size - 1) * (count * element / size), std::chrono::steady_clock::now() - start);
  return Status::OK();
}

bool MpiBackend::AllreducesPartsInPlace(int64_t count, DataType dtype) const {
  // What Allreduce does with one buffer of `count`: one piece, and the ring.
  return ring_across_hosts_ && count <= max_count_ && RingSized(count, dtype);
}

Status MpiBackend::AllreduceParts(const std::vector<BufferPart>& parts, DataType dtype, ReduceOp op,
                                  const AllreduceFinish& finish) {
  int64_t count = 0;
  for (const BufferPart& part : parts) count += part.count;
  if (!AllreducesPartsInPlace(count, dtype)) {
    return Status::Internal("allreduce over several buffers of " + std::to_string(count) +
                            " elements in all: not one the MPI backend runs in place");
  }
  return PacedRing(comm_.get(), count, dtype, [&](int window) {
    return RingAllreduce(comm_.get(), parts, types_->Datatype(dtype), types_->Op(op, dtype), DataTypeSize(dtype),
                         RingChunk(dtype), window, ring_scratch_, finish);
  });
}

Status MpiBackend::AllreduceOn(MPI_Comm comm, bool ring, void* data, int n, DataType dtype, ReduceOp op) {
  if (ring && RingSized(n, dtype)) {
    return PacedRing(comm, n, dtype, [&](int window) {
      return RingAllreduce(comm, data, n, types_->Datatype(dtype), types_->Op(op, dtype), DataTypeSize(dtype),
                           RingChunk(dtype), window, ring_scratch_);
    });
  }
  return ACCORD_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, data, n, types_->Datatype(dtype), types_->Op(op, dtype), comm));
}

Status MpiBackend::Broadcast(void* buffer, int64_t count, DataType dtype, int root) {
  char* base = static_cast<char*>(buffer);
  const size_t element = DataTypeSize(dtype);
  return ForEachPiece(count, [&](int64_t at, int n) {
    return ACCORD_MPI_CHECK(MPI_Bcast(base + at * element, n, types_->Datatype(dtype), root, comm_.get()));
  });
}

Status MpiBackend::Allgatherv(void* buffer, const std::vector<int64_t>& counts, DataType dtype) {
  if (Sum(counts) <= max_count_) {
    std::vector<int> c, d;
    IntCounts(counts, &c, &d);
    return ACCORD_MPI_CHECK(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buffer, c.data(), d.data(),
                                           types_->Datatype(dtype), comm_.get()));
  }
  // Too large for one call: every rank broadcasts its block in turn.
  char* base = static_cast<char*>(buffer);
  const size_t element = DataTypeSize(dtype);
  int64_t offset = 0;
  for (int root = 0; root < size_; ++root) {
    ACCORD_RETURN_IF_ERROR(Broadcast(base + offset * element, counts[root], dtype, root));
    offset += counts[root];
  }
  return Status::OK();
}

Status MpiBackend::Alltoallv(const void* send, const std::vector<int64_t>& send_counts, void* recv,
                             const std::vector<int64_t>& recv_counts, int64_t largest_total, DataType dtype) {
  const MPI_Datatype type = types_->Datatype(dtype);
  if (largest_total < std::max(Sum(send_counts), Sum(recv_counts))) {
    return Status::Internal("alltoall: this rank moves more than the largest total every rank agreed on (" +
                            std::to_string(largest_total) + " elements)");
  }
  if (largest_total <= max_count_) {
    std::vector<int> sc, sd, rc, rd;
    IntCounts(send_counts, &sc, &sd);
    IntCounts(recv_counts, &rc, &rd);
    return ACCORD_MPI_CHECK(
        MPI_Alltoallv(send, sc.data(), sd.data(), type, recv, rc.data(), rd.data(), type, comm_.get()));
  }
  // Too large for one call: point-to-point messages of at most max_count_
  // elements, all posted at once. Messages between two ranks arrive in the
  // order they were sent, so the pieces match up.
  const size_t element = DataTypeSize(dtype);
  std::vector<MPI_Request> requests;
  auto post = [&](bool receive, char* base, const std::vector<int64_t>& counts) -> Status {
    int64_t offset = 0;
    for (int peer = 0; peer < size_; ++peer) {
      ACCORD_RETURN_IF_ERROR(ForEachPiece(counts[peer], [&](int64_t at, int n) {
        char* piece = base + (offset + at) * element;
        MPI_Request request;
        const Status posted = receive ? ACCORD_MPI_CHECK(MPI_Irecv(piece, n, type, peer, 0, comm_.get(), &request))
                                      : ACCORD_MPI_CHECK(MPI_Isend(piece, n, type, peer, 0, comm_.get(), &request));
        if (posted.ok()) requests.push_back(request);
        return posted;
      }));
      offset += counts[peer];
    }
    return Status::OK();
  };
  Status status = post(true, static_cast<char*>(recv), recv_counts);
  if (status.ok()) status = post(false, const_cast<char*>(static_cast<const char*>(send)), send_counts);
  const Status waited =
      ACCORD_MPI_CHECK(MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE));
  return status.ok() ? waited : status;
}

Status MpiBackend::ReduceScatter(const void* send, void* recv, const std::vector<int64_t>& recv_counts, DataType dtype,
                                 ReduceOp op) {
  const MPI_Datatype type = types_->Datatype(dtype);
  const MPI_Op mpi_op = types_->Op(op, dtype);
  if (Sum(recv_counts) <= max_count_) {
    std::vector<int> c, d;
    IntCounts(recv_counts, &c, &d);
    return ACCORD_MPI_CHECK(MPI_Reduce_scatter(send, recv, c.data(), type, mpi_op, comm_.get()));
  }
  // Too large for one call: each rank's block is reduced to it, in pieces.
  const size_t element = DataTypeSize(dtype);
  const char* in = static_cast<const char*>(send);
  int64_t offset = 0;
  for (int root = 0; root < size_; ++root) {
    ACCORD_RETURN_IF_ERROR(ForEachPiece(recv_counts[root], [&](int64_t at, int n) {
      char* out = root == rank_ ? static_cast<char*>(recv) + at * element : nullptr;
      return ACCORD_MPI_CHECK(MPI_Reduce(in + (offset + at) * element, out, n, type, mpi_op, root, comm_.get()));
    }));
    offset += recv_counts[root];
  }
  return Status::OK();
}

Status MpiBackend::SendRecv(const void* send, int64_t send_count, void* recv, int64_t recv_count, DataType dtype,
                            int peer) {
  // Piece k sends elements [k max, (k+1) max) of `send` and receives the same
  // range of `recv`: the peer, whose counts are these swapped, cuts the same
  // pieces, so every exchange matches one of its own.
  const MPI_Datatype type = types_->Datatype(dtype);
  const size_t element = DataTypeSize(dtype);
  auto part = [](int64_t count, int64_t at, int n) { return static_cast<int>(std::clamp<int64_t>(count - at, 0, n)); };
  return ForEachPiece(std::max(send_count, recv_count), [&](int64_t at, int n) {
    const int sends = part(send_count, at, n);
    const int receives = part(recv_count, at, n);
    const char* out = static_cast<const char*>(send) + (sends > 0 ? at * element : 0);
    char* in = static_cast<char*>(recv) + (receives > 0 ? at * element : 0);
    return ACCORD_MPI_CHECK(
        MPI_Sendrecv(out, sends, type, peer, 0, in, receives, type, peer, 0, comm_.get(), MPI_STATUS_IGNORE));
  });
}

}  // namespace accord
