// The ops layer: executes one fused batch of agreed responses on this rank.
//
// For each collective: pack this rank's inputs into the fusion buffer
// (applying the prescale factor in the same pass), make one backend call,
// and unpack into the outputs (applying the postscale factor, and the
// division of an Average, in the same pass). Allreduce, broadcast and
// allgather do so a window at a time (ops/staging.h; a lone allreduce may
// run in its own memory instead, ops/lone_allreduce.h); alltoall and
// reducescatter run a batch of one tensor in its own memory; an Adasum
// allreduce runs whole (ops/adasum.h). Where each tensor's elements go in
// a fused allgather, reducescatter or alltoall is ops/layout.h's, shared
// with the device ops (ops/device_ops.h). Coordinator thread only.
#pragma once

#include <chrono>
#include <vector>

#include "backends/backend.h"
#include "device/device.h"
#include "fusion/fusion_buffer.h"
#include "negotiation/message.h"
#include "runtime/tensor_queue.h"

namespace accord {

// When a batch of more than one tensor finished packing into the fusion
// buffer and when its backend call returned, for the timeline's PACK,
// COLLECTIVE and UNPACK spans. Left at the epoch (never marked) by a batch
// of one tensor, which has no separate pack or unpack.
struct PhaseTimes {
  std::chrono::steady_clock::time_point packed{};
  std::chrono::steady_clock::time_point exchanged{};
};

struct OpContext {
  Backend* backend;
  FusionBuffer* buffer;
  int rank;  // within the process set
  int size;
  // Set by the coordinator only while a timeline is active; otherwise the
  // marks below cost one predictable branch.
  PhaseTimes* phases = nullptr;
  // The process set's staging window (Config::StagingWindowBytes):
  // allreduces, broadcasts and allgathers run through the fusion buffer in
  // windows of this many bytes (ops/staging.h); 0: in place (one tensor) or
  // in one call.
  int64_t staging_window_bytes = 0;
  // Whether an allreduce of one tensor larger than the window runs in its
  // own memory in chunks (ops/lone_allreduce.h) instead of staged.
  bool lone_in_place = false;
};

// Called by the fused paths of the CPU and the device ops with their
// context's `phases`: the inputs are in the fusion buffer (MarkPacked), the
// collective call has returned (MarkExchanged).
inline void MarkPacked(PhaseTimes* phases) {
  if (phases) phases->packed = std::chrono::steady_clock::now();
}
inline void MarkExchanged(PhaseTimes* phases) {
  if (phases) phases->exchanged = std::chrono::steady_clock::now();
}

// One tensor of a batch: the agreed response, and this rank's entry, or
// nullptr on a rank that has joined (it contributes zeros to allreduces).
struct OpItem {
  const Response* response;
  TensorEntry* entry;
};

// Runs the batch (all items share a fusion key). Outputs are recorded in the
// entries' handles; the caller completes the handles with the result.
Status ExecuteBatch(const OpContext& ctx, const std::vector<OpItem>& items);

Status RunAllreduce(const OpContext& ctx, const std::vector<OpItem>& items);
// Allreduce with ReduceOp::kAdasum (ops/adasum_op.cc).
Status RunAdasum(const OpContext& ctx, const std::vector<OpItem>& items);
Status RunAllgather(const OpContext& ctx, const std::vector<OpItem>& items);
Status RunBroadcast(const OpContext& ctx, const std::vector<OpItem>& items);
Status RunAlltoall(const OpContext& ctx, const OpItem& item);  // ops/alltoall_op.cc
Status RunReducescatter(const OpContext& ctx, const std::vector<OpItem>& items);

// dst = src * factor / divisor. Floating types multiply by factor/divisor;
// integer types compute in double and round toward zero, so an integer
// Average is the truncated exact quotient.
void ScaleDivideCopy(const void* src, void* dst, int64_t n, DataType dtype, double factor, int divisor);
// The op the backend reduces with, and the divisor applied afterwards.
ReduceOp BackendOp(ReduceOp op);
int AverageDivisor(ReduceOp op, int size);
// Allocates an output through the item's entry's allocator and checks what
// came back. If that fails, records the failure in entry->error and returns
// scratch memory, so this rank still takes part in the collective.
// Outputs on a CUDA device get their scratch memory from `device_api`.
TensorView AllocateOutput(const OpItem& item, const Shape& shape, DeviceApi* device_api = nullptr);
// Memory from the fusion buffer, or kInternal if it cannot grow.
Result<char*> BufferFor(const OpContext& ctx, size_t bytes);

}  // namespace accord
