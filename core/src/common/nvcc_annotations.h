// ACCORD_HOST_DEVICE marks a function that nvcc compiles for both the CPU and
// the GPU (__host__ __device__); other compilers see a plain inline function.
// Used by the element arithmetic shared by the CPU data path, the CUDA
// pack/unpack kernel and its host emulation (device/copy_plan.h), so that the
// three compute bit-identical results.
#pragma once

#if defined(__CUDACC__)
#define ACCORD_HOST_DEVICE __host__ __device__
#else
#define ACCORD_HOST_DEVICE
#endif

// Before a loop of constant trip count: nvcc unrolls it, so that values an
// unrolled loop keeps in an array stay in registers. Other compilers decide
// for themselves.
#if defined(__CUDA_ARCH__)
#define ACCORD_UNROLL _Pragma("unroll")
#else
#define ACCORD_UNROLL
#endif
