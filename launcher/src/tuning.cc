#include "tuning.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>
#include <map>
#include <sstream>

#include "common/logging.h"
#include "config/config.h"

namespace accord::launcher {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

// Shortest text that reads back as `value` (0.5 -> "0.5", 64 -> "64").
std::string NumberText(double value) {
  char buffer[64];
  auto [end, error] = std::to_chars(buffer, buffer + sizeof(buffer), value);
  return error == std::errc() ? std::string(buffer, end) : std::to_string(value);
}

std::vector<TuningFlag> MakeTuningFlags() {
  namespace k = accord::knobs;
  std::vector<TuningFlag> flags;
  auto add = [&flags](TuningFlag flag) { flags.push_back(std::move(flag)); };

  TuningFlag f;
  f = {};
  f.flag = "--fusion-threshold-mb";
  f.value_name = "MB";
  f.variable = k::kFusionThreshold.name;
  f.kind = TuningKind::kNumber;
  f.min_value = 0;
  f.max_value = std::floor(static_cast<double>(k::kFusionThreshold.max_value) / kMiB) - 1;
  f.scale = kMiB;
  f.integral_result = true;
  f.default_text = NumberText(static_cast<double>(k::kFusionThreshold.default_value) / kMiB);
  f.help = "Largest fused buffer, in MiB (the variable holds bytes); 0 disables fusion";
  add(f);

  f = {};
  f.flag = "--cycle-time-ms";
  f.value_name = "MS";
  f.variable = k::kCycleTimeMs.name;
  f.kind = TuningKind::kNumber;
  f.min_value = k::kCycleTimeMs.min_value;
  f.max_value = k::kCycleTimeMs.max_value;
  f.default_text = NumberText(k::kCycleTimeMs.default_value);
  f.help = "Minimum interval between negotiation rounds in milliseconds; 0: none";
  add(f);

  f = {};
  f.flag = "--cache-capacity";
  f.value_name = "N";
  f.variable = k::kCacheCapacity.name;
  f.kind = TuningKind::kInteger;
  f.min_value = k::kCacheCapacity.min_value;
  f.max_value = k::kCacheCapacity.max_value;
  f.default_text = std::to_string(k::kCacheCapacity.default_value);
  f.help = "Entries in the response cache; 0 disables it";
  add(f);

  f = {};
  f.flag = "--disable-cache";
  f.variable = k::kCacheCapacity.name;
  f.kind = TuningKind::kSwitch;
  f.switch_value = "0";
  f.default_text = "off";
  f.conflicts = "--cache-capacity";
  f.help = "Same as --cache-capacity 0";
  add(f);

  f = {};
  f.flag = "--log-level";
  f.value_name = "LEVEL";
  f.variable = k::kLogLevel.name;
  f.kind = TuningKind::kLogLevel;
  f.default_text = LogLevelName(k::kLogLevel.default_value);
  f.help = "trace, debug, info, warning, error or fatal";
  add(f);

  f = {};
  f.flag = "--timeline-filename";
  f.value_name = "FILE";
  f.variable = k::kTimeline.name;
  f.kind = TuningKind::kText;
  f.default_text = "unset (no timeline)";
  f.help = "Rank 0 records a timeline of every collective to FILE";
  add(f);

  f = {};
  f.flag = "--timeline-mark-cycles";
  f.variable = k::kTimelineMarkCycles.name;
  f.kind = TuningKind::kSwitch;
  f.default_text = "off";
  f.needs = "--timeline-filename";
  f.help = "Mark coordinator iterations in the timeline";
  add(f);

  f = {};
  f.flag = "--no-stall-check";
  f.variable = "ACCORD_STALL_CHECK_DISABLE";
  f.kind = TuningKind::kSwitch;
  f.default_text = "off";
  f.help = "Do not warn about tensors that some ranks submitted and others did not";
  add(f);

  f = {};
  f.flag = "--stall-check-warning-time-seconds";
  f.value_name = "S";
  f.variable = "ACCORD_STALL_CHECK_TIME_SECONDS";
  f.kind = TuningKind::kInteger;
  f.min_value = 0;
  f.max_value = std::numeric_limits<int>::max();
  f.default_text = "unset";
  f.conflicts = "--no-stall-check";
  f.help = "Warn about a stalled tensor after S seconds";
  add(f);

  f = {};
  f.flag = "--stall-check-shutdown-time-seconds";
  f.value_name = "S";
  f.variable = "ACCORD_STALL_SHUTDOWN_TIME_SECONDS";
  f.kind = TuningKind::kInteger;
  f.min_value = 0;
  f.max_value = std::numeric_limits<int>::max();
  f.default_text = "unset";
  f.conflicts = "--no-stall-check";
  f.help = "Shut the job down after a tensor stalls for S seconds";
  add(f);

  // Autotuning (docs/troubleshooting.md, "Autotune").
  f = {};
  f.flag = "--autotune";
  f.variable = "ACCORD_AUTOTUNE";
  f.kind = TuningKind::kSwitch;
  f.default_text = "off";
  f.help = "Tune the fusion threshold and cycle time while the job runs";
  add(f);

  f = {};
  f.flag = "--autotune-log-file";
  f.value_name = "FILE";
  f.variable = "ACCORD_AUTOTUNE_LOG";
  f.kind = TuningKind::kText;
  f.default_text = "unset";
  f.needs = "--autotune";
  f.help = "Write every autotuning sample to FILE";
  add(f);

  f = {};
  f.flag = "--autotune-warmup-samples";
  f.value_name = "N";
  f.variable = "ACCORD_AUTOTUNE_WARMUP_SAMPLES";
  f.kind = TuningKind::kInteger;
  f.min_value = 0;
  f.max_value = std::numeric_limits<int>::max();
  f.default_text = "unset";
  f.needs = "--autotune";
  f.help = "Samples discarded before autotuning starts";
  add(f);

  f = {};
  f.flag = "--autotune-steps-per-sample";
  f.value_name = "N";
  f.variable = "ACCORD_AUTOTUNE_STEPS_PER_SAMPLE";
  f.kind = TuningKind::kInteger;
  f.min_value = 1;
  f.max_value = std::numeric_limits<int>::max();
  f.default_text = "unset";
  f.needs = "--autotune";
  f.help = "Steps measured per autotuning sample";
  add(f);

  f = {};
  f.flag = "--autotune-bayes-opt-max-samples";
  f.value_name = "N";
  f.variable = "ACCORD_AUTOTUNE_MAX_SAMPLES";
  f.kind = TuningKind::kInteger;
  f.min_value = 1;
  f.max_value = std::numeric_limits<int>::max();
  f.default_text = "unset";
  f.needs = "--autotune";
  f.help = "Most samples autotuning takes before it settles";
  add(f);
  return flags;
}

std::string Trim(const std::string& s) {
  size_t begin = 0;
  size_t end = s.size();
  while (begin < end && std::isspace(static_cast<unsigned char>(s[begin]))) ++begin;
  while (end > begin && std::isspace(static_cast<unsigned char>(s[end - 1]))) --end;
  return s.substr(begin, end - begin);
}

std::string Range(const TuningFlag& flag) {
  return NumberText(flag.min_value) + " to " + NumberText(flag.max_value);
}

}  // namespace

