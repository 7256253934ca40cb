#include "runtime/autotuner.h"

#include <algorithm>
#include <cstdio>

#include "common/logging.h"
#include "metrics/metrics.h"

namespace accord {

Result<Autotuner> Autotuner::Create(const Config& config, bool coordinator, MetricsRecorder* metrics) {
  Autotuner tuner;
  tuner.metrics_ = metrics;
  tuner.coordinator_ = coordinator;
  tuner.active_ = config.autotune;
  tuner.start_.fusion_threshold_bytes = config.fusion_threshold_bytes;
  tuner.start_.cycle_time_ms = config.cycle_time_ms;
  tuner.start_.cache_enabled = config.cache_capacity > 0;
  tuner.current_ = tuner.start_;
  tuner.warmup_left_ = config.autotune_warmup_samples;
  tuner.steps_per_sample_ = config.autotune_steps_per_sample;
  tuner.max_samples_ = config.autotune_max_samples;
  for (int64_t threshold : kThresholdGrid) {
    TuningChoice choice = tuner.start_;
    choice.fusion_threshold_bytes = threshold;
    tuner.queue_.push_back(choice);
  }
  if (tuner.warmup_left_ == 0) {
    tuner.phase_ = 1;
    if (coordinator && tuner.active_) {
      tuner.proposal_ = tuner.queue_.front();
      tuner.queue_.erase(tuner.queue_.begin());
    }
  }
  if (coordinator && tuner.active_ && !config.autotune_log_path.empty()) {
    tuner.log_ = std::make_shared<std::ofstream>(config.autotune_log_path, std::ios::trunc);
    if (!*tuner.log_) {
      return Status::InvalidArgument("ACCORD_AUTOTUNE_LOG: cannot create \"" + config.autotune_log_path + "\"");
    }
    *tuner.log_ << "sample,phase,fusion_threshold_bytes,cycle_time_ms,cache_enabled,steps,bytes,seconds,"
                   "score_bytes_per_second\n";
    tuner.log_->flush();
  }
  tuner.Publish();
  return tuner;
}

void Autotuner::Publish() const {
  metrics_->SetTuning(current_.fusion_threshold_bytes, current_.cycle_time_ms, current_.cache_enabled, active_);
}

void Autotuner::AddBytes(uint64_t bytes) {
  if (coordinator_ && active_ && !proposal_) sample_bytes_ += bytes;
}

void Autotuner::Log(const char* phase, const TuningChoice& setting, const std::string& fields, double score) {
  if (!log_) return;
  char line[256];
  std::snprintf(line, sizeof(line), "%s,%s,%lld,%g,%d,%s,%.6g\n",
                std::string(phase) == "kept" ? "" : std::to_string(samples_logged_).c_str(), phase,
                static_cast<long long>(setting.fusion_threshold_bytes), setting.cycle_time_ms,
                setting.cache_enabled ? 1 : 0, fields.c_str(), score);
  *log_ << line;
  log_->flush();
}

void Autotuner::EndIteration(bool executed, Clock::time_point start, Clock::time_point now) {
  // While a new setting is on its way, steps would be scored under the old one.
  if (!coordinator_ || !active_ || proposal_ || !executed) return;
  if (!sample_start_) sample_start_ = start;
  if (++sample_steps_ < steps_per_sample_) return;
  const double seconds = std::max(std::chrono::duration<double>(now - *sample_start_).count(), 1e-9);
  const double score = static_cast<double>(sample_bytes_) / seconds;
  char fields[128];
  std::snprintf(fields, sizeof(fields), "%d,%llu,%.6f", sample_steps_, static_cast<unsigned long long>(sample_bytes_),
                seconds);
  ++samples_logged_;
  Log(phase_ == 0 ? "warmup" : "search", current_, fields, score);
  if (phase_ == 0) {
    if (--warmup_left_ == 0) {
      phase_ = 1;
      proposal_ = Next();
    }
  } else {
    scored_.push_back({current_, score});
    proposal_ = Next();
  }
  sample_start_.reset();
  sample_bytes_ = 0;
  sample_steps_ = 0;
}

const Autotuner::Scored* Autotuner::Best() const {
  const Scored* best = nullptr;
  for (const auto& s : scored_) {
    if (!best || s.score > best->score) best = &s;
  }
  return best;
}

TuningChoice Autotuner::Next() {
  if (static_cast<int>(scored_.size()) < max_samples_) {
    if (queue_.empty() && phase_ == 1) {
      phase_ = 2;
      TuningChoice next = Best() ? Best()->setting : start_;
      for (double cycle : kCycleGrid) {
        // The starting cycle time was sampled with every threshold already.
        if (cycle == start_.cycle_time_ms) continue;
        next.cycle_time_ms = cycle;
        queue_.push_back(next);
      }
    }
    if (queue_.empty() && phase_ == 2) {
      phase_ = 3;
      // The best threshold and cycle time were sampled with the cache on;
      // with ACCORD_CACHE_CAPACITY=0 it is off throughout and not searched.
      if (start_.cache_enabled) {
        TuningChoice off = Best() ? Best()->setting : start_;
        off.cache_enabled = false;
        queue_.push_back(off);
      }
    }
    if (!queue_.empty()) {
      TuningChoice next = queue_.front();
      queue_.erase(queue_.begin());
      return next;
    }
  }
  const Scored* best_sample = Best();
  TuningChoice best = best_sample ? best_sample->setting : start_;
  const double best_score = best_sample ? best_sample->score : -1;
  best.final = true;
  Log("kept", best, ",,", best_score);
  ACCORD_LOG(kInfo) << "autotune: keeping fusion threshold " << best.fusion_threshold_bytes << " bytes, cycle time "
                    << best.cycle_time_ms << " ms, response cache " << (best.cache_enabled ? "on" : "off") << " ("
                    << best_score << " bytes/s) after " << scored_.size() << " samples";
  return best;
}

void Autotuner::Apply(const TuningChoice& choice) {
  current_ = choice;
  current_.final = false;
  if (choice.final) active_ = false;
  proposal_.reset();
  sample_start_.reset();
  sample_bytes_ = 0;
  sample_steps_ = 0;
  Publish();
}

}  // namespace accord
