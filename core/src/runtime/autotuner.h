// Online tuning of the fusion threshold, the cycle time and whether the
// response cache is used (ACCORD_AUTOTUNE).
//
// Global rank 0 measures and decides; every rank applies. A *step* is one
// coordinator iteration that executed something (the iterations
// ACCORD_TIMELINE_MARK_CYCLES marks). A *sample* is ACCORD_AUTOTUNE_STEPS_PER_SAMPLE
// steps under one setting, scored as the bytes of this rank's inputs to
// collectives executed during it divided by its wall time (bytes reduced per
// second). The first ACCORD_AUTOTUNE_WARMUP_SAMPLES samples use the starting
// setting and are not scored. Then a coordinate search: every fusion
// threshold of kThresholdGrid with the starting cycle time, then every cycle
// time of kCycleGrid with the best threshold, then the best threshold and
// cycle time with the response cache off (skipped when ACCORD_CACHE_CAPACITY
// is 0: the cache is off throughout), each sampled once, at most
// ACCORD_AUTOTUNE_MAX_SAMPLES scored samples in all; the best scored setting
// is then kept.
//
// Rank 0 hands each new setting to the global set's next round
// (Controller::RunRound's `tuning`), which carries it to every rank in the
// response list; every rank calls Apply() with it right after that round,
// before executing what the round agreed, so fusion plans agree (and the
// runtime switches every controller's response cache on or off there, so
// cache slots stay identical).
//
// Used by the coordinator thread only; the current setting is also published
// to the runtime's MetricsRecorder (GetMetrics()) for any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "accord/status.h"
#include "config/config.h"
#include "metrics/metrics.h"
#include "negotiation/message.h"

namespace accord {

class Autotuner {
 public:
  using Clock = std::chrono::steady_clock;

  static constexpr int64_t kMiB = int64_t{1} << 20;
  static constexpr int64_t kThresholdGrid[] = {1 * kMiB,  2 * kMiB,  4 * kMiB,  8 * kMiB,
                                               16 * kMiB, 32 * kMiB, 64 * kMiB, 128 * kMiB};
  static constexpr double kCycleGrid[] = {0.0, 1.0, 2.5, 5.0};

  // `coordinator`: this is global rank 0 (measures, decides, writes the log).
  // The setting in force is published to `metrics`, which must outlive the
  // autotuner. Fails if rank 0 cannot create the log file.
  static Result<Autotuner> Create(const Config& config, bool coordinator, MetricsRecorder* metrics);

  // The setting in force now.
  int64_t fusion_threshold_bytes() const { return current_.fusion_threshold_bytes; }
  double cycle_time_ms() const { return current_.cycle_time_ms; }
  bool cache_enabled() const { return current_.cache_enabled; }
  // The search is running (false when autotuning is off or over).
  bool active() const { return active_; }

  // Rank 0: `bytes` of this rank's input to a collective just executed.
  void AddBytes(uint64_t bytes);
  // Rank 0, after each coordinator iteration that began at `start`.
  void EndIteration(bool executed, Clock::time_point start, Clock::time_point now);
  // Rank 0: the setting to send in the next round of the global set, if any.
  const std::optional<TuningChoice>& proposal() const { return proposal_; }
  // Every rank: a setting the global round carried.
  void Apply(const TuningChoice& choice);

 private:
  struct Scored {
    TuningChoice setting;
    double score;
  };
  Autotuner() = default;
  void Publish() const;
  // Rank 0: the next setting to sample, or the best one (final) when done.
  TuningChoice Next();
  // Rank 0: the best scored sample so far, nullptr before the first.
  const Scored* Best() const;
  void Log(const char* phase, const TuningChoice& setting, const std::string& fields, double score);

  MetricsRecorder* metrics_ = nullptr;
  bool coordinator_ = false;
  bool active_ = false;
  TuningChoice current_;
  TuningChoice start_;
  int warmup_left_ = 0;
  int steps_per_sample_ = 1;
  int max_samples_ = 1;
  // The sample in progress (rank 0).
  std::optional<Clock::time_point> sample_start_;
  uint64_t sample_bytes_ = 0;
  int sample_steps_ = 0;
  int samples_logged_ = 0;
  std::vector<TuningChoice> queue_;  // settings still to sample in this phase
  int phase_ = 0;                    // 0 warm-up, 1 thresholds, 2 cycle times, 3 response cache
  std::vector<Scored> scored_;
  std::optional<TuningChoice> proposal_;  // sent, not yet applied
  std::shared_ptr<std::ofstream> log_;
};

}  // namespace accord
