// MpiBackend: collectives on CPU memory over one process set's MPI
// communicator (owned here, separate from the negotiation communicator).
// Blocking MPI calls are fine here: negotiation has already established that
// every rank is ready. Coordinator thread only.
#pragma once

#include "backends/backend.h"
#include "backends/mpi/mpi_comm.h"
#include "backends/mpi/mpi_types.h"

namespace accord {

class MpiBackend : public Backend {
 public:
  MpiBackend(MpiComm comm, const MpiTypes* types);
  const char* name() const override { return "mpi"; }
  bool Supports(DeviceType device) const override { return device == DeviceType::kCPU; }
  Status Allreduce(void* buffer, int64_t count, DataType dtype, ReduceOp op) override;
  Status Allgatherv(void* buffer, const std::vector<int64_t>& counts, DataType dtype) override;
  Status Broadcast(void* buffer, int64_t count, DataType dtype, int root) override;
  Status Alltoallv(const void* send, const std::vector<int64_t>& send_counts, void* recv,
                   const std::vector<int64_t>& recv_counts, DataType dtype) override;
  Status ReduceScatter(const void* send, void* recv, const std::vector<int64_t>& recv_counts, DataType dtype,
                       ReduceOp op) override;

 private:
  MpiComm comm_;
  const MpiTypes* types_;
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace accord
