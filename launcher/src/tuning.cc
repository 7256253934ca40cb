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

// Builders for the table below; the caller adds `needs`, `conflicts` and
// the like where a flag has them.
TuningFlag Switch(std::string flag, std::string variable, std::string help) {
  TuningFlag f;
  f.flag = std::move(flag);
  f.variable = std::move(variable);
  f.kind = TuningKind::kSwitch;
  f.default_text = "off";
  f.help = std::move(help);
  return f;
}

TuningFlag Valued(TuningKind kind, std::string flag, std::string value_name, std::string variable,
                  std::string default_text, std::string help) {
  TuningFlag f;
  f.flag = std::move(flag);
  f.value_name = std::move(value_name);
  f.variable = std::move(variable);
  f.kind = kind;
  f.default_text = std::move(default_text);
  f.help = std::move(help);
  return f;
}

TuningFlag Ranged(TuningKind kind, std::string flag, std::string value_name, std::string variable, double min_value,
                  double max_value, std::string default_text, std::string help) {
  TuningFlag f = Valued(kind, std::move(flag), std::move(value_name), std::move(variable), std::move(default_text),
                        std::move(help));
  f.min_value = min_value;
  f.max_value = max_value;
  return f;
}

TuningFlag Needing(TuningFlag f, std::string needs) {
  f.needs = std::move(needs);
  return f;
}

TuningFlag ConflictingWith(TuningFlag f, std::string conflicts) {
  f.conflicts = std::move(conflicts);
  return f;
}

// A switch that sets `variable` to 0, the opposite of the flag `opposite`
// (which it cannot be combined with).
TuningFlag ZeroSwitch(std::string flag, std::string variable, std::string help, std::string opposite) {
  TuningFlag f = ConflictingWith(Switch(std::move(flag), std::move(variable), std::move(help)), std::move(opposite));
  f.switch_value = "0";
  return f;
}

