// How an allreduce of one tensor larger than the staging window runs on
// one host: in its own memory in chunks of kLoneChunkWindows windows, or
// staged through the fusion buffer window by window (ops/allreduce_op.cc).
// Which is faster is a property of the machine: on one VM measured the
// in-place calls were 1.2-1.5x faster from 16 MiB, on another the staged
// copies were (docs/decisions.md, "A lone allreduce in its own memory").
// ACCORD_LONE_ALLREDUCE picks one, or (auto, the default) Init times both
// once on the global process set and every rank takes the same answer.
#pragma once

#include <cstdint>

#include "accord/status.h"
#include "backends/backend.h"
#include "fusion/fusion_buffer.h"

namespace accord {

// A lone tensor's chunk is this many staging windows.
inline constexpr int64_t kLoneChunkWindows = 8;

// The probe times an allreduce of this much float32 at most (of one chunk
// where that is smaller).
inline constexpr int64_t kLoneProbeMaxBytes = int64_t{16} << 20;

struct LoneProbe {
  // The slowest rank's best time of each way, the same on every rank.
  double in_place_seconds = 0;
  double staged_seconds = 0;
  bool in_place() const { return in_place_seconds <= staged_seconds; }
};

// Collective over the backend's ranks: times an in-place allreduce of one
// chunk of float32 (a chunk of the window `window_bytes`, at most
// kLoneProbeMaxBytes) against the same staged through `buffer` in windows,
// best of three each after one untimed call of each. `window_bytes` > 0.
Result<LoneProbe> ProbeLoneAllreduce(Backend& backend, FusionBuffer& buffer, int64_t window_bytes);

}  // namespace accord
