// Tests for the timeline's page padding (timeline/timeline.h): a write that
// a SIGKILL cuts short at a page boundary must end on a line end. The killed
// process itself is tested by tests/python/timeline_kill_check.py.
#include "timeline/timeline.h"

#include <unistd.h>

#include <catch2/catch.hpp>

#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace accord {
namespace {

constexpr int64_t kPage = kTimelinePageBytes;

std::vector<std::string> SplitLines(const std::string& text) {
  std::vector<std::string> lines;
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    end = end == std::string::npos ? text.size() : end + 1;
    lines.push_back(text.substr(begin, end - begin));
    begin = end;
  }
  return lines;
}

bool IsFiller(const std::string& line) { return line.find_first_not_of(" \n") == std::string::npos; }

// Every page boundary inside `text` (written at `offset`) follows a '\n'.
void CheckBoundariesOnLineEnds(const std::string& text, int64_t offset) {
  for (int64_t b = (offset / kPage + 1) * kPage; b < offset + static_cast<int64_t>(text.size()); b += kPage) {
    INFO("page boundary at file offset " << b);
    CHECK(text[static_cast<size_t>(b - offset - 1)] == '\n');
  }
}

TEST_CASE("PadLinesToPages keeps every line of at most a page inside one page") {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> short_length(2, 700);  // "\n" alone would read as filler
  for (int trial = 0; trial < 200; ++trial) {
    const int64_t offset = std::uniform_int_distribution<int64_t>(0, 3 * kPage)(rng);
    std::string lines;
    const int count = std::uniform_int_distribution<int>(0, 60)(rng);
    for (int i = 0; i < count; ++i) {
      // Now and then a line of exactly a page, or longer than one.
      const int pick = std::uniform_int_distribution<int>(0, 19)(rng);
      const int64_t length = pick == 0 ? kPage : pick == 1 ? kPage + 300 : short_length(rng);
      lines += std::string(static_cast<size_t>(length - 1), static_cast<char>('a' + i % 26)) + "\n";
    }
    const std::string padded = PadLinesToPages(lines, offset);
    INFO("trial " << trial << ", offset " << offset);

    std::string unpadded;
    int64_t at = offset;
    int64_t filler = 0;  // length of the filler just before, 0 if none
    for (const std::string& line : SplitLines(padded)) {
      const int64_t length = static_cast<int64_t>(line.size());
      if (IsFiller(line)) {
        CHECK(filler == 0);
        CHECK((at + length) % kPage == 0);  // filler runs up to a boundary
        filler = length;
      } else {
        unpadded += line;
        if (length <= kPage) CHECK(at / kPage == (at + length - 1) / kPage);
        // Filler only where the line would not have fitted in the room left.
        if (filler > 0) CHECK(length > filler);
        filler = 0;
      }
      at += length;
    }
    CHECK(filler == 0);
    CHECK(unpadded == lines);
  }
}

TEST_CASE("PadLinesToPages adds nothing to lines that already fit") {
  const std::string lines = std::string(99, 'x') + "\n" + std::string(99, 'y') + "\n";
  CHECK(PadLinesToPages(lines, 0) == lines);
  CHECK(PadLinesToPages(lines, kPage - 200) == lines);  // ends exactly on the boundary
  CHECK(PadLinesToPages("", 123).empty());
  // A 10-byte line: fits exactly, or moves to the next page after a filler
  // of the room left (a lone '\n' where one byte is left).
  const std::string line = std::string(9, 'z') + "\n";
  CHECK(PadLinesToPages(line, kPage - 10) == line);
  CHECK(PadLinesToPages(line, kPage - 1) == "\n" + line);
  CHECK(PadLinesToPages(line, kPage - 3) == "  \n" + line);
  CHECK(PadLinesToPages(line, 2 * kPage - 9) == std::string(8, ' ') + "\n" + line);
}

TEST_CASE("A timeline file has a line end before every page boundary") {
  const std::string path = "/tmp/accord_timeline_test_" + std::to_string(::getpid()) + ".json";
  Timeline timeline;
  REQUIRE(timeline.Start(path, /*mark_cycles=*/true, /*max_bytes=*/0).ok());
  constexpr int kCycles = 30000;  // about 2.5 MiB of events
  const auto origin = Timeline::Clock::now();
  for (int i = 0; i < kCycles; ++i) {
    timeline.RecordCycle(origin + std::chrono::microseconds(int64_t{i} * 1234567));  // timestamps of every width
  }
  timeline.Stop();

  std::ifstream in(path, std::ios::binary);
  std::stringstream content;
  content << in.rdbuf();
  const std::string text = content.str();
  std::remove(path.c_str());
  REQUIRE(text.size() > static_cast<size_t>(100 * kPage));
  CHECK(text.compare(0, 2, "[\n") == 0);
  CHECK(text.compare(text.size() - 2, 2, "]\n") == 0);
  CheckBoundariesOnLineEnds(text, 0);
  size_t cycles = 0;
  for (size_t at = text.find("\"CYCLE\""); at != std::string::npos; at = text.find("\"CYCLE\"", at + 1)) ++cycles;
  CHECK(cycles == static_cast<size_t>(kCycles));
}

}  // namespace
}  // namespace accord
