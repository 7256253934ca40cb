// Tests for FusionBuffer: 2 MiB-aligned memory in whole 2 MiB units that
// grows on demand, keeps its contents' address while large enough, and is
// writable end to end.
#include "fusion/fusion_buffer.h"

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>

namespace accord {
namespace {

bool Aligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % FusionBuffer::kUnit == 0; }

// The kernel's transparent huge page mode ("[madvise]" etc.), or "" if unknown.
std::string ThpMode() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  std::getline(in, line);
  const auto open = line.find('['), close = line.find(']');
  return open == std::string::npos || close == std::string::npos ? "" : line.substr(open + 1, close - open - 1);
}

TEST_CASE("FusionBuffer starts empty and grows in 2 MiB units, aligned", "[fusion]") {
  FusionBuffer buffer;
  CHECK(buffer.capacity() == 0);
  char* a = static_cast<char*>(buffer.Get(1));
  REQUIRE(a != nullptr);
  CHECK(Aligned(a));
  CHECK(buffer.capacity() == FusionBuffer::kUnit);
  // Smaller or equal requests reuse the same memory.
  CHECK(buffer.Get(FusionBuffer::kUnit) == a);
  CHECK(buffer.Get(100) == a);
  // A larger one maps enough whole units.
  char* b = static_cast<char*>(buffer.Get(3 * FusionBuffer::kUnit + 5));
  REQUIRE(b != nullptr);
  CHECK(Aligned(b));
  CHECK(buffer.capacity() == 4 * FusionBuffer::kUnit);
}

TEST_CASE("FusionBuffer maps a whole unit for a request of 0 bytes", "[fusion]") {
  FusionBuffer buffer;
  auto* p = static_cast<unsigned char*>(buffer.Get(0));
  REQUIRE(p != nullptr);
  CHECK(Aligned(p));
  CHECK(buffer.capacity() == FusionBuffer::kUnit);
  p[0] = 1;
  p[FusionBuffer::kUnit - 1] = 2;
  CHECK(p[0] + p[FusionBuffer::kUnit - 1] == 3);
}

TEST_CASE("FusionBuffer memory is writable and readable end to end", "[fusion]") {
  FusionBuffer buffer;
  const size_t bytes = 5 * FusionBuffer::kUnit / 2;
  auto* p = static_cast<unsigned char*>(buffer.Get(bytes));
  REQUIRE(p != nullptr);
  for (size_t i = 0; i < buffer.capacity(); i += 4093) p[i] = static_cast<unsigned char>(i * 7);
  p[buffer.capacity() - 1] = 0xAB;
  for (size_t i = 0; i < buffer.capacity(); i += 4093) {
    INFO("byte " << i);
    REQUIRE(p[i] == static_cast<unsigned char>(i * 7));
  }
  CHECK(p[buffer.capacity() - 1] == 0xAB);
}

TEST_CASE("FusionBuffer offers its memory for huge pages where the kernel takes advice", "[fusion]") {
  FusionBuffer buffer;
  REQUIRE(buffer.Get(1) != nullptr);
  const std::string mode = ThpMode();
  INFO("transparent_hugepage mode: '" << mode << "'");
  // madvise(MADV_HUGEPAGE) succeeds wherever THP is compiled in, whatever
  // the mode; the mode decides whether the advice is followed.
  if (mode == "always" || mode == "madvise") CHECK(buffer.huge_pages_advised());
  if (mode.empty()) SUCCEED("no transparent huge page support on this kernel");
}

}  // namespace
}  // namespace accord
