#include "metrics/metrics.h"

namespace accord {

namespace {

constexpr auto kRelaxed = std::memory_order_relaxed;

uint64_t Nanoseconds(std::chrono::steady_clock::duration d) {
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
  return ns > 0 ? static_cast<uint64_t>(ns) : 0;
}

}  // namespace

void MetricsRecorder::Reset() {
  for (auto* counter : {&rounds_, &cache_hits_, &cache_misses_, &negotiation_ns_, &collectives_, &tensors_, &bytes_,
                        &collective_ns_, &driven_, &carried_}) {
    counter->store(0, kRelaxed);
  }
}

void MetricsRecorder::AddRound(std::chrono::steady_clock::duration spent, uint64_t cache_hits, uint64_t cache_misses) {
  rounds_.fetch_add(1, kRelaxed);
  cache_hits_.fetch_add(cache_hits, kRelaxed);
  cache_misses_.fetch_add(cache_misses, kRelaxed);
  negotiation_ns_.fetch_add(Nanoseconds(spent), kRelaxed);
}

void MetricsRecorder::AddCollective(uint64_t tensors, uint64_t bytes, std::chrono::steady_clock::duration spent) {
  collectives_.fetch_add(1, kRelaxed);
  tensors_.fetch_add(tensors, kRelaxed);
  bytes_.fetch_add(bytes, kRelaxed);
  collective_ns_.fetch_add(Nanoseconds(spent), kRelaxed);
}

void MetricsRecorder::SetTuning(int64_t fusion_threshold_bytes, double cycle_time_ms, bool cache_enabled,
                                bool autotuning) {
  fusion_threshold_bytes_.store(fusion_threshold_bytes, kRelaxed);
  cycle_time_ms_.store(cycle_time_ms, kRelaxed);
  cache_enabled_.store(cache_enabled, kRelaxed);
  autotuning_.store(autotuning, kRelaxed);
}

Metrics MetricsRecorder::Snapshot() const {
  Metrics m;
  m.collectives = collectives_.load(kRelaxed);
  m.tensors = tensors_.load(kRelaxed);
  m.bytes = bytes_.load(kRelaxed);
  m.fusion_ratio = m.collectives > 0 ? static_cast<double>(m.tensors) / static_cast<double>(m.collectives) : 0.0;
  m.negotiation_rounds = rounds_.load(kRelaxed);
  m.cache_hits = cache_hits_.load(kRelaxed);
  m.cache_misses = cache_misses_.load(kRelaxed);
  const uint64_t lookups = m.cache_hits + m.cache_misses;
  m.cache_hit_rate = lookups > 0 ? static_cast<double>(m.cache_hits) / static_cast<double>(lookups) : 0.0;
  m.negotiation_seconds = static_cast<double>(negotiation_ns_.load(kRelaxed)) * 1e-9;
  m.collective_seconds = static_cast<double>(collective_ns_.load(kRelaxed)) * 1e-9;
  m.driven_iterations = driven_.load(kRelaxed);
  m.carried_allreduces = carried_.load(kRelaxed);
  m.fusion_threshold_bytes = fusion_threshold_bytes_.load(kRelaxed);
  m.cycle_time_ms = cycle_time_ms_.load(kRelaxed);
  m.cache_enabled = cache_enabled_.load(kRelaxed);
  m.autotuning = autotuning_.load(kRelaxed);
  return m;
}

}  // namespace accord
