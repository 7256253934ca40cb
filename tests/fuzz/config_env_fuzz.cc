// Fuzzes the configuration read from the environment (config/config.h):
// Config::FromLookup on a made-up environment.
//
// Input: lines of NAME=VALUE (the last line for a name wins; a line without
// '=' is ignored). Properties: the result is a Config or an InvalidArgument
// Status naming a variable of the input; every field of a Config that is
// returned lies in its knob's range; ToString() works on it.
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "config/config.h"
#include "fuzz_check.h"

namespace {

template <typename T>
void CheckRange(const accord::Knob<T>& knob, T value) {
  FUZZ_CHECK(value >= knob.min_value && value <= knob.max_value, knob.name);
}

void CheckConfig(const accord::Config& c) {
  namespace k = accord::knobs;
  CheckRange(k::kFusionThreshold, c.fusion_threshold_bytes);
  CheckRange(k::kStagingWindowBytes, c.staging_window_bytes);
  CheckRange(k::kMpiMaxCount, c.mpi_max_count);
  CheckRange(k::kCacheCapacity, c.cache_capacity);
  CheckRange(k::kCycleTimeMs, c.cycle_time_ms);
  CheckRange(k::kIdleTimeoutUs, c.idle_timeout_us);
  CheckRange(k::kIdleBackoffMaxUs, c.idle_backoff_max_us);
  CheckRange(k::kPollSpinUs, c.poll_spin_us);
  CheckRange(k::kPollWaitedSpinUs, c.poll_waited_spin_us);
  CheckRange(k::kPollMaxSleepUs, c.poll_max_sleep_us);
  CheckRange(k::kDeviceSpinUs, c.device_spin_us);
  CheckRange(k::kCoordinatorSliceUs, c.coordinator_slice_us);
  CheckRange(k::kLoneAllreduce, c.lone_allreduce);
  CheckRange(k::kLogLevel, c.log_level);
  CheckRange(k::kStallCheckTimeSeconds, c.stall_check_time_seconds);
  CheckRange(k::kStallShutdownTimeSeconds, c.stall_shutdown_time_seconds);
  CheckRange(k::kCollectiveTimeoutSeconds, c.collective_timeout_seconds);
  CheckRange(k::kGpuOperations, c.gpu_operations);
  CheckRange(k::kTimelineMaxMb, c.timeline_max_mb);
  CheckRange(k::kAutotuneWarmupSamples, c.autotune_warmup_samples);
  CheckRange(k::kAutotuneStepsPerSample, c.autotune_steps_per_sample);
  CheckRange(k::kAutotuneMaxSamples, c.autotune_max_samples);
  FUZZ_CHECK(!c.ToString().empty(), "ToString prints the knobs");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::map<std::string, std::string> env;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(start, end - start);
    const size_t equals = line.find('=');
    if (equals != std::string::npos) env[line.substr(0, equals)] = line.substr(equals + 1);
    start = end + 1;
  }
  auto config = accord::Config::FromLookup([&](const char* name) -> std::optional<std::string> {
    auto it = env.find(name);
    if (it == env.end()) return std::nullopt;
    return it->second;
  });
  if (config.ok()) {
    CheckConfig(*config);
    return 0;
  }
  FUZZ_CHECK(config.status().code() == accord::StatusCode::kInvalidArgument, "a bad value is InvalidArgument");
  bool names_one = false;
  for (const auto& [name, value] : env) {
    if (!name.empty() && config.status().message().rfind(name + "=", 0) == 0) names_one = true;
  }
  FUZZ_CHECK(names_one, "the error starts with NAME= of a variable that was set");
  return 0;
}
