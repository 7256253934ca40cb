// Tests for the logger: level names, filtering, the line format, rank, and
// that lines from concurrent threads never interleave.
#include "common/logging.h"

#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdio>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace accord {
namespace {

// Redirects file descriptor 2 into a temporary file while alive.
class StderrCapture {
 public:
  StderrCapture() : file_(std::tmpfile()) {
    std::fflush(stderr);
    saved_fd_ = dup(STDERR_FILENO);
    dup2(fileno(file_), STDERR_FILENO);
  }
  ~StderrCapture() { Restore(); }

  // Stops capturing and returns everything written meanwhile.
  std::string Finish() {
    Restore();
    std::string text;
    std::rewind(file_);
    char buffer[4096];
    size_t n;
    while ((n = std::fread(buffer, 1, sizeof(buffer), file_)) > 0) text.append(buffer, n);
    return text;
  }

 private:
  void Restore() {
    if (saved_fd_ < 0) return;
    std::fflush(stderr);
    dup2(saved_fd_, STDERR_FILENO);
    close(saved_fd_);
    saved_fd_ = -1;
  }

  std::FILE* file_;
  int saved_fd_ = -1;
};

// Hides the time (so lines can be compared exactly) and puts the logger
// back to its defaults when a test ends.
struct LoggerReset {
  LoggerReset() { SetLogShowTime(false); }
  ~LoggerReset() {
    SetLogLevel(LogLevel::kWarning);
    SetLogRank(-1);
    SetLogShowTime(true);
  }
};

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

TEST_CASE("LogLevel names round-trip", "[logging]") {
  const char* names[] = {"trace", "debug", "info", "warning", "error", "fatal"};
  for (int i = 0; i < 6; ++i) {
    auto level = static_cast<LogLevel>(i);
    INFO("level " << i << " expected name " << names[i]);
    CHECK(std::string(LogLevelName(level)) == names[i]);
    CHECK(ParseLogLevel(names[i]) == level);
  }
  CHECK(ParseLogLevel("WARNING") == LogLevel::kWarning);
  CHECK(ParseLogLevel("Error") == LogLevel::kError);
  CHECK_FALSE(ParseLogLevel("").has_value());
  CHECK_FALSE(ParseLogLevel("warn").has_value());
  CHECK_FALSE(ParseLogLevel("warnings").has_value());
}

TEST_CASE("LogEnabled follows SetLogLevel", "[logging]") {
  LoggerReset reset;
  CHECK(GetLogLevel() == LogLevel::kWarning);
  CHECK_FALSE(LogEnabled(LogLevel::kInfo));
  CHECK(LogEnabled(LogLevel::kWarning));
  CHECK(LogEnabled(LogLevel::kFatal));
  SetLogLevel(LogLevel::kTrace);
  CHECK(LogEnabled(LogLevel::kTrace));
  SetLogLevel(LogLevel::kFatal);
  CHECK_FALSE(LogEnabled(LogLevel::kError));
  CHECK(LogEnabled(LogLevel::kFatal));
}

TEST_CASE("ACCORD_LOG writes one formatted line, with the rank once it is set", "[logging]") {
  LoggerReset reset;
  StderrCapture capture;
  ACCORD_LOG(kWarning) << "no rank " << 1;
  SetLogRank(3);
  ACCORD_LOG(LogLevel::kError) << "tensor "
                               << "grad.fc1"
                               << " failed";
  ACCORD_LOG(kInfo) << "dropped: below the threshold";
  ACCORD_LOG_AT(LogLevel::kFatal) << "fatal only logs";
  std::vector<std::string> lines = Lines(capture.Finish());
  REQUIRE(lines.size() == 3);
  CHECK(lines[0] == "[accord warning] no rank 1");
  CHECK(lines[1] == "[accord error rank 3] tensor grad.fc1 failed");
  CHECK(lines[2] == "[accord fatal rank 3] fatal only logs");
}

TEST_CASE("ACCORD_LOG starts each line with the local time unless hidden", "[logging]") {
  LoggerReset reset;
  SetLogShowTime(true);
  SetLogRank(2);
  StderrCapture capture;
  ACCORD_LOG(kWarning) << "with time";
  SetLogShowTime(false);
  ACCORD_LOG(kWarning) << "without time";
  std::vector<std::string> lines = Lines(capture.Finish());
  REQUIRE(lines.size() == 2);
  INFO(lines[0]);
  CHECK(std::regex_match(
      lines[0], std::regex(R"(\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}\] \[accord warning rank 2\] with time)")));
  CHECK(lines[1] == "[accord warning rank 2] without time");
}

TEST_CASE("ACCORD_LOG does not evaluate its stream when disabled", "[logging]") {
  LoggerReset reset;
  int evaluated = 0;
  auto count = [&] { return ++evaluated; };
  StderrCapture capture;
  ACCORD_LOG(kDebug) << count();
  SetLogLevel(LogLevel::kDebug);
  ACCORD_LOG(kDebug) << count();
  std::string text = capture.Finish();
  CHECK(evaluated == 1);
  CHECK(text == "[accord debug] 1\n");
}

TEST_CASE("ACCORD_LOG binds correctly inside if/else", "[logging]") {
  LoggerReset reset;
  StderrCapture capture;
  bool took_else = false;
  for (bool condition : {true, false}) {
    if (condition)
      ACCORD_LOG(kWarning) << "then";
    else
      took_else = true;
  }
  std::string text = capture.Finish();
  CHECK(took_else);
  CHECK(text == "[accord warning] then\n");
}

TEST_CASE("Lines from concurrent threads do not interleave", "[logging]") {
  LoggerReset reset;
  SetLogRank(0);
  constexpr int kThreads = 4;
  constexpr int kMessages = 200;
  StderrCapture capture;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t] {
      for (int i = 0; i < kMessages; ++i) {
        ACCORD_LOG(kError) << "thread " << t << " message " << i << " " << std::string(100, 'a' + t);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  std::vector<std::string> lines = Lines(capture.Finish());
  REQUIRE(lines.size() == kThreads * kMessages);
  std::vector<int> next(kThreads, 0);  // each thread's lines appear in its own order
  for (size_t index = 0; index < lines.size(); ++index) {
    const std::string& line = lines[index];
    int t = -1;
    int i = -1;
    int matched = std::sscanf(line.c_str(), "[accord error rank 0] thread %d message %d", &t, &i);
    INFO("line " << index << ": " << line);
    REQUIRE(matched == 2);
    REQUIRE((t >= 0 && t < kThreads));
    std::string expected = "[accord error rank 0] thread " + std::to_string(t) + " message " + std::to_string(next[t]) +
                           " " + std::string(100, 'a' + t);
    CHECK(line == expected);
    ++next[t];
  }
}

}  // namespace
}  // namespace accord
