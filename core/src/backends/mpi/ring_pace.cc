#include "backends/mpi/ring_pace.h"

#include <algorithm>
#include <cmath>

#include "backends/mpi/ring_allreduce.h"

namespace accord {

void RingPace::Record(int64_t bytes_sent, std::chrono::nanoseconds elapsed) {
  if (bytes_sent < kRingPacedBytes || elapsed.count() <= 0) return;
  const double seen = static_cast<double>(bytes_sent) * 1e9 / static_cast<double>(elapsed.count());
  rate_ = seen >= rate_ ? seen : rate_ + (seen - rate_) / 4;
}

int RingPace::WindowChunks(int64_t chunk_bytes) const {
  const int64_t most = RingWindowChunks(chunk_bytes);
  if (rate_ <= 0) return static_cast<int>(most);
  const int64_t fewest = std::clamp<int64_t>(kRingFewestWindowBytes / chunk_bytes, 1, most);
  const double wanted =
      std::ceil(rate_ * std::chrono::duration<double>(kRingWindowTime).count() / static_cast<double>(chunk_bytes));
  return static_cast<int>(std::clamp(wanted, static_cast<double>(fewest), static_cast<double>(most)));
}

}  // namespace accord
