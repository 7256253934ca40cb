// The ops layer for CUDA tensors: enqueues one fused batch of agreed
// responses on a device's communication stream.
//
// The counterpart of collective_ops.h. For each collective: one launch of
// the batched pack kernel (device/copy_plan.h) packs this rank's inputs
// into the device fusion buffer with the prescale factor applied, one
// DeviceCollectives call runs the collective, and one launch of the unpack
// kernel writes the outputs with the postscale factor (and an Average's
// division) applied. A batch of one tensor skips the packing and works in
// the tensor's own memory, with a scaling pass only where a factor asks for
// one. Nothing here waits for the device: the caller records the batch's
// done event after ExecuteDeviceBatch returns. Coordinator thread only.
#pragma once

#include <functional>
#include <vector>

#include "backends/device_collectives.h"
#include "device/device.h"
#include "fusion/device_fusion_buffer.h"
#include "ops/collective_ops.h"

namespace accord {

struct DeviceOpContext {
  DeviceCollectives* collectives;
  DeviceStream* stream;  // the device's communication stream
  DeviceFusionBuffer* buffer;
  DeviceApi* api;  // scratch memory for an output whose allocator failed
  int rank;        // within the process set
  int size;
  PhaseTimes* phases = nullptr;  // as in OpContext
  // Called once the outputs of the batch have come from the entries'
  // allocators, before anything is written to them: an adapter allocates on
  // the producer's stream, so the communication stream must wait for that
  // stream again.
  std::function<Status(const std::vector<OpItem>&)> outputs_allocated;
};

// Runs the batch (all items share a fusion key; CUDA tensors). Outputs are
// recorded in the entries' handles; the caller completes the handles once
// the device has run the work.
Status ExecuteDeviceBatch(const DeviceOpContext& ctx, const std::vector<OpItem>& items);

}  // namespace accord
