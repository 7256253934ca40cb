// Fusion planning: which ready responses share one collective call.
//
// Responses with the same fusion key (collective, dtype, reduce op, scale
// factors, device type, broadcast root) are packed, in the order negotiation
// produced them, into batches of at most `threshold_bytes` of fusion-buffer
// space; a tensor of kRunAloneBytes or more runs alone, except an allreduce
// of CPU tensors where the backend reduces a batch in place (large_in_place).
// A batch's position is that of its first member, so the plan is the same
// on every rank. Alltoall, barrier, join, process-set changes and errors
// always run alone. Pure function; no threads involved.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "negotiation/message.h"

namespace accord {

struct FusedBatch {
  std::vector<size_t> members;  // indices into the ready list, in order
};

// Bytes the response occupies in the fusion buffer (allgather: all ranks' rows).
int64_t FusionBytes(const Response& response);
bool IsFusible(const Response& response);
// True if a and b may share a batch.
bool SameFusionKey(const Response& a, const Response& b);

// A tensor of at least this many bytes runs alone even under the threshold:
// packing it would cost two copies of its bytes (about 100 µs per MiB on the
// machines we measure on), more than the fixed cost of a collective of its
// own, which can work on it in place. (Allreduce, broadcast and allgather
// stage every tensor through the fusion buffer window by window unless
// ACCORD_STAGING_WINDOW_BYTES is 0; alone or fused, it costs the same.)
inline constexpr int64_t kRunAloneBytes = int64_t{1} << 20;

// True if `r` runs alone whatever the threshold. `large_in_place`: the
// process set reduces a fused allreduce of CPU tensors in the tensors' own
// memory (Backend::FusesLargeInPlace, with no staging window), so a large
// one (not Adasum) may share a batch: fusing it costs no copies, and on a
// network each collective of its own costs more than its latency (the ring's
// start and end, and the ranks meeting again).
bool RunsAlone(const Response& r, bool large_in_place);

std::vector<FusedBatch> PlanFusion(const std::vector<Response>& ready, int64_t threshold_bytes,
                                   bool large_in_place = false);

}  // namespace accord
