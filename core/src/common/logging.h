// A tiny process-wide logger for accord's own diagnostics.
//
//   ACCORD_LOG(kWarning) << "tensor " << name << " stalled for " << s << " s";
//
// writes one line to stderr:
//
//   [2026-11-21 22:30:05.123] [accord warning rank 3] tensor grad.fc1 stalled for 60 s
//
// ("rank R" is left out until SetLogRank() is called with a rank >= 0; the
// local time is left out after SetLogShowTime(false), which Init() calls
// when ACCORD_LOG_HIDE_TIME is set). spdlog writes the lines underneath;
// it stays private to libaccord (this header does not include it). The
// level argument is one of kTrace, kDebug, kInfo, kWarning, kError, kFatal;
// `ACCORD_LOG(LogLevel::kWarning)` works too. For a level held in a variable
// use ACCORD_LOG_AT(level). The stream expression is not evaluated when the
// level is disabled, so logging below the threshold costs one atomic load.
// kFatal only logs: accord reports failures as Status values and never aborts
// the process from a log statement.
//
// Thread safety: every function and the macros may be called from any thread.
// Each message is built privately and written by one locked sink call, so
// lines from different threads never interleave. The threshold is set once at
// Init() from Config::log_level (default kWarning).
#pragma once

#include <optional>
#include <sstream>
#include <string_view>

namespace accord {

enum class LogLevel { kTrace = 0, kDebug, kInfo, kWarning, kError, kFatal };

// "trace", "debug", "info", "warning", "error", "fatal".
const char* LogLevelName(LogLevel level);
// The inverse of LogLevelName, ignoring ASCII case; nullopt for anything else.
std::optional<LogLevel> ParseLogLevel(std::string_view text);

// Messages below `level` are dropped.
void SetLogLevel(LogLevel level);
LogLevel GetLogLevel();
bool LogEnabled(LogLevel level);
// The rank shown in each line; -1 (the default) shows none.
void SetLogRank(int rank);
// Whether each line starts with the local time (the default: yes).
void SetLogShowTime(bool show);

namespace log_internal {

// One message: collects the text, writes it to stderr when destroyed.
class LogMessage {
 public:
  explicit LogMessage(LogLevel level) : level_(level) {}
  ~LogMessage();
  LogMessage(const LogMessage&) = delete;
  LogMessage& operator=(const LogMessage&) = delete;

  std::ostream& stream() { return stream_; }

 private:
  LogLevel level_;
  std::ostringstream stream_;
};

// Lets ACCORD_LOG(kWarning) and ACCORD_LOG(LogLevel::kWarning) both resolve
// inside this namespace.
using LogLevel = ::accord::LogLevel;
inline constexpr LogLevel kTrace = LogLevel::kTrace;
inline constexpr LogLevel kDebug = LogLevel::kDebug;
inline constexpr LogLevel kInfo = LogLevel::kInfo;
inline constexpr LogLevel kWarning = LogLevel::kWarning;
inline constexpr LogLevel kError = LogLevel::kError;
inline constexpr LogLevel kFatal = LogLevel::kFatal;

}  // namespace log_internal
}  // namespace accord

// `level_expr` is any expression of type accord::LogLevel (evaluated once).
// The if/else shape keeps `if (x) ACCORD_LOG_AT(l) << ...; else ...` correct.
#define ACCORD_LOG_AT(level_expr)                                                                            \
  if (const ::accord::LogLevel accord_log_level_ = (level_expr); !::accord::LogEnabled(accord_log_level_)) { \
  } else                                                                                                     \
    ::accord::log_internal::LogMessage(accord_log_level_).stream()

#define ACCORD_LOG(level) ACCORD_LOG_AT(::accord::log_internal::level)
