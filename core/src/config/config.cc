#include "config/config.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <sstream>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <variant>

namespace accord {
namespace {

// Binds a knob to the Config field it fills and the key ToString() prints.
template <typename T>
struct Field {
  const Knob<T>* knob;
  T Config::*member;
  const char* key;
};

using AnyField = std::variant<Field<int64_t>, Field<int>, Field<double>, Field<LogLevel>, Field<bool>,
                              Field<GpuOperations>, Field<LoneAllreduce>>;

// The table that drives parsing and printing, in ToString() order.
const AnyField kFields[] = {
    Field<int64_t>{&knobs::kFusionThreshold, &Config::fusion_threshold_bytes, "fusion_threshold_bytes"},
    Field<int64_t>{&knobs::kStagingWindowBytes, &Config::staging_window_bytes, "staging_window_bytes"},
    Field<LoneAllreduce>{&knobs::kLoneAllreduce, &Config::lone_allreduce, "lone_allreduce"},
    Field<int64_t>{&knobs::kMpiMaxCount, &Config::mpi_max_count, "mpi_max_count"},
    Field<bool>{&knobs::kHierarchicalAllreduce, &Config::hierarchical_allreduce, "hierarchical_allreduce"},
    Field<bool>{&knobs::kHierarchicalAllgather, &Config::hierarchical_allgather, "hierarchical_allgather"},
    Field<int>{&knobs::kCacheCapacity, &Config::cache_capacity, "cache_capacity"},
    Field<double>{&knobs::kCycleTimeMs, &Config::cycle_time_ms, "cycle_time_ms"},
    Field<int>{&knobs::kIdleTimeoutUs, &Config::idle_timeout_us, "idle_timeout_us"},
    Field<int>{&knobs::kIdleBackoffMaxUs, &Config::idle_backoff_max_us, "idle_backoff_max_us"},
    Field<int>{&knobs::kPollSpinUs, &Config::poll_spin_us, "poll_spin_us"},
    Field<int>{&knobs::kPollWaitedSpinUs, &Config::poll_waited_spin_us, "poll_waited_spin_us"},
    Field<int>{&knobs::kPollMaxSleepUs, &Config::poll_max_sleep_us, "poll_max_sleep_us"},
    Field<int>{&knobs::kDeviceSpinUs, &Config::device_spin_us, "device_spin_us"},
    Field<int>{&knobs::kCoordinatorSliceUs, &Config::coordinator_slice_us, "coordinator_slice_us"},
    Field<bool>{&knobs::kFastPath, &Config::fast_path, "fast_path"},
    Field<bool>{&knobs::kCarrySmallAllreduce, &Config::carry_small_allreduce, "carry_small_allreduce"},
    Field<LogLevel>{&knobs::kLogLevel, &Config::log_level, "log_level"},
    Field<bool>{&knobs::kLogHideTime, &Config::log_hide_time, "log_hide_time"},
    Field<double>{&knobs::kStallCheckTimeSeconds, &Config::stall_check_time_seconds, "stall_check_time_seconds"},
    Field<double>{&knobs::kStallShutdownTimeSeconds, &Config::stall_shutdown_time_seconds,
                  "stall_shutdown_time_seconds"},
    Field<bool>{&knobs::kStallCheckDisable, &Config::stall_check_disable, "stall_check_disable"},
    Field<double>{&knobs::kCollectiveTimeoutSeconds, &Config::collective_timeout_seconds, "collective_timeout_seconds"},
    Field<GpuOperations>{&knobs::kGpuOperations, &Config::gpu_operations, "gpu_operations"},
    Field<bool>{&knobs::kCudaHostEmulation, &Config::cuda_host_emulation, "cuda_host_emulation"},
};

// A variable that was set: which name it was found under, and its trimmed text.
struct RawValue {
  const char* variable;
  const char* fallback_for;  // the ACCORD_* name when `variable` is the Horovod one
  std::string text;
};

std::string Trim(const std::string& s) {
  const char* kSpace = " \t\n\r\f\v";
  size_t begin = s.find_first_not_of(kSpace);
  if (begin == std::string::npos) return "";
  size_t end = s.find_last_not_of(kSpace);
  return s.substr(begin, end - begin + 1);
}

// Rules 1 and 2 of config.h: ACCORD_* first, then HOROVOD_*, empty is unset.
template <typename T>
std::optional<RawValue> FindValue(const Knob<T>& knob, const Config::Lookup& lookup) {
  if (std::optional<std::string> value = lookup(knob.name)) {
    std::string text = Trim(*value);
    if (!text.empty()) return RawValue{knob.name, nullptr, std::move(text)};
  }
  if (knob.horovod_name == nullptr) return std::nullopt;
  if (std::optional<std::string> value = lookup(knob.horovod_name)) {
    std::string text = Trim(*value);
    if (!text.empty()) return RawValue{knob.horovod_name, knob.name, std::move(text)};
  }
  return std::nullopt;
}

// `NAME="text" is <problem>: expected <expected>`.
Status BadValue(const RawValue& raw, const char* problem, const std::string& expected) {
  std::ostringstream msg;
  msg << raw.variable << "=\"" << raw.text << "\"";
  if (raw.fallback_for != nullptr) msg << " (read as the fallback for " << raw.fallback_for << ")";
  msg << " is " << problem << ": expected " << expected;
  return Status::InvalidArgument(msg.str());
}

template <typename T>
std::string Expected(const Knob<T>& knob) {
  std::ostringstream text;
  text << (std::is_integral_v<T> ? "an integer number of " : "a number of ") << knob.unit << " from " << knob.min_value
       << " to " << knob.max_value;
  return text.str();
}

template <typename T>
Status ParseNumber(const Knob<T>& knob, const RawValue& raw, T* out) {
  // Integers are parsed as int64 so that "-1" for an int knob reports
  // "out of range" rather than "not valid".
  using Parsed = std::conditional_t<std::is_integral_v<T>, int64_t, double>;
  Parsed parsed{};
  const char* first = raw.text.data();
  const char* last = first + raw.text.size();
  auto [end, error] = std::from_chars(first, last, parsed);
  if (error == std::errc::result_out_of_range) return BadValue(raw, "out of range", Expected(knob));
  if (error != std::errc() || end != last) return BadValue(raw, "not valid", Expected(knob));
  if constexpr (std::is_floating_point_v<T>) {
    if (!std::isfinite(parsed)) return BadValue(raw, "not valid", Expected(knob));
  }
  if (parsed < knob.min_value || parsed > knob.max_value) {
    return BadValue(raw, "out of range", Expected(knob));
  }
  *out = static_cast<T>(parsed) + T{0};  // + 0 turns a parsed "-0" into 0
  return Status::OK();
}

Status ParseValue(const Knob<int64_t>& knob, const RawValue& raw, int64_t* out) { return ParseNumber(knob, raw, out); }
Status ParseValue(const Knob<int>& knob, const RawValue& raw, int* out) { return ParseNumber(knob, raw, out); }
Status ParseValue(const Knob<double>& knob, const RawValue& raw, double* out) { return ParseNumber(knob, raw, out); }
Status ParseValue(const Knob<LogLevel>& /*knob*/, const RawValue& raw, LogLevel* out) {
  std::optional<LogLevel> level = ParseLogLevel(raw.text);
  if (!level) {
    return BadValue(raw, "not valid", "one of trace, debug, info, warning, error, fatal");
  }
  *out = *level;
  return Status::OK();
}

std::string AsciiLower(const std::string& text) {
  std::string lower;
  for (char c : text) lower += static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  return lower;
}

// An enumerated knob: its value is one of `values`' names, in any case.
template <typename Enum, size_t N>
Status ParseNamed(const RawValue& raw, const Enum (&values)[N], const char* (*name)(Enum), const char* expected,
                  Enum* out) {
  const std::string lower = AsciiLower(raw.text);
  for (Enum value : values) {
    if (lower == name(value)) {
      *out = value;
      return Status::OK();
    }
  }
  return BadValue(raw, "not valid", expected);
}

Status ParseValue(const Knob<GpuOperations>& /*knob*/, const RawValue& raw, GpuOperations* out) {
  constexpr GpuOperations kValues[] = {GpuOperations::kAuto, GpuOperations::kNccl, GpuOperations::kMpi};
  return ParseNamed(raw, kValues, &GpuOperationsName, "auto, nccl or mpi", out);
}

Status ParseValue(const Knob<LoneAllreduce>& /*knob*/, const RawValue& raw, LoneAllreduce* out) {
  constexpr LoneAllreduce kValues[] = {LoneAllreduce::kAuto, LoneAllreduce::kInPlace, LoneAllreduce::kStaged};
  return ParseNamed(raw, kValues, &LoneAllreduceName, "auto, in_place or staged", out);
}

Status ParseValue(const Knob<bool>& /*knob*/, const RawValue& raw, bool* out) {
  const std::string lower = AsciiLower(raw.text);
  if (lower == "1" || lower == "true" || lower == "yes" || lower == "on") {
    *out = true;
  } else if (lower == "0" || lower == "false" || lower == "no" || lower == "off") {
    *out = false;
  } else {
    return BadValue(raw, "not valid", "1, true, yes or on; or 0, false, no or off");
  }
  return Status::OK();
}

template <typename T>
Status ReadField(const Field<T>& field, const Config::Lookup& lookup, Config* config) {
  std::optional<RawValue> raw = FindValue(*field.knob, lookup);
  if (!raw) {
    config->*field.member = field.knob->default_value;
    return Status::OK();
  }
  return ParseValue(*field.knob, *raw, &(config->*field.member));
}

void PrintValue(std::ostream& os, int64_t value) { os << value; }
void PrintValue(std::ostream& os, int value) { os << value; }
// Shortest text that reads back as the same double: 0.1 prints as "0.1".
void PrintValue(std::ostream& os, double value) {
  char buffer[64];
  auto [end, error] = std::to_chars(buffer, buffer + sizeof(buffer), value);
  os << (error == std::errc() ? std::string_view(buffer, end - buffer) : std::string_view("?"));
}
void PrintValue(std::ostream& os, LogLevel value) { os << LogLevelName(value); }
void PrintValue(std::ostream& os, bool value) { os << (value ? 1 : 0); }
void PrintValue(std::ostream& os, GpuOperations value) { os << GpuOperationsName(value); }
void PrintValue(std::ostream& os, LoneAllreduce value) { os << LoneAllreduceName(value); }

}  // namespace

const char* GpuOperationsName(GpuOperations value) {
  switch (value) {
    case GpuOperations::kAuto: return "auto";
    case GpuOperations::kNccl: return "nccl";
    case GpuOperations::kMpi: return "mpi";
  }
  return "?";
}

const char* LoneAllreduceName(LoneAllreduce value) {
  switch (value) {
    case LoneAllreduce::kAuto: return "auto";
    case LoneAllreduce::kInPlace: return "in_place";
    case LoneAllreduce::kStaged: return "staged";
  }
  return "?";
}

Result<Config> Config::FromEnv() {
  return FromLookup([](const char* name) -> std::optional<std::string> {
    const char* value = std::getenv(name);
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  });
}

Result<Config> Config::FromLookup(const Lookup& lookup) {
  Config config;
  for (const AnyField& field : kFields) {
    ACCORD_RETURN_IF_ERROR(std::visit([&](const auto& f) { return ReadField(f, lookup, &config); }, field));
  }
  config.staging_window_set = FindValue(knobs::kStagingWindowBytes, lookup).has_value();
  config.hierarchical_allreduce_set = FindValue(knobs::kHierarchicalAllreduce, lookup).has_value();
  // The timeline's knobs are read here, outside the table (and ToString).
  if (std::optional<RawValue> raw = FindValue(knobs::kTimeline, lookup)) config.timeline_path = raw->text;
  ACCORD_RETURN_IF_ERROR(
      ReadField(Field<bool>{&knobs::kTimelineMarkCycles, &Config::timeline_mark_cycles, "timeline_mark_cycles"}, lookup,
                &config));
  ACCORD_RETURN_IF_ERROR(
      ReadField(Field<int>{&knobs::kTimelineMaxMb, &Config::timeline_max_mb, "timeline_max_mb"}, lookup, &config));
  // So are the autotuner's.
  ACCORD_RETURN_IF_ERROR(ReadField(Field<bool>{&knobs::kAutotune, &Config::autotune, "autotune"}, lookup, &config));
  ACCORD_RETURN_IF_ERROR(
      ReadField(Field<int>{&knobs::kAutotuneWarmupSamples, &Config::autotune_warmup_samples, "autotune_warmup_samples"},
                lookup, &config));
  ACCORD_RETURN_IF_ERROR(ReadField(
      Field<int>{&knobs::kAutotuneStepsPerSample, &Config::autotune_steps_per_sample, "autotune_steps_per_sample"},
      lookup, &config));
  ACCORD_RETURN_IF_ERROR(ReadField(
      Field<int>{&knobs::kAutotuneMaxSamples, &Config::autotune_max_samples, "autotune_max_samples"}, lookup, &config));
  if (std::optional<RawValue> raw = FindValue(knobs::kAutotuneLog, lookup)) config.autotune_log_path = raw->text;
  return config;
}

std::string Config::ToString() const {
  std::ostringstream os;
  const char* separator = "";
  for (const AnyField& field : kFields) {
    std::visit(
        [&](const auto& f) {
          os << separator << f.key << "=";
          // Unset, these two depend on each process set's hosts
          // (StagingWindowBytes, HierarchicalAllreduce): their defaults
          // would misstate what a set that spans hosts runs.
          using Member = decltype(f.member);
          bool automatic = false;
          if constexpr (std::is_same_v<Member, int64_t Config::*>) {
            automatic = f.member == &Config::staging_window_bytes && !staging_window_set;
          } else if constexpr (std::is_same_v<Member, bool Config::*>) {
            automatic = f.member == &Config::hierarchical_allreduce && !hierarchical_allreduce_set;
          }
          if (automatic) {
            os << "auto";
          } else {
            PrintValue(os, this->*f.member);
          }
        },
        field);
    separator = " ";
  }
  return os.str();
}

}  // namespace accord
