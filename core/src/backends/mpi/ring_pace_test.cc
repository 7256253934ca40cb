// Tests for RingPace, the window of a ring across hosts: 1 MiB of chunks
// before any allreduce is timed; then the bytes the link carries in 2 ms at
// the rate seen, 240 KiB at the fewest and 1 MiB at the most; small
// allreduces are not timed; a faster allreduce is believed at once and a
// slower one a quarter at a time.
#include "backends/mpi/ring_pace.h"

#include <catch2/catch.hpp>

#include <chrono>

#include "backends/mpi/ring_allreduce.h"

namespace accord {
namespace {

using std::chrono::milliseconds;

constexpr int64_t kMiB = int64_t{1} << 20;

// The bytes an allreduce moves in `ms` at `mb_per_s` (10^6 bytes/s).
int64_t BytesAt(double mb_per_s, int ms) { return static_cast<int64_t>(mb_per_s * 1e3 * ms); }

TEST_CASE("RingPace sends 1 MiB ahead until an allreduce is timed", "[ring_pace]") {
  RingPace pace;
  CHECK(pace.rate() == 0);
  CHECK(pace.WindowChunks(kRingChunkBytes) == 17);  // 1 MiB of 60 KiB chunks
  CHECK(pace.WindowChunks(4096) == 256);
  CHECK(pace.WindowChunks(2 * kMiB) == 1);  // a chunk larger than the window: one
}

TEST_CASE("RingPace keeps 2 ms of the link's rate in flight, between 240 KiB and 1 MiB", "[ring_pace]") {
  SECTION("1 Gbit/s: 119 MB/s is 238 KB in 2 ms, 4 chunks") {
    RingPace pace;
    pace.Record(BytesAt(119, 100), milliseconds(100));
    CHECK(pace.rate() == Approx(119e6));
    CHECK(pace.WindowChunks(kRingChunkBytes) == 4);
  }
  SECTION("400 MB/s: 800 KB, 14 chunks (13.02, rounded up)") {
    RingPace pace;
    pace.Record(BytesAt(400, 50), milliseconds(50));
    CHECK(pace.WindowChunks(kRingChunkBytes) == 14);
  }
  SECTION("10 Gbit/s and shared memory: 1 MiB at the most") {
    RingPace pace;
    pace.Record(BytesAt(1150, 20), milliseconds(20));
    CHECK(pace.WindowChunks(kRingChunkBytes) == 17);
    pace.Record(BytesAt(8000, 10), milliseconds(10));
    CHECK(pace.WindowChunks(kRingChunkBytes) == 17);
  }
  SECTION("100 Mbit/s: 240 KiB at the fewest") {
    RingPace pace;
    pace.Record(BytesAt(12, 1000), milliseconds(1000));
    CHECK(pace.WindowChunks(kRingChunkBytes) == 4);
    CHECK(pace.WindowChunks(4096) == 60);  // 240 KiB of 4 KiB chunks
  }
}

TEST_CASE("RingPace times only allreduces that send 2 MiB or more", "[ring_pace]") {
  RingPace pace;
  pace.Record(kRingPacedBytes - 1, milliseconds(100));  // 21 MB/s, but too small to say
  pace.Record(kRingPacedBytes, std::chrono::nanoseconds(0));
  CHECK(pace.rate() == 0);
  CHECK(pace.WindowChunks(kRingChunkBytes) == 17);
  pace.Record(kRingPacedBytes, milliseconds(20));
  CHECK(pace.rate() == Approx(kRingPacedBytes / 0.020));
}

TEST_CASE("RingPace believes a faster allreduce at once and a slower one a quarter at a time", "[ring_pace]") {
  RingPace pace;
  pace.Record(BytesAt(100, 100), milliseconds(100));
  pace.Record(BytesAt(1000, 20), milliseconds(20));
  CHECK(pace.rate() == Approx(1000e6));
  CHECK(pace.WindowChunks(kRingChunkBytes) == 17);
  // One collective slowed to 200 MB/s (a late peer, a busy core): a quarter of the way.
  pace.Record(BytesAt(200, 50), milliseconds(50));
  CHECK(pace.rate() == Approx(800e6));
  CHECK(pace.WindowChunks(kRingChunkBytes) == 17);
  // A link that really is slow takes several collectives to be believed.
  for (int i = 0; i < 30; ++i) pace.Record(BytesAt(119, 100), milliseconds(100));
  CHECK(pace.rate() == Approx(119e6).epsilon(0.01));
  CHECK(pace.WindowChunks(kRingChunkBytes) == 4);
}

}  // namespace
}  // namespace accord
