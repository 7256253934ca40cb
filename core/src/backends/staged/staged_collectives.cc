#include "backends/staged/staged_collectives.h"

#include <numeric>

#include "common/logging.h"

namespace accord {

namespace {

int64_t Sum(const std::vector<int64_t>& counts) { return std::accumulate(counts.begin(), counts.end(), int64_t{0}); }

}  // namespace

StagedCollectives::StagedCollectives(Backend* mpi, DeviceApi* api, int ordinal, int rank, double timeout_seconds)
    : mpi_(mpi), api_(api), ordinal_(ordinal), rank_(rank), timeout_seconds_(timeout_seconds) {}

StagedCollectives::~StagedCollectives() {
  for (char* buffer : staging_) {
    if (buffer) api_->FreeHost(buffer);
  }
}

Result<char*> StagedCollectives::Staging(int which, size_t bytes, DeviceStream& stream) {
  if (bytes > capacity_[which]) {
    // A copy back from the old buffer may still be queued: let it run first.
    if (staging_[which]) ACCORD_RETURN_IF_ERROR(Drain(stream));
    // Grow by half again, so a slowly growing batch reallocates rarely.
    const size_t grown = std::max(bytes, capacity_[which] + capacity_[which] / 2);
    ACCORD_ASSIGN_OR_RETURN(void* fresh, api_->AllocateHost(grown));
    if (staging_[which]) api_->FreeHost(staging_[which]);
    staging_[which] = static_cast<char*>(fresh);
    capacity_[which] = grown;
  }
  return staging_[which];
}

Status StagedCollectives::Drain(DeviceStream& stream) {
  if (aborted_) return Status::Aborted("the GPU path's MPI staging was aborted");
  if (!drained_) {
    ACCORD_ASSIGN_OR_RETURN(drained_, api_->CreateEvent(ordinal_));
  }
  ACCORD_RETURN_IF_ERROR(drained_->Record(stream));
  return WaitForEvent(
      *drained_, timeout_seconds_, &aborted_,
      "the GPU work before a collective staged through host memory on cuda:" + std::to_string(ordinal_));
}

Status StagedCollectives::Allreduce(const void* send, void* recv, int64_t count, DataType dtype, ReduceOp op,
                                    DeviceStream& stream) {
  const size_t bytes = static_cast<size_t>(count) * DataTypeSize(dtype);
  ACCORD_ASSIGN_OR_RETURN(char* host, Staging(0, bytes, stream));
  ACCORD_RETURN_IF_ERROR(stream.Copy(host, send, bytes));
  ACCORD_RETURN_IF_ERROR(Drain(stream));
  ACCORD_RETURN_IF_ERROR(mpi_->Allreduce(host, count, dtype, op));
  return stream.Copy(recv, host, bytes);
}

Status StagedCollectives::Allgatherv(void* buffer, const std::vector<int64_t>& counts, DataType dtype,
                                     DeviceStream& stream) {
  const size_t element = DataTypeSize(dtype);
  const size_t mine =
      static_cast<size_t>(std::accumulate(counts.begin(), counts.begin() + rank_, int64_t{0})) * element;
  const size_t bytes = static_cast<size_t>(Sum(counts)) * element;
  ACCORD_ASSIGN_OR_RETURN(char* host, Staging(0, bytes, stream));
  ACCORD_RETURN_IF_ERROR(
      stream.Copy(host + mine, static_cast<char*>(buffer) + mine, static_cast<size_t>(counts[rank_]) * element));
  ACCORD_RETURN_IF_ERROR(Drain(stream));
  ACCORD_RETURN_IF_ERROR(mpi_->Allgatherv(host, counts, dtype));
  return stream.Copy(buffer, host, bytes);
}

Status StagedCollectives::Broadcast(void* buffer, int64_t count, DataType dtype, int root, DeviceStream& stream) {
  const size_t bytes = static_cast<size_t>(count) * DataTypeSize(dtype);
  ACCORD_ASSIGN_OR_RETURN(char* host, Staging(0, bytes, stream));
  if (rank_ == root) ACCORD_RETURN_IF_ERROR(stream.Copy(host, buffer, bytes));
  // The others drain too: a copy back from this buffer may still be queued.
  ACCORD_RETURN_IF_ERROR(Drain(stream));
  ACCORD_RETURN_IF_ERROR(mpi_->Broadcast(host, count, dtype, root));
  return rank_ == root ? Status::OK() : stream.Copy(buffer, host, bytes);
}

Status StagedCollectives::Alltoallv(const void* send, const std::vector<int64_t>& send_counts, void* recv,
                                    const std::vector<int64_t>& recv_counts, int64_t largest_total, DataType dtype,
                                    DeviceStream& stream) {
  const size_t element = DataTypeSize(dtype);
  const size_t send_bytes = static_cast<size_t>(Sum(send_counts)) * element;
  const size_t recv_bytes = static_cast<size_t>(Sum(recv_counts)) * element;
  ACCORD_ASSIGN_OR_RETURN(char* host_send, Staging(0, send_bytes, stream));
  ACCORD_ASSIGN_OR_RETURN(char* host_recv, Staging(1, recv_bytes, stream));
  ACCORD_RETURN_IF_ERROR(stream.Copy(host_send, send, send_bytes));
  ACCORD_RETURN_IF_ERROR(Drain(stream));
  ACCORD_RETURN_IF_ERROR(mpi_->Alltoallv(host_send, send_counts, host_recv, recv_counts, largest_total, dtype));
  return stream.Copy(recv, host_recv, recv_bytes);
}

Status StagedCollectives::ReduceScatter(const void* send, void* recv, const std::vector<int64_t>& recv_counts,
                                        DataType dtype, ReduceOp op, DeviceStream& stream) {
  const size_t element = DataTypeSize(dtype);
  const size_t send_bytes = static_cast<size_t>(Sum(recv_counts)) * element;
  const size_t recv_bytes = static_cast<size_t>(recv_counts[rank_]) * element;
  ACCORD_ASSIGN_OR_RETURN(char* host_send, Staging(0, send_bytes, stream));
  ACCORD_ASSIGN_OR_RETURN(char* host_recv, Staging(1, recv_bytes, stream));
  ACCORD_RETURN_IF_ERROR(stream.Copy(host_send, send, send_bytes));
  ACCORD_RETURN_IF_ERROR(Drain(stream));
  ACCORD_RETURN_IF_ERROR(mpi_->ReduceScatter(host_send, host_recv, recv_counts, dtype, op));
  return stream.Copy(recv, host_recv, recv_bytes);
}

}  // namespace accord
