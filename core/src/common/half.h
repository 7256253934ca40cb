// Conversions between float and the two 16-bit floating-point formats that
// accord reduces on the CPU: IEEE 754 binary16 ("float16", "half") and
// bfloat16 (the top half of a float32).
//
// Both are stored as raw uint16_t bit patterns; arithmetic happens in float.
// The conversions are plain bit manipulation, so they give the same answer
// on every CPU, in every rounding mode, with or without flush-to-zero, and
// need no F16C/AVX-512 flags at build time. Every function is pure and may be
// called from any thread.
//
// Rounding is round-to-nearest, ties-to-even, like the hardware converters.
// float16: values too large become +-inf, values too small become signed
// zero or a subnormal, NaN stays NaN (its payload is kept where it fits, so
// every float16 bit pattern survives HalfToFloat -> FloatToHalf unchanged).
// bfloat16: NaN stays NaN (quietened), everything else rounds.
#pragma once

#include <cstdint>
#include <cstring>

namespace accord {

namespace half_internal {

inline uint32_t FloatBits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

inline float BitsToFloat(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

// |value| (as float bits, finite) is below float16's smallest normal, 2^-14.
// The result is a float16 subnormal (or zero, or the smallest normal when
// rounding carries), i.e. round(|value| / 2^-24) in the low 10-11 bits.
inline uint16_t FloatToHalfSubnormal(uint32_t abs_bits) {
  const uint32_t exponent = abs_bits >> 23;  // biased float exponent
  // Below 2^-25 every value rounds to zero; 2^-25 itself is a tie that goes
  // to the even neighbour, zero, too (handled by the general path below).
  if (exponent < 102) return 0;
  const uint32_t mantissa = (abs_bits & 0x7FFFFFu) | 0x800000u;
  // value = mantissa * 2^(exponent - 150) = mantissa * 2^(exponent - 126) * 2^-24
  const uint32_t shift = 126 - exponent;  // 14..24
  uint32_t quotient = mantissa >> shift;
  const uint32_t remainder = mantissa & ((1u << shift) - 1);
  const uint32_t halfway = 1u << (shift - 1);
  if (remainder > halfway || (remainder == halfway && (quotient & 1u))) ++quotient;
  return static_cast<uint16_t>(quotient);
}

}  // namespace half_internal

// float -> IEEE binary16 bits.
inline uint16_t FloatToHalf(float value) {
  const uint32_t bits = half_internal::FloatBits(value);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t abs_bits = bits & 0x7FFFFFFFu;

  if (abs_bits > 0x7F800000u) {  // NaN: keep the top 10 payload bits
    uint32_t payload = (abs_bits >> 13) & 0x3FFu;
    if (payload == 0) payload = 0x200u;  // the kept bits were all zero: stay NaN, not inf
    return static_cast<uint16_t>(sign | 0x7C00u | payload);
  }
  // 65520 is halfway between 65504 (largest float16) and 65536; the tie
  // rounds to the even mantissa, which overflows to inf. So does inf.
  if (abs_bits >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);
  if (abs_bits < 0x38800000u) {  // below 2^-14: subnormal or zero
    return static_cast<uint16_t>(sign | half_internal::FloatToHalfSubnormal(abs_bits));
  }
  // Normal: rebias the exponent (127 -> 15) and drop 13 mantissa bits with
  // round-to-nearest-even. A carry out of the mantissa bumps the exponent,
  // which is exactly the right result.
  const uint32_t odd = (abs_bits >> 13) & 1u;
  const uint32_t rounded = abs_bits + 0xFFFu + odd;
  return static_cast<uint16_t>(sign | ((rounded - (112u << 23)) >> 13));
}

// IEEE binary16 bits -> float (exact: every float16 is a float).
inline float HalfToFloat(uint16_t half) {
  const uint32_t sign = static_cast<uint32_t>(half & 0x8000u) << 16;
  const uint32_t exponent = (half >> 10) & 0x1Fu;
  uint32_t mantissa = half & 0x3FFu;

  if (exponent == 0x1Fu) {  // inf or NaN (payload kept)
    return half_internal::BitsToFloat(sign | 0x7F800000u | (mantissa << 13));
  }
  if (exponent != 0) {  // normal
    return half_internal::BitsToFloat(sign | ((exponent + 112u) << 23) | (mantissa << 13));
  }
  if (mantissa == 0) return half_internal::BitsToFloat(sign);  // +-0
  // Subnormal: mantissa * 2^-24. Normalise so the leading 1 sits at bit 10.
  int float_exponent = 127 - 14;
  while ((mantissa & 0x400u) == 0) {
    mantissa <<= 1;
    --float_exponent;
  }
  mantissa &= 0x3FFu;
  return half_internal::BitsToFloat(sign | (static_cast<uint32_t>(float_exponent) << 23) |
                                    (mantissa << 13));
}

// float -> bfloat16 bits, round-to-nearest-even.
inline uint16_t FloatToBFloat16(float value) {
  const uint32_t bits = half_internal::FloatBits(value);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) {
    // Truncating could clear every payload bit and turn NaN into inf: set
    // the quiet bit instead.
    return static_cast<uint16_t>((bits >> 16) | 0x40u);
  }
  const uint32_t odd = (bits >> 16) & 1u;
  return static_cast<uint16_t>((bits + 0x7FFFu + odd) >> 16);
}

// bfloat16 bits -> float (exact).
inline float BFloat16ToFloat(uint16_t bfloat16) {
  return half_internal::BitsToFloat(static_cast<uint32_t>(bfloat16) << 16);
}

}  // namespace accord
