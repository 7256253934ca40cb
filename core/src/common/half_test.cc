// Tests for common/half.h: float16 and bfloat16 conversions.
#include "common/half.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>

namespace accord {
namespace {

std::string Hex(uint32_t bits) {
  char text[16];
  std::snprintf(text, sizeof(text), "0x%04x", bits);
  return text;
}

// Records up to a few mismatches with their details, so a broken converter
// fails with readable examples instead of 65536 assertions.
class Mismatches {
 public:
  void Add(const std::string& what) {
    if (count_ < 10) FAIL_CHECK(what);
    ++count_;
  }
  int count() const { return count_; }

 private:
  int count_ = 0;
};

// The value of a float16 bit pattern, computed from the definition of the
// format rather than by bit shuffling.
double HalfReference(uint16_t half) {
  const int sign = half >> 15;
  const int exponent = (half >> 10) & 0x1F;
  const int mantissa = half & 0x3FF;
  double magnitude;
  if (exponent == 0) {
    magnitude = std::ldexp(static_cast<double>(mantissa), -24);
  } else if (exponent == 31) {
    magnitude = mantissa == 0 ? std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
  } else {
    magnitude = std::ldexp(1.0 + mantissa / 1024.0, exponent - 15);
  }
  return sign ? -magnitude : magnitude;
}

bool IsHalfNaN(uint16_t half) { return (half & 0x7C00) == 0x7C00 && (half & 0x3FF) != 0; }

float FloatFromBits(uint32_t bits) { return half_internal::BitsToFloat(bits); }

TEST_CASE("HalfToFloat gives the exact value of every float16 bit pattern", "[half]") {
  Mismatches mismatches;
  for (uint32_t bits = 0; bits <= 0xFFFF; ++bits) {
    const uint16_t half = static_cast<uint16_t>(bits);
    const float got = HalfToFloat(half);
    const double expected = HalfReference(half);
    if (IsHalfNaN(half)) {
      if (!std::isnan(got)) mismatches.Add("index " + Hex(bits) + ": expected NaN, got " + std::to_string(got));
    } else if (static_cast<double>(got) != expected || std::signbit(got) != std::signbit(expected)) {
      mismatches.Add("index " + Hex(bits) + ": expected " + std::to_string(expected) + ", got " + std::to_string(got));
    }
  }
  CHECK(mismatches.count() == 0);
}

TEST_CASE("every float16 bit pattern survives HalfToFloat then FloatToHalf", "[half]") {
  Mismatches mismatches;
  for (uint32_t bits = 0; bits <= 0xFFFF; ++bits) {
    const uint16_t half = static_cast<uint16_t>(bits);
    const uint16_t back = FloatToHalf(HalfToFloat(half));
    // NaNs keep their sign and payload too, so every pattern comes back bit-exact.
    if (back != half) mismatches.Add("index " + Hex(bits) + ": expected " + Hex(half) + ", got " + Hex(back));
    if (IsHalfNaN(half) && !IsHalfNaN(back)) mismatches.Add("index " + Hex(bits) + ": NaN lost");
  }
  CHECK(mismatches.count() == 0);
}

// For every pair of neighbouring finite float16 values (both signs, across
// the subnormal/normal boundary), the midpoint rounds to the neighbour with an
// even mantissa, and anything strictly between rounds to the nearer one.
TEST_CASE("FloatToHalf rounds to nearest, ties to even", "[half]") {
  Mismatches mismatches;
  for (uint32_t sign : {0x0000u, 0x8000u}) {
    for (uint32_t low = 0; low < 0x7BFF; ++low) {
      const uint16_t a = static_cast<uint16_t>(sign | low);
      const uint16_t b = static_cast<uint16_t>(sign | (low + 1));
      const float fa = HalfToFloat(a);
      const float fb = HalfToFloat(b);
      const float mid = (fa + fb) / 2;  // exact: float has 13 more mantissa bits
      const uint16_t even = (low & 1) ? b : a;
      const float toward_a = std::nextafter(mid, fa);
      const float toward_b = std::nextafter(mid, fb);
      const struct {
        float in;
        uint16_t expected;
      } cases[] = {{mid, even}, {toward_a, a}, {toward_b, b}};
      for (const auto& c : cases) {
        const uint16_t got = FloatToHalf(c.in);
        if (got != c.expected) {
          mismatches.Add("index " + Hex(low) + " sign " + Hex(sign) + ": input " + std::to_string(c.in) + " expected " +
                         Hex(c.expected) + ", got " + Hex(got));
        }
      }
    }
  }
  CHECK(mismatches.count() == 0);
}

TEST_CASE("FloatToHalf overflows to infinity", "[half]") {
  const float inf = std::numeric_limits<float>::infinity();
  CHECK(FloatToHalf(65504.0f) == 0x7BFF);
  CHECK(FloatToHalf(std::nextafter(65520.0f, 0.0f)) == 0x7BFF);
  CHECK(FloatToHalf(65520.0f) == 0x7C00);  // the tie goes to the even side: inf
  CHECK(FloatToHalf(65536.0f) == 0x7C00);
  CHECK(FloatToHalf(1e10f) == 0x7C00);
  CHECK(FloatToHalf(std::numeric_limits<float>::max()) == 0x7C00);
  CHECK(FloatToHalf(inf) == 0x7C00);
  CHECK(FloatToHalf(-65520.0f) == 0xFC00);
  CHECK(FloatToHalf(-inf) == 0xFC00);
  CHECK(HalfToFloat(0x7C00) == inf);
  CHECK(HalfToFloat(0xFC00) == -inf);
}

TEST_CASE("FloatToHalf handles subnormals and underflow", "[half]") {
  const float tiny = std::ldexp(1.0f, -24);  // smallest float16 subnormal
  CHECK(FloatToHalf(tiny) == 0x0001);
  CHECK(FloatToHalf(-tiny) == 0x8001);
  CHECK(FloatToHalf(tiny / 2) == 0x0000);  // tie between 0 and tiny: even is 0
  CHECK(FloatToHalf(std::nextafter(tiny / 2, 1.0f)) == 0x0001);
  CHECK(FloatToHalf(-tiny / 2) == 0x8000);
  CHECK(FloatToHalf(tiny * 1.5f) == 0x0002);     // tie between 1 and 2 ulps: 2
  CHECK(FloatToHalf(tiny * 2.5f) == 0x0002);     // tie between 2 and 3 ulps: 2
  CHECK(FloatToHalf(tiny * 1023.0f) == 0x03FF);  // largest subnormal
  CHECK(FloatToHalf(tiny * 1023.5f) == 0x0400);  // rounds up to the smallest normal
  CHECK(FloatToHalf(std::ldexp(1.0f, -14)) == 0x0400);
  CHECK(FloatToHalf(std::ldexp(1.0f, -30)) == 0x0000);
  CHECK(FloatToHalf(std::numeric_limits<float>::min()) == 0x0000);
  CHECK(FloatToHalf(std::numeric_limits<float>::denorm_min()) == 0x0000);
  CHECK(FloatToHalf(-std::numeric_limits<float>::denorm_min()) == 0x8000);
  CHECK(FloatToHalf(0.0f) == 0x0000);
  CHECK(FloatToHalf(-0.0f) == 0x8000);
  CHECK(HalfToFloat(0x0001) == tiny);
  CHECK(HalfToFloat(0x03FF) == tiny * 1023.0f);
  CHECK(std::signbit(HalfToFloat(0x8000)));
}

TEST_CASE("FloatToHalf keeps NaN a NaN", "[half]") {
  CHECK(IsHalfNaN(FloatToHalf(std::numeric_limits<float>::quiet_NaN())));
  CHECK(IsHalfNaN(FloatToHalf(-std::numeric_limits<float>::quiet_NaN())));
  CHECK((FloatToHalf(-std::numeric_limits<float>::quiet_NaN()) & 0x8000) != 0);
  // Only low payload bits set: truncation alone would give inf.
  CHECK(IsHalfNaN(FloatToHalf(FloatFromBits(0x7F800001u))));
  CHECK(IsHalfNaN(FloatToHalf(FloatFromBits(0xFF800FFFu))));
  CHECK(std::isnan(HalfToFloat(0x7E00)));
  CHECK(std::isnan(HalfToFloat(0x7C01)));
}

TEST_CASE("FloatToHalf on ordinary values", "[half]") {
  CHECK(FloatToHalf(1.0f) == 0x3C00);
  CHECK(FloatToHalf(-2.0f) == 0xC000);
  CHECK(FloatToHalf(0.5f) == 0x3800);
  CHECK(FloatToHalf(1.0f / 3.0f) == 0x3555);
  CHECK(FloatToHalf(3.14159265f) == 0x4248);
  CHECK(FloatToHalf(1.0f + std::ldexp(1.0f, -11)) == 0x3C00);      // tie: even (1.0)
  CHECK(FloatToHalf(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3C02);  // tie: even (1+2^-9)
  CHECK(HalfToFloat(0x3555) == Approx(1.0 / 3.0).epsilon(1e-3));
}

TEST_CASE("bfloat16 round trips every non-NaN bit pattern", "[half][bfloat16]") {
  Mismatches mismatches;
  for (uint32_t bits = 0; bits <= 0xFFFF; ++bits) {
    const uint16_t bf = static_cast<uint16_t>(bits);
    const float value = BFloat16ToFloat(bf);
    if (half_internal::FloatBits(value) != (bits << 16)) {
      mismatches.Add("index " + Hex(bits) + ": BFloat16ToFloat is not the top half");
    }
    const uint16_t back = FloatToBFloat16(value);
    const bool is_nan = (bits & 0x7F80) == 0x7F80 && (bits & 0x7F) != 0;
    if (is_nan) {
      if (!std::isnan(BFloat16ToFloat(back)) || (back & 0x8000) != (bf & 0x8000)) {
        mismatches.Add("index " + Hex(bits) + ": expected NaN with the same sign, got " + Hex(back));
      }
    } else if (back != bf) {
      mismatches.Add("index " + Hex(bits) + ": expected " + Hex(bf) + ", got " + Hex(back));
    }
  }
  CHECK(mismatches.count() == 0);
}

TEST_CASE("FloatToBFloat16 rounds to nearest, ties to even", "[half][bfloat16]") {
  Mismatches mismatches;
  for (uint32_t sign : {0x0000u, 0x8000u}) {
    for (uint32_t low = 0; low < 0x7F7F; ++low) {
      const uint16_t a = static_cast<uint16_t>(sign | low);
      const uint16_t b = static_cast<uint16_t>(sign | (low + 1));
      const uint32_t mid_bits = ((sign | low) << 16) | 0x8000u;  // exactly halfway
      const uint16_t even = (low & 1) ? b : a;
      const struct {
        uint32_t in;
        uint16_t expected;
      } cases[] = {{mid_bits, even}, {mid_bits - 1, a}, {mid_bits + 1, b}};
      for (const auto& c : cases) {
        const uint16_t got = FloatToBFloat16(FloatFromBits(c.in));
        if (got != c.expected) {
          mismatches.Add("index " + Hex(low) + " sign " + Hex(sign) + ": input bits " + Hex(c.in) + " expected " +
                         Hex(c.expected) + ", got " + Hex(got));
        }
      }
    }
  }
  CHECK(mismatches.count() == 0);
}

TEST_CASE("FloatToBFloat16 special values", "[half][bfloat16]") {
  const float inf = std::numeric_limits<float>::infinity();
  CHECK(FloatToBFloat16(1.0f) == 0x3F80);
  CHECK(FloatToBFloat16(1.0f + std::ldexp(1.0f, -8)) == 0x3F80);      // tie: even
  CHECK(FloatToBFloat16(1.0f + 3 * std::ldexp(1.0f, -8)) == 0x3F82);  // tie: even
  CHECK(FloatToBFloat16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)) == 0x3F81);
  CHECK(FloatToBFloat16(std::numeric_limits<float>::max()) == 0x7F80);  // rounds to inf
  CHECK(FloatToBFloat16(FloatFromBits(0x7F7F7FFFu)) == 0x7F7F);
  CHECK(FloatToBFloat16(inf) == 0x7F80);
  CHECK(FloatToBFloat16(-inf) == 0xFF80);
  CHECK(FloatToBFloat16(-0.0f) == 0x8000);
  CHECK(FloatToBFloat16(std::numeric_limits<float>::denorm_min()) == 0x0000);
  const uint16_t nan = FloatToBFloat16(FloatFromBits(0x7F800001u));  // truncation would be inf
  CHECK(std::isnan(BFloat16ToFloat(nan)));
  CHECK(std::isnan(BFloat16ToFloat(FloatToBFloat16(std::numeric_limits<float>::quiet_NaN()))));
  CHECK(BFloat16ToFloat(0x4049) == 3.140625f);
}

}  // namespace
}  // namespace accord
