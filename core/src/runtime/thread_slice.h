// ThreadSlice: the scheduler time slice of the thread that made it (the
// coordinator): short while a negotiation round waits for the other ranks,
// the kernel's own otherwise (ACCORD_COORDINATOR_SLICE_US).
//
// Linux's EEVDF scheduler (6.6 on) lets a thread that wakes on a core busy
// with another run only when that one's slice ends, unless the woken thread
// asks for a shorter slice (sched_attr.sched_runtime for SCHED_OTHER and
// SCHED_BATCH threads, honoured from 6.12, no privilege needed). A round
// wakes the coordinator for every test and runs briefly: with the kernel's
// slice it waited up to ~3.5 ms per wake-up behind the training threads on
// the test bed's 2 cores, and a step's first rounds, each a wake-up on every
// rank, kept a 1 Gbit/s link idle ~8 ms a step. Everything else keeps the
// kernel's slice: idle waits and collectives on CPU tensors (a ring of 60
// KiB messages at 10 Gbit/s wakes the coordinator hundreds of times a step)
// would preempt the training threads far more often; with the short slice
// throughout, W4 lost 3-6 % at 10 Gbit/s, where the cores are the limit
// (docs/benchmarks.md, "The coordinator's time slice, and a one-step AND").
// Older kernels ignore the field; where the call is refused (a seccomp
// filter) or the thread has a real-time or idle policy, nothing changes.
// Only the thread that made it may call its methods.
#pragma once

#include <cstdint>

namespace accord {

class ThreadSlice {
 public:
  // Starts with the short slice. slice_us <= 0: the kernel's slice
  // throughout (every method a no-op).
  explicit ThreadSlice(int slice_us);
  ~ThreadSlice();  // restores the kernel's slice
  ThreadSlice(const ThreadSlice&) = delete;
  ThreadSlice& operator=(const ThreadSlice&) = delete;

  // Whether the thread asked for the short slice and was not refused.
  bool enabled() const { return enabled_; }
  void UseShort() { Use(true); }
  void UseKernels() { Use(false); }

 private:
  void Use(bool short_slice);

  bool enabled_ = false;
  bool is_short_ = false;
  uint32_t policy_ = 0;
  int32_t nice_ = 0;
  uint64_t short_ns_ = 0;
};

// The calling thread's slice in nanoseconds as sched_getattr reports it
// (its custom slice, or the kernel's base slice), 0 where unknown.
uint64_t CurrentThreadSliceNs();

}  // namespace accord
