// NcclCollectives: DeviceCollectives (backends/device_collectives.h) over
// one non-blocking NCCL communicator of a process set.
//
// Each call enqueues its NCCL work on the caller's stream and returns once
// NCCL has accepted it (NcclComm::Run): the host never waits for the GPU,
// only, at most the collective timeout, for NCCL to finish enqueueing, so
// the caller may enqueue its next kernel right after. How each collective
// maps onto NCCL (data types, uneven counts) is in nccl_mapping.h; the
// reductions NCCL cannot do (int16) go to the fallback given at creation.
//
// Threads: the coordinator makes every call, in the same order on every
// rank of the set; Abort() may come from any thread (the watchdog) while
// the object lives.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backends/device_collectives.h"
#include "backends/nccl/nccl_comm.h"
#include "backends/nccl/nccl_mapping.h"

namespace accord {

// The size of NCCL's unique id (NCCL_UNIQUE_ID_BYTES), for code that sends
// it between ranks without NCCL's headers' types.
inline constexpr size_t kNcclUniqueIdBytes = NCCL_UNIQUE_ID_BYTES;

// What MakeNcclCollectives needs. Every rank of the set calls it with the
// same unique id, at the same point of the agreed execution order.
struct NcclSetup {
  int set_rank = 0;
  int set_size = 1;
  int ordinal = 0;         // this rank's device
  std::string unique_id;   // from NcclUniqueIdBytes on one rank
  double timeout_seconds;  // bounds the communicator's initialisation and each wait for NCCL
  // Runs what NCCL cannot reduce (int16: NCCL has no 16-bit integers).
  std::unique_ptr<DeviceCollectives> fallback;
};

class NcclCollectives : public DeviceCollectives {
 public:
  // `fallback` may be null: reductions NCCL cannot do then fail with
  // kUnimplemented.
  NcclCollectives(NcclComm comm, std::unique_ptr<DeviceCollectives> fallback);

  const char* name() const override { return "nccl"; }
  // Floating types with NCCL 2.10 or later (ncclAvg; NcclAverages).
  bool AveragesInCollective(DataType dtype) const override;
  Status Allreduce(const void* send, void* recv, int64_t count, DataType dtype, ReduceOp op,
                   DeviceStream& stream) override;
  Status Allgatherv(void* buffer, const std::vector<int64_t>& counts, DataType dtype, DeviceStream& stream) override;
  Status Broadcast(void* buffer, int64_t count, DataType dtype, int root, DeviceStream& stream) override;
  // `largest_total` is not needed: NCCL counts are size_t, so nothing is
  // split.
  Status Alltoallv(const void* send, const std::vector<int64_t>& send_counts, void* recv,
                   const std::vector<int64_t>& recv_counts, int64_t largest_total, DataType dtype,
                   DeviceStream& stream) override;
  Status ReduceScatter(const void* send, void* recv, const std::vector<int64_t>& recv_counts, DataType dtype,
                       ReduceOp op, DeviceStream& stream) override;
  // Aborts the communicator and the fallback.
  void Abort() override;

 private:
  // kInvalidArgument unless `stream` is on the communicator's device.
  Status CheckStream(const DeviceStream& stream, const char* what) const;
  // The NCCL type and op for a reduction of `dtype` with `op`; nullopt when
  // NCCL cannot run it and the fallback does; an error naming `what` and
  // the dtype when neither can.
  Result<std::optional<NcclReduction>> ReductionFor(DataType dtype, ReduceOp op, const char* what) const;

  NcclComm comm_;
  std::unique_ptr<DeviceCollectives> fallback_;
  int version_code_;  // of the NCCL loaded (ncclGetVersion), 0 if it would not say
};

// The functions backends/device_selection.cc calls in builds with NCCL.

// A new NCCL unique id (ncclGetUniqueId) as its NCCL_UNIQUE_ID_BYTES raw
// bytes. Needs no GPU.
Result<std::string> NcclUniqueIdBytes();
// Creates the communicator of `setup` on
// setup.ordinal; kInvalidArgument if the id does not have
// NCCL_UNIQUE_ID_BYTES bytes or the rank is not in the set.
Result<std::unique_ptr<DeviceCollectives>> MakeNcclCollectives(NcclSetup setup);
// "NCCL 2.28.9": the library loaded at run time (ncclGetVersion, which
// needs no GPU), or the headers built against if that fails.
std::string NcclVersion();

}  // namespace accord
