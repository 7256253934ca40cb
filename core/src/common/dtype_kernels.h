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
// 1/size); it is treated as Sum. `in` may equal `inout`.
void ReduceInto(void* inout, const void* in, int64_t n, DataType dtype, ReduceOp op);

namespace kernels_internal {

// For tests. On x86 CPUs with F16C, the float16 loops of ScaleCopy and
// ReduceInto use those instructions (UsesF16c() is then true); these two run
// the portable loops instead, so both can be checked on one machine.
bool UsesF16c();
void ScaleCopyPortable(const void* src, void* dst, int64_t n, DataType dtype, double factor);
void ReduceIntoPortable(void* inout, const void* in, int64_t n, DataType dtype, ReduceOp op);

}  // namespace kernels_internal

}  // namespace accord
