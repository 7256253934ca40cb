// The counters behind accord::GetMetrics(). One per process, kept by the
// public API (accord.cc), which hands it to each runtime it starts: the
// counters stay readable after Shutdown.
//
// The coordinator thread adds to them after each negotiation round and each
// executed collective; any thread may take a snapshot. Every counter is a
// relaxed atomic: a snapshot is not one consistent instant (a round may be
// counted while its collective is not yet), but each value only grows, and
// they are exact once the operations they count have completed. Reset() is
// called by Init, before the coordinator starts.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

#include "accord/accord.h"

namespace accord {

class MetricsRecorder {
 public:
  // Init: zero every counter.
  void Reset();
  // Coordinator thread: one negotiation round of any process set, which took
  // `spent`, and the response-cache lookups it made on this rank.
  void AddRound(std::chrono::steady_clock::duration spent, uint64_t cache_hits, uint64_t cache_misses);
  // Coordinator thread: one collective (a fused batch) of `tensors` tensors
  // and `bytes` bytes of this rank's input, which took `spent`.
  void AddCollective(uint64_t tensors, uint64_t bytes, std::chrono::steady_clock::duration spent);

  // A thread waiting for its result ran one of the coordinator's
  // iterations (runtime/fast_path.h).
  void AddDriven() { driven_.fetch_add(1, std::memory_order_relaxed); }
  // An allreduce reduced from the inputs carried with its round (of which
  // AddCollective counts the tensor and bytes).
  void AddCarried() { carried_.fetch_add(1, std::memory_order_relaxed); }

  // Coordinator thread (and Init): the fusion threshold and cycle time in
  // force, whether the response cache is used, and whether the autotuner is
  // still searching.
  void SetTuning(int64_t fusion_threshold_bytes, double cycle_time_ms, bool cache_enabled, bool autotuning);

  // Any thread.
  Metrics Snapshot() const;

 private:
  std::atomic<uint64_t> rounds_{0};
  std::atomic<uint64_t> cache_hits_{0};
  std::atomic<uint64_t> cache_misses_{0};
  std::atomic<uint64_t> negotiation_ns_{0};
  std::atomic<uint64_t> collectives_{0};
  std::atomic<uint64_t> tensors_{0};
  std::atomic<uint64_t> bytes_{0};
  std::atomic<uint64_t> collective_ns_{0};
  std::atomic<uint64_t> driven_{0};
  std::atomic<uint64_t> carried_{0};
  std::atomic<int64_t> fusion_threshold_bytes_{0};
  std::atomic<double> cycle_time_ms_{0.0};
  std::atomic<bool> cache_enabled_{false};
  std::atomic<bool> autotuning_{false};
};

}  // namespace accord
