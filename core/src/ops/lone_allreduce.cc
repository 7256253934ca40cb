#include "ops/lone_allreduce.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

namespace accord {

namespace {

using Clock = std::chrono::steady_clock;

// Every rank starts the timed call together: a one-element allreduce.
Status Align(Backend& backend) {
  float one = 1;
  return backend.Allreduce(&one, 1, DataType::kFloat32, ReduceOp::kSum);
}

}  // namespace

Result<LoneProbe> ProbeLoneAllreduce(Backend& backend, FusionBuffer& buffer, int64_t window_bytes) {
  if (window_bytes <= 0) return Status::InvalidArgument("the lone allreduce probe needs a staging window");
  const int64_t element = sizeof(float);
  const int64_t probe_bytes = std::min(kLoneChunkWindows * window_bytes, kLoneProbeMaxBytes);
  const int64_t n = std::max<int64_t>(1, probe_bytes / element);
  const int64_t window = std::max<int64_t>(1, window_bytes / element);
  std::vector<float> data(static_cast<size_t>(n));
  void* staging = buffer.Get(static_cast<size_t>(std::min(n, window) * element));
  if (!staging) return Status::Internal("cannot grow the fusion buffer for the lone allreduce probe");
  float* const stage = static_cast<float*>(staging);

  // Each call sums fresh ones, written just before (as a gradient is).
  auto in_place = [&]() { return backend.Allreduce(data.data(), n, DataType::kFloat32, ReduceOp::kSum); };
  auto staged = [&]() -> Status {
    for (int64_t at = 0; at < n; at += window) {
      const int64_t count = std::min(window, n - at);
      std::memcpy(stage, data.data() + at, static_cast<size_t>(count * element));
      ACCORD_RETURN_IF_ERROR(backend.Allreduce(stage, count, DataType::kFloat32, ReduceOp::kSum));
      std::memcpy(data.data() + at, stage, static_cast<size_t>(count * element));
    }
    return Status::OK();
  };
  double best[2] = {1e30, 1e30};
  for (int round = 0; round < 4; ++round) {
    for (int way = 0; way < 2; ++way) {
      std::fill(data.begin(), data.end(), 1.0f);
      ACCORD_RETURN_IF_ERROR(Align(backend));
      const auto start = Clock::now();
      ACCORD_RETURN_IF_ERROR(way == 0 ? in_place() : staged());
      const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
      if (round > 0) best[way] = std::min(best[way], seconds);  // round 0 warms up
    }
  }
  // The slowest rank's figures, so that every rank decides alike.
  double slowest[2] = {best[0], best[1]};
  ACCORD_RETURN_IF_ERROR(backend.Allreduce(slowest, 2, DataType::kFloat64, ReduceOp::kMax));
  LoneProbe probe;
  probe.in_place_seconds = slowest[0];
  probe.staged_seconds = slowest[1];
  return probe;
}

}  // namespace accord
