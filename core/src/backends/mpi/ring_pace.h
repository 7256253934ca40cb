// RingPace: how many chunks a ring across hosts sends ahead of those it has
// received (RingAllreduce's window), from the rate its large allreduces
// have moved data at.
//
// A chunk sent ahead waits in the link's queue until the link carries it.
// The more of them, the longer the rank that started a collective first
// keeps the link to itself, and the later the other direction finishes: on
// the test bed at 1 Gbit/s, 1 MiB ahead (8.8 ms of that link) had the two
// ranks of a ring finish each collective 1.5-2.2 ms apart at the median,
// 240 KiB ahead 0.5-0.6 ms; the rank that finished first then waits for the
// other in the next collective's negotiation. Where the link is fast, 1 MiB
// is under a millisecond of it, and fewer chunks would let it run dry while
// a rank waits for a core (at 10 Gbit/s, 2 hosts x 2 ranks on 2 cores, 240
// KiB ahead cost a third of the bus bandwidth). So the window is the bytes
// the link carries in kRingWindowTime at the rate seen, between
// kRingFewestWindowBytes and kRingWindowBytes (docs/decisions.md, "The
// ring's window follows the link").
//
// Each rank keeps its own pace: ranks may run different windows in one ring.
// Coordinator thread only.
#pragma once

#include <chrono>
#include <cstdint>

namespace accord {

// The link time a ring keeps in flight, and the fewest bytes it sends ahead.
inline constexpr std::chrono::microseconds kRingWindowTime{2000};
inline constexpr int64_t kRingFewestWindowBytes = int64_t{240} << 10;
// Allreduces that send fewer bytes than this are not timed: their time is
// mostly the ranks' start apart and the messages' latency, not the link.
inline constexpr int64_t kRingPacedBytes = int64_t{2} << 20;

class RingPace {
 public:
  // Records an allreduce in which this rank sent `bytes_sent` in `elapsed`.
  // A faster one is believed at once, a slower one a quarter at a time: a
  // collective is slowed by the other ranks' late start and by work on the
  // same cores, never sped up.
  void Record(int64_t bytes_sent, std::chrono::nanoseconds elapsed);
  // Chunks of `chunk_bytes` (> 0) to send ahead: kRingWindowBytes' worth
  // until a rate has been seen.
  int WindowChunks(int64_t chunk_bytes) const;
  // Bytes per second; 0 until an allreduce has been timed.
  double rate() const { return rate_; }

 private:
  double rate_ = 0;
};

}  // namespace accord
