// StagedCollectives: collectives on device memory through MPI, staged in
// page-locked host memory (DeviceCollectives, backends/device_collectives.h).
//
// Each call: enqueue the copy of this rank's data to host memory on the
// communication stream, wait (on the host, at most the collective timeout)
// until it has run, make the MPI call through the process set's CPU
// backend, and enqueue the copy of the result back; the call returns with
// that copy queued. Used where NCCL is not built or cannot run (ranks that
// share a GPU), with ACCORD_GPU_OPERATIONS=mpi, and for what NCCL cannot
// reduce (int16).
//
// Every host access to the staging buffers happens after a wait that
// covers the copies queued before it, so one pair of buffers serves every
// call. Coordinator thread only, except Abort().
#pragma once

#include <atomic>
#include <memory>

#include "backends/backend.h"
#include "backends/device_collectives.h"
#include "device/device.h"

namespace accord {

class StagedCollectives : public DeviceCollectives {
 public:
  // `mpi` is the process set's CPU backend and must outlive this object;
  // `timeout_seconds` bounds each wait for the device (0: no bound).
  StagedCollectives(Backend* mpi, DeviceApi* api, int ordinal, int rank, double timeout_seconds);
  ~StagedCollectives() override;
  StagedCollectives(const StagedCollectives&) = delete;
  StagedCollectives& operator=(const StagedCollectives&) = delete;

  const char* name() const override { return "mpi (host-staged)"; }
  Status Allreduce(const void* send, void* recv, int64_t count, DataType dtype, ReduceOp op,
                   DeviceStream& stream) override;
  Status Allgatherv(void* buffer, const std::vector<int64_t>& counts, DataType dtype, DeviceStream& stream) override;
  Status Broadcast(void* buffer, int64_t count, DataType dtype, int root, DeviceStream& stream) override;
  Status Alltoallv(const void* send, const std::vector<int64_t>& send_counts, void* recv,
                   const std::vector<int64_t>& recv_counts, int64_t largest_total, DataType dtype,
                   DeviceStream& stream) override;
  Status ReduceScatter(const void* send, void* recv, const std::vector<int64_t>& recv_counts, DataType dtype,
                       ReduceOp op, DeviceStream& stream) override;
  // Makes a wait for the device in progress, and every later call, fail.
  // An MPI call already running cannot be interrupted.
  void Abort() override { aborted_ = true; }

 private:
  // A page-locked host buffer of at least `bytes` (0 or 1: which of the
  // two); the contents are not kept when it grows.
  Result<char*> Staging(int which, size_t bytes, DeviceStream& stream);
  // Waits until the work enqueued on `stream` so far has run.
  Status Drain(DeviceStream& stream);

  Backend* mpi_;
  DeviceApi* api_;
  int ordinal_;
  int rank_;
  double timeout_seconds_;
  std::unique_ptr<DeviceEvent> drained_;
  char* staging_[2] = {nullptr, nullptr};
  size_t capacity_[2] = {0, 0};
  std::atomic<bool> aborted_{false};
};

}  // namespace accord
