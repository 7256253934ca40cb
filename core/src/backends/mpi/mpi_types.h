// MpiTypes: the mapping from accord's DataType and ReduceOp to MPI handles,
// and the MPI objects accord has to create for it.
//
// MPI has no float16 or bfloat16 datatype, so MpiTypes creates one 2-byte
// contiguous datatype for each (distinct handles, so a reduction can tell them
// apart) and commutative user-defined MPI_Ops for Sum, Min, Max and Product
// that compute in float and round back (common/dtype_kernels.h). Every other
// dtype maps to a built-in datatype and op.
//
// Lifetime: created after MPI is initialised and destroyed before
// MPI_Finalize, owned by the runtime. At most one MpiTypes exists in a
// process at a time (the op callbacks find the two datatype handles through a
// process-wide slot that Create() fills; see mpi_types.cc), so Create() fails
// while another one is alive.
//
// Threads: Create() and the destructor call MPI, so they belong to the thread
// that owns MPI (the coordinator). Datatype() and Op() only read members and
// may be called from any thread.
#pragma once

#include <mpi.h>

#include <memory>

#include "accord/accord.h"
#include "accord/status.h"
#include "accord/tensor.h"

namespace accord {

class MpiTypes {
 public:
  // Creates and commits the datatypes and ops. Fails with kPreconditionFailed
  // if MPI is not initialised or another MpiTypes is alive, with kInternal if
  // MPI fails (anything created so far is freed again).
  static Result<std::unique_ptr<MpiTypes>> Create();
  // Frees the ops and datatypes. Never throws; MPI failures (or MPI already
  // finalised) are logged (common/logging.h).
  ~MpiTypes();

  MpiTypes(const MpiTypes&) = delete;
  MpiTypes& operator=(const MpiTypes&) = delete;

  // The datatype that moves `dtype`: MPI_UINT8_T, MPI_INT8_T, MPI_INT16_T,
  // MPI_INT32_T, MPI_INT64_T, MPI_FLOAT, MPI_DOUBLE, MPI_C_BOOL for bool, and
  // the custom types for float16 and bfloat16.
  MPI_Datatype Datatype(DataType dtype) const;
  // The op that reduces `dtype` with `op`. Average reduces with Sum (the
  // caller divides afterwards). bool: Sum/Max -> MPI_LOR, Min/Product ->
  // MPI_LAND. float16/bfloat16: the custom ops. Adasum is no MPI
  // reduction: MPI_OP_NULL.
  MPI_Op Op(ReduceOp op, DataType dtype) const;

 private:
  MpiTypes() = default;
  // Fills the members one MPI call at a time; on failure the destructor
  // frees whatever was created.
  Status Init();

  bool owns_slot_ = false;  // this object filled the process-wide handle slot
  MPI_Datatype float16_ = MPI_DATATYPE_NULL;
  MPI_Datatype bfloat16_ = MPI_DATATYPE_NULL;
  MPI_Op sum_ = MPI_OP_NULL;
  MPI_Op min_ = MPI_OP_NULL;
  MPI_Op max_ = MPI_OP_NULL;
  MPI_Op product_ = MPI_OP_NULL;
};

}  // namespace accord
