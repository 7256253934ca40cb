#include "backends/mpi/mpi_backend.h"

#include <climits>
#include <string>

#include "backends/mpi/mpi_check.h"

namespace accord {

namespace {

// MPI counts are ints; larger buffers would need derived datatypes.
Status ToIntCounts(const std::vector<int64_t>& counts, std::vector<int>* out, std::vector<int>* displs) {
  out->resize(counts.size());
  displs->resize(counts.size());
  int64_t offset = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (counts[i] > INT_MAX || offset > INT_MAX) {
      return Status::Unimplemented("a collective of more than 2^31-1 elements per rank is not supported");
    }
    (*out)[i] = static_cast<int>(counts[i]);
    (*displs)[i] = static_cast<int>(offset);
    offset += counts[i];
  }
  return Status::OK();
}

Status CheckCount(int64_t count) {
  if (count > INT_MAX) {
    return Status::Unimplemented("a collective of " + std::to_string(count) +
                                 " elements (more than 2^31-1) is not supported");
  }
  return Status::OK();
}

}  // namespace

MpiBackend::MpiBackend(MpiComm comm, const MpiTypes* types) : comm_(std::move(comm)), types_(types) {
  MPI_Comm_rank(comm_.get(), &rank_);
  MPI_Comm_size(comm_.get(), &size_);
}

Status MpiBackend::Allreduce(void* buffer, int64_t count, DataType dtype, ReduceOp op) {
  ACCORD_RETURN_IF_ERROR(CheckCount(count));
  return ACCORD_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, buffer, static_cast<int>(count), types_->Datatype(dtype),
                                        types_->Op(op, dtype), comm_.get()));
}

Status MpiBackend::Allgatherv(void* buffer, const std::vector<int64_t>& counts, DataType dtype) {
  std::vector<int> c, d;
  ACCORD_RETURN_IF_ERROR(ToIntCounts(counts, &c, &d));
  return ACCORD_MPI_CHECK(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buffer, c.data(), d.data(),
                                         types_->Datatype(dtype), comm_.get()));
}

Status MpiBackend::Broadcast(void* buffer, int64_t count, DataType dtype, int root) {
  ACCORD_RETURN_IF_ERROR(CheckCount(count));
  return ACCORD_MPI_CHECK(
      MPI_Bcast(buffer, static_cast<int>(count), types_->Datatype(dtype), root, comm_.get()));
}

Status MpiBackend::Alltoallv(const void* send, const std::vector<int64_t>& send_counts, void* recv,
                             const std::vector<int64_t>& recv_counts, DataType dtype) {
  std::vector<int> sc, sd, rc, rd;
  ACCORD_RETURN_IF_ERROR(ToIntCounts(send_counts, &sc, &sd));
  ACCORD_RETURN_IF_ERROR(ToIntCounts(recv_counts, &rc, &rd));
  const MPI_Datatype type = types_->Datatype(dtype);
  return ACCORD_MPI_CHECK(MPI_Alltoallv(send, sc.data(), sd.data(), type, recv, rc.data(), rd.data(), type,
                                        comm_.get()));
}

Status MpiBackend::ReduceScatter(const void* send, void* recv, const std::vector<int64_t>& recv_counts,
                                 DataType dtype, ReduceOp op) {
  std::vector<int> c, d;
  ACCORD_RETURN_IF_ERROR(ToIntCounts(recv_counts, &c, &d));
  return ACCORD_MPI_CHECK(MPI_Reduce_scatter(send, recv, c.data(), types_->Datatype(dtype), types_->Op(op, dtype),
                                             comm_.get()));
}

}  // namespace accord
