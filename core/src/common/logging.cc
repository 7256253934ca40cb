#include "common/logging.h"

#include <spdlog/logger.h>
#include <spdlog/sinks/stdout_sinks.h>

#include <atomic>
#include <cctype>
#include <memory>
#include <string>

namespace accord {
namespace {

constexpr const char* kLevelNames[] = {"trace", "debug", "info", "warning", "error", "fatal"};
constexpr const char* kPatternWithTime = "[%Y-%m-%d %H:%M:%S.%e] %v";
constexpr const char* kPatternWithoutTime = "%v";

// The logger is process-wide by nature (there is one stderr). It is created
// on first use and never destroyed, so code running in static destructors at
// exit can still log. The level threshold is ours (one relaxed load decides
// whether a message is even built); spdlog lets everything through and adds
// the time. Our logger is not registered with spdlog's global registry, so
// an application's own use of spdlog does not touch it.
struct LoggerState {
  LoggerState()
      : logger(std::make_shared<spdlog::logger>("accord", std::make_shared<spdlog::sinks::stderr_sink_mt>())) {
    logger->set_level(spdlog::level::trace);
    logger->flush_on(spdlog::level::trace);
    logger->set_pattern(kPatternWithTime);
  }
  std::atomic<int> level{static_cast<int>(LogLevel::kWarning)};
  std::atomic<int> rank{-1};
  std::shared_ptr<spdlog::logger> logger;
};

LoggerState& Logger() {
  static LoggerState* state = new LoggerState();
  return *state;
}

spdlog::level::level_enum SpdlogLevel(LogLevel level) {
  switch (level) {
    case LogLevel::kTrace: return spdlog::level::trace;
    case LogLevel::kDebug: return spdlog::level::debug;
    case LogLevel::kInfo: return spdlog::level::info;
    case LogLevel::kWarning: return spdlog::level::warn;
    case LogLevel::kError: return spdlog::level::err;
    default: return spdlog::level::critical;
  }
}

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) != b[i]) return false;
  }
  return true;
}

}  // namespace

const char* LogLevelName(LogLevel level) {
  int index = static_cast<int>(level);
  if (index < 0 || index > static_cast<int>(LogLevel::kFatal)) return "unknown";
  return kLevelNames[index];
}

std::optional<LogLevel> ParseLogLevel(std::string_view text) {
  for (int i = 0; i <= static_cast<int>(LogLevel::kFatal); ++i) {
    if (EqualsIgnoreCase(text, kLevelNames[i])) return static_cast<LogLevel>(i);
  }
  return std::nullopt;
}

void SetLogLevel(LogLevel level) { Logger().level.store(static_cast<int>(level), std::memory_order_relaxed); }

LogLevel GetLogLevel() { return static_cast<LogLevel>(Logger().level.load(std::memory_order_relaxed)); }

bool LogEnabled(LogLevel level) { return static_cast<int>(level) >= Logger().level.load(std::memory_order_relaxed); }

void SetLogRank(int rank) { Logger().rank.store(rank, std::memory_order_relaxed); }

void SetLogShowTime(bool show) { Logger().logger->set_pattern(show ? kPatternWithTime : kPatternWithoutTime); }

namespace log_internal {

LogMessage::~LogMessage() {
  const int rank = Logger().rank.load(std::memory_order_relaxed);
  const std::string text = stream_.str();
  if (rank >= 0) {
    Logger().logger->log(SpdlogLevel(level_), "[accord {} rank {}] {}", LogLevelName(level_), rank, text);
  } else {
    Logger().logger->log(SpdlogLevel(level_), "[accord {}] {}", LogLevelName(level_), text);
  }
}

}  // namespace log_internal
}  // namespace accord
