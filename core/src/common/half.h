// Conversions between float and the two 16-bit floating-point formats that
// accord reduces on the CPU: IEEE 754 binary16 ("float16", "half") and
// bfloat16 (the top half of a float32).
//
// Both are stored as raw uint16_t bit patterns; arithmetic happens in float.
// The conversions are plain bit manipulation (plus, for float16 subnormals,
// one float addition that does the rounding), written without branches so
// that a compiler can vectorise loops over them. They give the same answer on every CPU,
// with or without flush-to-zero/denormals-are-zero, and need no F16C/AVX
// flags at build time (dtype_kernels.cc picks F16C at run time for bulk
// work). They assume the default round-to-nearest FPU rounding mode, which no
// deep-learning framework changes. Every function is pure and may be called
// from any thread. They compile for the GPU too (ACCORD_HOST_DEVICE): the
// CUDA pack/unpack kernel converts float16 with the GPU's own converters,
// which round the same way (the NaNs excepted, which take the code below), so
// the GPU path and the CPU path round every element the same way.
//
// Rounding is round-to-nearest, ties-to-even, like the hardware converters.
// float16: values too large become +-inf, values too small become signed
// zero or a subnormal, NaN stays NaN (its payload is kept where it fits, so
// every float16 bit pattern survives HalfToFloat -> FloatToHalf unchanged).
// bfloat16: NaN stays NaN (quietened), everything else rounds.
#pragma once

#include <cstdint>

#include "common/nvcc_annotations.h"

#if defined(__CUDA_ARCH__)
#include <cuda_fp16.h>
#endif

namespace accord {

namespace half_internal {

// __builtin_memcpy rather than std::memcpy: nvcc accepts it in device code.
ACCORD_HOST_DEVICE inline uint32_t FloatBits(float value) {
  uint32_t bits;
  __builtin_memcpy(&bits, &value, sizeof(bits));
  return bits;
}

ACCORD_HOST_DEVICE inline float BitsToFloat(uint32_t bits) {
  float value;
  __builtin_memcpy(&value, &bits, sizeof(value));
  return value;
}

// The float16 NaN for a float NaN's magnitude bits: the top 10 payload bits
// kept; if they are all zero, the quiet bit set, so that it stays NaN
// instead of becoming inf.
ACCORD_HOST_DEVICE inline uint32_t HalfNaN(uint32_t abs_bits) {
  const uint32_t nan = 0x7C00u | ((abs_bits >> 13) & 0x3FFu);
  return nan == 0x7C00u ? 0x7E00u : nan;
}

}  // namespace half_internal

// float -> IEEE binary16 bits. Every case is computed, then selected.
ACCORD_HOST_DEVICE inline uint16_t FloatToHalf(float value) {
  using half_internal::BitsToFloat;
  using half_internal::FloatBits;
  const uint32_t bits = FloatBits(value);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const uint32_t abs_bits = bits & 0x7FFFFFFFu;
#if defined(__CUDA_ARCH__)
  // The GPU's converter rounds as the code below does (to nearest-even,
  // subnormals and overflow to inf included) in one instruction, where the
  // code below takes some twenty: a scaled float16 copy is bound by them.
  // Only a NaN comes out differently (the canonical one), so a NaN keeps
  // its payload as below.
  return static_cast<uint16_t>(abs_bits > 0x7F800000u ? sign | half_internal::HalfNaN(abs_bits)
                                                      : __half_as_ushort(__float2half_rn(value)));
#else
  // Normal range [2^-14, 65520): rebias the exponent (127 -> 15) and drop 13
  // mantissa bits, rounding to nearest-even. A carry out of the mantissa bumps
  // the exponent, which is exactly the right result.
  const uint32_t odd = (abs_bits >> 13) & 1u;
  uint32_t half = (abs_bits + 0xFFFu + odd - (112u << 23)) >> 13;
  // 65520 is halfway between 65504 (the largest float16) and 65536; the tie
  // rounds to the even mantissa, which overflows to inf. So does inf.
  half = abs_bits >= 0x477FF000u ? 0x7C00u : half;
  half = abs_bits > 0x7F800000u ? half_internal::HalfNaN(abs_bits) : half;
  // Below 2^-14 the result is a multiple of 2^-24 (a subnormal, zero, or the
  // smallest normal when rounding carries). Adding 0.5 (whose ulp is 2^-24)
  // rounds |value| to that multiple, to nearest-even, in the FPU; the count
  // of 2^-24 steps is then the low bits of the sum. The sum is a normal
  // float, so flush-to-zero cannot disturb it; denormals-are-zero only
  // zeroes float subnormals, which round to zero here anyway.
  const uint32_t subnormal = FloatBits(BitsToFloat(abs_bits) + 0.5f) - 0x3F000000u;
  half = abs_bits < 0x38800000u ? subnormal : half;
  return static_cast<uint16_t>(sign | half);
#endif
}

// IEEE binary16 bits -> float (exact: every float16 is a float).
ACCORD_HOST_DEVICE inline float HalfToFloat(uint16_t half) {
  using half_internal::BitsToFloat;
  using half_internal::FloatBits;
  const uint32_t sign = static_cast<uint32_t>(half & 0x8000u) << 16;
  const uint32_t magnitude = half & 0x7FFFu;  // exponent and mantissa
#if defined(__CUDA_ARCH__)
  // Exact on the GPU's converter too; a NaN keeps its payload as below.
  return magnitude > 0x7C00u ? BitsToFloat(sign | ((magnitude << 13) + (224u << 23)))
                             : __half2float(__ushort_as_half(static_cast<unsigned short>(half)));
#else
  // Normal: rebias the exponent (15 -> 127) and widen the mantissa.
  uint32_t bits = (magnitude << 13) + (112u << 23);
  // Inf/NaN: the exponent must become all ones (payload kept).
  bits = magnitude >= 0x7C00u ? bits + (112u << 23) : bits;
  // Zero/subnormal: the value is magnitude * 2^-24, computed exactly in float
  // (no float subnormal is involved, so flush-to-zero modes do not matter).
  const uint32_t small = FloatBits(static_cast<float>(magnitude) * 0x1p-24f);
  bits = magnitude < 0x0400u ? small : bits;
  return BitsToFloat(sign | bits);
#endif
}

// float -> bfloat16 bits, round-to-nearest-even.
ACCORD_HOST_DEVICE inline uint16_t FloatToBFloat16(float value) {
  const uint32_t bits = half_internal::FloatBits(value);
  const uint32_t odd = (bits >> 16) & 1u;
  const uint32_t rounded = (bits + 0x7FFFu + odd) >> 16;
  // Rounding or truncating a NaN could carry into the sign or clear every
  // payload bit (making it inf): keep the top half and set the quiet bit.
  const uint32_t nan = (bits >> 16) | 0x40u;
  return static_cast<uint16_t>((bits & 0x7FFFFFFFu) > 0x7F800000u ? nan : rounded);
}

// bfloat16 bits -> float (exact).
ACCORD_HOST_DEVICE inline float BFloat16ToFloat(uint16_t bfloat16) {
  return half_internal::BitsToFloat(static_cast<uint32_t>(bfloat16) << 16);
}

}  // namespace accord
