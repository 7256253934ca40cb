// Element-wise loops over buffers of any accord DataType: scaling copies,
// zero fill, and in-place reductions.
//
// They are the arithmetic of the CPU data path: packing tensors into the
// fusion buffer with the prescale factor, unpacking with the postscale
// factor, and the MPI user-defined ops for float16/bfloat16. Each call
// dispatches on dtype (and op) once, then runs a tight loop over the elements.
//
// Pure functions over caller-owned memory: any thread may call them, as long
// as no other thread writes the same bytes at the same time. `n` is a count of
// elements, not bytes; n <= 0 does nothing.
//
// Arithmetic per dtype:
//   float16, bfloat16  computed in float, rounded back to nearest-even (with
//                      the F16C instructions where the CPU has them)
//   float32            computed in float
//   float64            computed in double
//   integers           ScaleCopy: computed in double, rounded toward zero,
//                      saturated to the type's range (NaN becomes 0);
//                      ReduceInto Sum/Product: wrap modulo 2^bits, like
//                      unsigned arithmetic; Min/Max: exact
//   bool (1 byte 0/1)  ScaleCopy: a copy; ReduceInto: Sum/Max are logical OR,
//                      Min/Product logical AND (result 0 or 1)
// Floating Min/Max propagate NaN: if either operand is NaN, the result is NaN.
#pragma once

#include <cstdint>

#include "accord/accord.h"
#include "accord/tensor.h"

namespace accord {

// dst[i] = src[i] * factor for i in [0, n). src may equal dst (in place), but
// the two must not otherwise overlap. factor == 1.0 copies the bytes exactly
// (nothing to do when src == dst). For bool only factor 1.0 is meaningful
// (callers reject others); bool is always copied.
void ScaleCopy(const void* src, void* dst, int64_t n, DataType dtype, double factor);

// Sets n elements to zero (+0.0 for floating types, false for bool).
void FillZero(void* dst, int64_t n, DataType dtype);

// inout[i] = op(inout[i], in[i]) for i in [0, n). op is Sum, Min, Max or
// Product. Average is a caller error (reduce with Sum, then scale by
// 1/size), and so is Adasum (ops/adasum.h); both are treated as Sum. `in`
// may equal `inout`.
void ReduceInto(void* inout, const void* in, int64_t n, DataType dtype, ReduceOp op);

// The arithmetic of Adasum (ops/adasum.h), for the floating dtypes only
// (float16, bfloat16, float32, float64; others do nothing and return 0).
// Computed in double, which holds every element of those dtypes exactly.
//
// The largest |a[i]| (0 for n <= 0); NaN if an element is NaN.
double MaxAbs(const void* a, int64_t n, DataType dtype);
// Sums over i of (s a[i]) (s b[i]), (s a[i])^2 and (s b[i])^2, with
// s = `scale`; a scale that makes the largest element about 1 keeps them
// from overflowing or underflowing.
struct DotAndNorms {
  double dot = 0.0;
  double a_norm2 = 0.0;
  double b_norm2 = 0.0;
};
DotAndNorms ScaledDotAndNorms(const void* a, const void* b, int64_t n, DataType dtype, double scale);
// out[i] = ca * a[i] + cb * b[i], computed in double and rounded into dtype
// (float16 and bfloat16 through float, as everywhere here). `out` may be `a`
// or `b` (element-wise in place), not otherwise overlap them.
void LinearCombination(const void* a, const void* b, void* out, int64_t n, DataType dtype, double ca, double cb);

namespace kernels_internal {

// For tests. On x86 CPUs with F16C, the float16 loops of ScaleCopy and
// ReduceInto use those instructions (UsesF16c() is then true); these two run
// the portable loops instead, so both can be checked on one machine.
bool UsesF16c();
void ScaleCopyPortable(const void* src, void* dst, int64_t n, DataType dtype, double factor);
void ReduceIntoPortable(void* inout, const void* in, int64_t n, DataType dtype, ReduceOp op);

}  // namespace kernels_internal

}  // namespace accord
