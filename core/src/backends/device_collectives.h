// DeviceCollectives: the data plane for CUDA tensors. One collective call on
// device memory, enqueued on the communication stream of the device; the
// GPU counterpart of Backend (backends/backend.h), with the same layouts.
//
// Two implementations:
//   - NCCL (backends/nccl/): the call enqueues the NCCL collective on the
//     stream and returns; the host never waits for the device.
//   - Host-staged MPI (backends/staged/): the call copies the data to
//     page-locked host memory on the stream, waits for that copy (at most
//     the collective timeout), runs the MPI call, and enqueues the copy back.
//     For builds or jobs without NCCL, and ranks that share a GPU.
//
// Counts are in elements of `dtype`. ReduceOp::kAverage is passed to
// Allreduce only where AveragesInCollective(dtype) says so; otherwise the
// ops layer reduces with Sum and divides while unpacking, as on the CPU
// path. Every rank of the process set makes the same calls in the same
// order (negotiation guarantees it). Coordinator thread only, except
// Abort().
#pragma once

#include <cstdint>
#include <vector>

#include "accord/accord.h"
#include "accord/status.h"
#include "accord/tensor.h"
#include "device/device.h"

namespace accord {

class DeviceCollectives {
 public:
  virtual ~DeviceCollectives() = default;
  // "nccl" or "mpi (host-staged)", for logs and error messages.
  virtual const char* name() const = 0;

  // Whether Allreduce averages `dtype` itself (ReduceOp::kAverage: NCCL's
  // ncclAvg), instead of the ops layer dividing a Sum. The same on every
  // rank of the set (the same library everywhere).
  virtual bool AveragesInCollective(DataType dtype) const {
    (void)dtype;
    return false;
  }

  // Reduces `count` elements of `send` across the ranks into `recv`; send
  // may be recv (in place).
  virtual Status Allreduce(const void* send, void* recv, int64_t count, DataType dtype, ReduceOp op,
                           DeviceStream& stream) = 0;
  // In place: rank r's block of counts[r] elements starts at the sum of the
  // counts before it, and this rank's block is already in place.
  virtual Status Allgatherv(void* buffer, const std::vector<int64_t>& counts, DataType dtype, DeviceStream& stream) = 0;
  virtual Status Broadcast(void* buffer, int64_t count, DataType dtype, int root, DeviceStream& stream) = 0;
  // Sends send_counts[j] elements to rank j (consecutive blocks of `send`),
  // receives recv_counts[r] from rank r (consecutive blocks of `recv`).
  // `largest_total` as in Backend::Alltoallv.
  virtual Status Alltoallv(const void* send, const std::vector<int64_t>& send_counts, void* recv,
                           const std::vector<int64_t>& recv_counts, int64_t largest_total, DataType dtype,
                           DeviceStream& stream) = 0;
  // Reduces `send` (the sum of recv_counts elements, rank r's block after
  // the blocks of the ranks before it) across ranks; this rank receives its
  // block (recv_counts[rank] elements) into `recv`.
  virtual Status ReduceScatter(const void* send, void* recv, const std::vector<int64_t>& recv_counts, DataType dtype,
                               ReduceOp op, DeviceStream& stream) = 0;

  // Any thread: makes the collectives enqueued so far, and every later
  // call, end without waiting for the other ranks (ncclCommAbort). The
  // watchdog's last resort for a collective that never completes; the
  // object is unusable afterwards.
  virtual void Abort() = 0;
};

}  // namespace accord