const std::vector<TuningFlag>& TuningFlags() {
  static const std::vector<TuningFlag> flags = MakeTuningFlags();
  return flags;
}

Result<std::string> TuningVariableValue(const TuningFlag& flag, const std::string& raw) {
  std::string text = Trim(raw);
  auto bad = [&](const std::string& expected) {
    return Status::InvalidArgument(flag.flag + " \"" + raw + "\" is not valid: expected " + expected);
  };
  switch (flag.kind) {
    case TuningKind::kSwitch:
      return flag.switch_value;
    case TuningKind::kText:
      if (text.empty()) return bad("a file name");
      return text;
    case TuningKind::kLogLevel: {
      std::optional<LogLevel> level = ParseLogLevel(text);
      if (!level) return bad("one of trace, debug, info, warning, error, fatal");
      return std::string(LogLevelName(*level));
    }
    case TuningKind::kInteger: {
      long long value = 0;
      auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
      bool parsed = !text.empty() && error == std::errc() && end == text.data() + text.size();
      if (!parsed || value < flag.min_value || value > flag.max_value) {
        return bad("a whole number from " + Range(flag));
      }
      return std::to_string(value);
    }
    case TuningKind::kNumber: {
      double value = 0;
      auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
      bool parsed = !text.empty() && error == std::errc() && end == text.data() + text.size() &&
                    std::isfinite(value);
      if (!parsed || value < flag.min_value || value > flag.max_value) {
        return bad("a number from " + Range(flag));
      }
      double scaled = value * flag.scale + 0.0;  // + 0.0 turns -0 into 0
      if (flag.integral_result) return std::to_string(std::llround(scaled));
      return NumberText(scaled);
    }
  }
  return Status::Internal("unknown tuning flag kind");
}

Result<TuningResult> TuningEnvironment(const std::vector<std::pair<std::string, std::string>>& given) {
  std::map<std::string, std::string> by_flag(given.begin(), given.end());
  TuningResult result;
  std::map<std::string, std::string> variable_owner;   // variable -> flag that set it
  std::vector<std::pair<std::string, std::vector<const TuningFlag*>>> unbuilt;  // feature -> flags
  for (const TuningFlag& flag : TuningFlags()) {
    auto it = by_flag.find(flag.flag);
    if (it == by_flag.end()) continue;
    if (!flag.needs.empty() && by_flag.count(flag.needs) == 0) {
      return Status::InvalidArgument(flag.flag + " needs " + flag.needs);
    }
    if (!flag.conflicts.empty() && by_flag.count(flag.conflicts) != 0) {
      return Status::InvalidArgument(flag.flag + " cannot be combined with " + flag.conflicts);
    }
    auto [owner, inserted] = variable_owner.emplace(flag.variable, flag.flag);
    if (!inserted) {
      return Status::InvalidArgument(owner->second + " and " + flag.flag + " both set " + flag.variable +
                                     "; give one of them");
    }
    Result<std::string> value = TuningVariableValue(flag, it->second);
    if (!value.ok()) return value.status();
    result.env.push_back({flag.variable, *value});
    result.sources.push_back(flag.flag);
    if (!flag.feature.empty()) {
      auto group = std::find_if(unbuilt.begin(), unbuilt.end(),
                                [&](const auto& entry) { return entry.first == flag.feature; });
      if (group == unbuilt.end()) {
        unbuilt.push_back({flag.feature, {}});
        group = unbuilt.end() - 1;
      }
      group->second.push_back(&flag);
    }
  }
  for (const auto& [feature, flags] : unbuilt) {
    std::ostringstream note;
    note << "this build of accord has no " << feature << " yet: ";
    for (size_t i = 0; i < flags.size(); ++i) {
      if (i > 0) note << (i + 1 == flags.size() ? " and " : ", ");
      note << flags[i]->flag << " (" << flags[i]->variable << ")";
    }
    note << (flags.size() == 1 ? " is" : " are") << " passed to every rank but " << (flags.size() == 1 ? "has" : "have")
         << " no effect";
    result.notes.push_back(note.str());
  }
  return result;
}

}  // namespace accord::launcher