std::vector<TuningFlag> MakeTuningFlags() {
  namespace k = accord::knobs;
  constexpr double kIntMax = std::numeric_limits<int>::max();
  std::vector<TuningFlag> flags;

  TuningFlag threshold = Ranged(TuningKind::kNumber, "--fusion-threshold-mb", "MB", k::kFusionThreshold.name, 0,
                                std::floor(static_cast<double>(k::kFusionThreshold.max_value) / kMiB) - 1,
                                NumberText(static_cast<double>(k::kFusionThreshold.default_value) / kMiB),
                                "Largest fused buffer, in MiB (the variable holds bytes); 0 disables fusion");
  threshold.scale = kMiB;
  threshold.integral_result = true;
  flags.push_back(threshold);
  flags.push_back(Ranged(TuningKind::kNumber, "--cycle-time-ms", "MS", k::kCycleTimeMs.name, k::kCycleTimeMs.min_value,
                         k::kCycleTimeMs.max_value, NumberText(k::kCycleTimeMs.default_value),
                         "Minimum interval between negotiation rounds in milliseconds; 0: none"));
  flags.push_back(Ranged(TuningKind::kInteger, "--cache-capacity", "N", k::kCacheCapacity.name,
                         k::kCacheCapacity.min_value, k::kCacheCapacity.max_value,
                         std::to_string(k::kCacheCapacity.default_value),
                         "Entries in the response cache; 0 disables it"));
  flags.push_back(
      ZeroSwitch("--disable-cache", k::kCacheCapacity.name, "Same as --cache-capacity 0", "--cache-capacity"));
  flags.push_back(Valued(TuningKind::kLogLevel, "--log-level", "LEVEL", k::kLogLevel.name,
                         LogLevelName(k::kLogLevel.default_value), "trace, debug, info, warning, error or fatal"));
  flags.push_back(Valued(TuningKind::kText, "--timeline-filename", "FILE", k::kTimeline.name, "unset (no timeline)",
                         "Rank 0 records a timeline of every collective to FILE"));
  flags.push_back(Needing(
      Switch("--timeline-mark-cycles", k::kTimelineMarkCycles.name, "Mark coordinator iterations in the timeline"),
      "--timeline-filename"));
  flags.push_back(Switch("--no-stall-check", "ACCORD_STALL_CHECK_DISABLE",
                         "Do not warn about tensors that some ranks submitted and others did not"));
  flags.push_back(ConflictingWith(
      Ranged(TuningKind::kInteger, "--stall-check-warning-time-seconds", "S", "ACCORD_STALL_CHECK_TIME_SECONDS", 0,
             kIntMax, "unset", "Warn about a stalled tensor after S seconds"),
      "--no-stall-check"));
  flags.push_back(ConflictingWith(
      Ranged(TuningKind::kInteger, "--stall-check-shutdown-time-seconds", "S", "ACCORD_STALL_SHUTDOWN_TIME_SECONDS", 0,
             kIntMax, "unset", "Shut the job down after a tensor stalls for S seconds"),
      "--no-stall-check"));
  flags.push_back(Ranged(TuningKind::kNumber, "--collective-timeout-seconds", "S", k::kCollectiveTimeoutSeconds.name,
                         k::kCollectiveTimeoutSeconds.min_value, k::kCollectiveTimeoutSeconds.max_value,
                         NumberText(k::kCollectiveTimeoutSeconds.default_value),
                         "End the job when a collective or negotiation round runs longer than S seconds; 0: never"));

  // Collectives across hosts (docs/configuration.md, "Hierarchical collectives").
  // Horovod's --no- forms too; an unset allreduce knob runs two levels
  // where every host has the same number of ranks, two or more.
  TuningFlag two_level_allreduce =
      Switch("--hierarchical-allreduce", k::kHierarchicalAllreduce.name,
             "Allreduce in two levels (within each host, then across hosts) when ranks span hosts");
  two_level_allreduce.default_text = "where every host has the same number of ranks, two or more";
  flags.push_back(two_level_allreduce);
  flags.push_back(ZeroSwitch("--no-hierarchical-allreduce", k::kHierarchicalAllreduce.name,
                             "Allreduce flat (one ring or MPI call over every rank) also where ranks span hosts",
                             "--hierarchical-allreduce"));
  flags.push_back(Switch("--hierarchical-allgather", k::kHierarchicalAllgather.name,
                         "Allgather in two levels (within each host, then across hosts) when ranks span hosts"));
  flags.push_back(ZeroSwitch("--no-hierarchical-allgather", k::kHierarchicalAllgather.name,
                             "Allgather flat (the default)", "--hierarchical-allgather"));

  // Autotuning (docs/troubleshooting.md, "Autotune").
  flags.push_back(Switch("--autotune", "ACCORD_AUTOTUNE",
                         "Tune the fusion threshold, cycle time and response cache while the job runs"));
  flags.push_back(Needing(Valued(TuningKind::kText, "--autotune-log-file", "FILE", "ACCORD_AUTOTUNE_LOG", "unset",
                                 "Write every autotuning sample to FILE"),
                          "--autotune"));
  flags.push_back(
      Needing(Ranged(TuningKind::kInteger, "--autotune-warmup-samples", "N", "ACCORD_AUTOTUNE_WARMUP_SAMPLES", 0,
                     kIntMax, "unset", "Samples discarded before autotuning starts"),
              "--autotune"));
  flags.push_back(
      Needing(Ranged(TuningKind::kInteger, "--autotune-steps-per-sample", "N", "ACCORD_AUTOTUNE_STEPS_PER_SAMPLE", 1,
                     kIntMax, "unset", "Steps measured per autotuning sample"),
              "--autotune"));
  flags.push_back(
      Needing(Ranged(TuningKind::kInteger, "--autotune-bayes-opt-max-samples", "N", "ACCORD_AUTOTUNE_MAX_SAMPLES", 1,
                     kIntMax, "unset", "Most samples autotuning takes before it settles"),
              "--autotune"));
  return flags;
}

std::string Trim(const std::string& s) {
  size_t begin = 0;
  size_t end = s.size();
  while (begin < end && std::isspace(static_cast<unsigned char>(s[begin]))) ++begin;
  while (end > begin && std::isspace(static_cast<unsigned char>(s[end - 1]))) --end;
  return s.substr(begin, end - begin);
}

std::string Range(const TuningFlag& flag) { return NumberText(flag.min_value) + " to " + NumberText(flag.max_value); }

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
    case TuningKind::kSwitch: return flag.switch_value;
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
      bool parsed = !text.empty() && error == std::errc() && end == text.data() + text.size() && std::isfinite(value);
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
  std::map<std::string, std::string> variable_owner;                            // variable -> flag that set it
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
      auto group =
          std::find_if(unbuilt.begin(), unbuilt.end(), [&](const auto& entry) { return entry.first == flag.feature; });
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
