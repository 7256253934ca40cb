#include "common/logging.h"

#include <atomic>
#include <cctype>
#include <cstdio>
#include <mutex>
#include <string>

namespace accord {
namespace {

constexpr const char* kLevelNames[] = {"trace", "debug", "info", "warning", "error", "fatal"};

// The logger is process-wide by nature (there is one stderr). It is created
// on first use and never destroyed, so code running in static destructors at
// exit can still log.
struct LoggerState {
  std::atomic<int> level{static_cast<int>(LogLevel::kWarning)};
  std::atomic<int> rank{-1};
  std::mutex write_mutex;  // one line at a time
};

LoggerState& Logger() {
  static LoggerState* state = new LoggerState();
  return *state;
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

void SetLogLevel(LogLevel level) {
  Logger().level.store(static_cast<int>(level), std::memory_order_relaxed);
}

LogLevel GetLogLevel() {
  return static_cast<LogLevel>(Logger().level.load(std::memory_order_relaxed));
}

bool LogEnabled(LogLevel level) {
  return static_cast<int>(level) >= Logger().level.load(std::memory_order_relaxed);
}

void SetLogRank(int rank) { Logger().rank.store(rank, std::memory_order_relaxed); }

namespace log_internal {

LogMessage::~LogMessage() {
  std::string line = "[accord ";
  line += LogLevelName(level_);
  int rank = Logger().rank.load(std::memory_order_relaxed);
  if (rank >= 0) {
    line += " rank ";
    line += std::to_string(rank);
  }
  line += "] ";
  line += stream_.str();
  line += '\n';
  std::lock_guard<std::mutex> lock(Logger().write_mutex);
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

}  // namespace log_internal
}  // namespace accord
