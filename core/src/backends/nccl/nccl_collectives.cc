#include "backends/nccl/nccl_collectives.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstring>
#include <functional>
#include <optional>
#include <utility>

#include "backends/nccl/nccl_check.h"
#include "backends/nccl/nccl_mapping.h"

namespace accord {

namespace {

cudaStream_t Native(DeviceStream& stream) { return static_cast<cudaStream_t>(stream.native()); }

// The address `elements` elements of `dtype` past `base`.
char* At(void* base, int64_t elements, DataType dtype) { return static_cast<char*>(base) + NcclBytes(elements, dtype); }
const char* At(const void* base, int64_t elements, DataType dtype) {
  return static_cast<const char*>(base) + NcclBytes(elements, dtype);
}

// Runs `calls` between ncclGroupStart and ncclGroupEnd, so that NCCL starts
// them as one operation (point-to-point calls must be grouped to make
// progress together). Once the group has started, it is always ended;
// returns the first failure.
Status Grouped(ncclComm_t comm, const std::function<Status()>& calls) {
  ACCORD_RETURN_IF_ERROR(ACCORD_NCCL_CHECK_COMM(comm, ncclGroupStart()));
  const Status issued = calls();
  const Status ended = ACCORD_NCCL_CHECK_ISSUE(comm, ncclGroupEnd());
  return issued.ok() ? ended : issued;
}

Status CheckCount(int64_t count, const char* what) {
  if (count >= 0) return Status::OK();
  return Status::InvalidArgument(std::string(what) + ": negative count " + std::to_string(count));
}

// The version code of the NCCL loaded (ncclGetVersion), 0 if it would not say.
int LoadedNcclVersionCode() {
  int code = 0;
  return ncclGetVersion(&code) == ncclSuccess ? code : 0;
}

}  // namespace

NcclCollectives::NcclCollectives(NcclComm comm, std::unique_ptr<DeviceCollectives> fallback)
    : comm_(std::move(comm)), fallback_(std::move(fallback)), version_code_(LoadedNcclVersionCode()) {}

bool NcclCollectives::AveragesInCollective(DataType dtype) const { return NcclAverages(dtype, version_code_); }

Status NcclCollectives::CheckStream(const DeviceStream& stream, const char* what) const {
  if (stream.ordinal() == comm_.ordinal()) return Status::OK();
  return Status::InvalidArgument(std::string(what) + ": the stream is on CUDA device " +
                                 std::to_string(stream.ordinal()) + ", the NCCL communicator on device " +
                                 std::to_string(comm_.ordinal()));
}

Result<std::optional<NcclReduction>> NcclCollectives::ReductionFor(DataType dtype, ReduceOp op,
                                                                   const char* what) const {
  const Result<NcclReduction> reduction = NcclReductionFor(dtype, op);
  if (reduction.ok()) return std::optional<NcclReduction>(reduction.value());
  const Status& why = reduction.status();
  if (why.code() == StatusCode::kUnimplemented && fallback_) return std::optional<NcclReduction>();
  std::string message = std::string(what) + ": " + why.message();
  if (why.code() == StatusCode::kUnimplemented) message += ", and no fallback backend was given for it";
  return Status(why.code(), message);
}

Status NcclCollectives::Allreduce(const void* send, void* recv, int64_t count, DataType dtype, ReduceOp op,
                                  DeviceStream& stream) {
  ACCORD_RETURN_IF_ERROR(CheckCount(count, "allreduce"));
  ACCORD_ASSIGN_OR_RETURN(const std::optional<NcclReduction> reduction, ReductionFor(dtype, op, "allreduce"));
  if (!reduction) return fallback_->Allreduce(send, recv, count, dtype, op, stream);
  ACCORD_RETURN_IF_ERROR(CheckStream(stream, "allreduce"));
  if (count == 0) return Status::OK();
  const NcclReduction r = *reduction;
  const cudaStream_t s = Native(stream);
  return comm_.Run("ncclAllReduce", [&](ncclComm_t comm) {
    return ACCORD_NCCL_CHECK_ISSUE(comm, ncclAllReduce(send, recv, static_cast<size_t>(count), r.type, r.op, comm, s));
  });
}

Status NcclCollectives::Allgatherv(void* buffer, const std::vector<int64_t>& counts, DataType dtype,
                                   DeviceStream& stream) {
  ACCORD_RETURN_IF_ERROR(CheckCounts(counts, comm_.size(), "allgather"));
  ACCORD_RETURN_IF_ERROR(CheckStream(stream, "allgather"));
  const cudaStream_t s = Native(stream);
  if (const std::optional<int64_t> equal = EqualCount(counts)) {
    if (*equal == 0) return Status::OK();
    // In place: this rank's block already sits where ncclAllGather puts it.
    const char* mine = At(buffer, *equal * comm_.rank(), dtype);
    const size_t bytes = NcclBytes(*equal, dtype);
    return comm_.Run("ncclAllGather", [&](ncclComm_t comm) {
      return ACCORD_NCCL_CHECK_ISSUE(comm, ncclAllGather(mine, buffer, bytes, ncclUint8, comm, s));
    });
  }
  // Uneven: each rank broadcasts its block into place.
  const std::vector<NcclBlock> blocks = NonEmptyBlocks(counts);
  return comm_.Run("ncclBroadcast of each rank's block (allgather)", [&](ncclComm_t comm) {
    return Grouped(comm, [&] {
      for (const NcclBlock& block : blocks) {
        char* data = At(buffer, block.offset, dtype);
        ACCORD_RETURN_IF_ERROR(ACCORD_NCCL_CHECK_ISSUE(
            comm, ncclBroadcast(data, data, NcclBytes(block.count, dtype), ncclUint8, block.rank, comm, s)));
      }
      return Status::OK();
    });
  });
}

Status NcclCollectives::Broadcast(void* buffer, int64_t count, DataType dtype, int root, DeviceStream& stream) {
  ACCORD_RETURN_IF_ERROR(CheckCount(count, "broadcast"));
  if (root < 0 || root >= comm_.size()) {
    return Status::InvalidArgument("broadcast: root " + std::to_string(root) + " is not a rank of a set of " +
                                   std::to_string(comm_.size()));
  }
  ACCORD_RETURN_IF_ERROR(CheckStream(stream, "broadcast"));
  if (count == 0) return Status::OK();
  const size_t bytes = NcclBytes(count, dtype);
  const cudaStream_t s = Native(stream);
  return comm_.Run("ncclBroadcast", [&](ncclComm_t comm) {
    return ACCORD_NCCL_CHECK_ISSUE(comm, ncclBroadcast(buffer, buffer, bytes, ncclUint8, root, comm, s));
  });
}

Status NcclCollectives::Alltoallv(const void* send, const std::vector<int64_t>& send_counts, void* recv,
                                  const std::vector<int64_t>& recv_counts, int64_t largest_total, DataType dtype,
                                  DeviceStream& stream) {
  ACCORD_RETURN_IF_ERROR(CheckCounts(send_counts, comm_.size(), "alltoall (send)"));
  ACCORD_RETURN_IF_ERROR(CheckCounts(recv_counts, comm_.size(), "alltoall (receive)"));
  ACCORD_RETURN_IF_ERROR(CheckStream(stream, "alltoall"));
  const std::vector<NcclBlock> sends = NonEmptyBlocks(send_counts);
  const std::vector<NcclBlock> receives = NonEmptyBlocks(recv_counts);
  if (sends.empty() && receives.empty()) return Status::OK();
  const cudaStream_t s = Native(stream);
  return comm_.Run("ncclSend/ncclRecv (alltoall)", [&](ncclComm_t comm) {
    return Grouped(comm, [&] {
      for (const NcclBlock& block : receives) {
        ACCORD_RETURN_IF_ERROR(ACCORD_NCCL_CHECK_ISSUE(
            comm,
            ncclRecv(At(recv, block.offset, dtype), NcclBytes(block.count, dtype), ncclUint8, block.rank, comm, s)));
      }
      for (const NcclBlock& block : sends) {
        ACCORD_RETURN_IF_ERROR(ACCORD_NCCL_CHECK_ISSUE(
            comm,
            ncclSend(At(send, block.offset, dtype), NcclBytes(block.count, dtype), ncclUint8, block.rank, comm, s)));
      }
      return Status::OK();
    });
  });
}

Status NcclCollectives::ReduceScatter(const void* send, void* recv, const std::vector<int64_t>& recv_counts,
                                      DataType dtype, ReduceOp op, DeviceStream& stream) {
  ACCORD_RETURN_IF_ERROR(CheckCounts(recv_counts, comm_.size(), "reducescatter"));
  ACCORD_ASSIGN_OR_RETURN(const std::optional<NcclReduction> reduction, ReductionFor(dtype, op, "reducescatter"));
  if (!reduction) return fallback_->ReduceScatter(send, recv, recv_counts, dtype, op, stream);
  ACCORD_RETURN_IF_ERROR(CheckStream(stream, "reducescatter"));
  const NcclReduction r = *reduction;
  const cudaStream_t s = Native(stream);
  if (const std::optional<int64_t> equal = EqualCount(recv_counts)) {
    if (*equal == 0) return Status::OK();
    const size_t count = static_cast<size_t>(*equal);
    return comm_.Run("ncclReduceScatter", [&](ncclComm_t comm) {
      return ACCORD_NCCL_CHECK_ISSUE(comm, ncclReduceScatter(send, recv, count, r.type, r.op, comm, s));
    });
  }
  // Uneven: each rank's block is reduced to it. NCCL ignores the receive
  // buffer of the ranks that are not the root.
  const std::vector<NcclBlock> blocks = NonEmptyBlocks(recv_counts);
  const int rank = comm_.rank();
  return comm_.Run("ncclReduce of each rank's block (reducescatter)", [&](ncclComm_t comm) {
    return Grouped(comm, [&] {
      for (const NcclBlock& block : blocks) {
        void* out = block.rank == rank ? recv : nullptr;
        ACCORD_RETURN_IF_ERROR(ACCORD_NCCL_CHECK_ISSUE(
            comm, ncclReduce(At(send, block.offset, dtype), out, static_cast<size_t>(block.count), r.type, r.op,
                             block.rank, comm, s)));
      }
      return Status::OK();
    });
  });
}

void NcclCollectives::Abort() {
  comm_.Abort();
  if (fallback_) fallback_->Abort();
}

Result<std::string> NcclUniqueIdBytes() {
  ncclUniqueId id;
  ACCORD_RETURN_IF_ERROR(ACCORD_NCCL_CHECK(ncclGetUniqueId(&id)));
  return std::string(id.internal, sizeof(id.internal));
}

Result<std::unique_ptr<DeviceCollectives>> MakeNcclCollectives(NcclSetup setup) {
  if (setup.unique_id.size() != NCCL_UNIQUE_ID_BYTES) {
    return Status::InvalidArgument("NCCL unique id of " + std::to_string(setup.unique_id.size()) +
                                   " bytes; NCCL's have " + std::to_string(NCCL_UNIQUE_ID_BYTES) +
                                   " (it must come from NcclUniqueIdBytes)");
  }
  ncclUniqueId id;
  std::memcpy(id.internal, setup.unique_id.data(), NCCL_UNIQUE_ID_BYTES);
  ACCORD_ASSIGN_OR_RETURN(NcclComm comm,
                          NcclComm::Create(id, setup.set_rank, setup.set_size, setup.ordinal, setup.timeout_seconds));
  return std::unique_ptr<DeviceCollectives>(new NcclCollectives(std::move(comm), std::move(setup.fallback)));
}

std::string NcclVersion() {
  int code = 0;
  if (ncclGetVersion(&code) != ncclSuccess || code <= 0) code = NCCL_VERSION_CODE;
  return NcclVersionString(code);
}

}  // namespace accord
