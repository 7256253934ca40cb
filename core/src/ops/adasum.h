// Adasum: the adaptive summation of Maleki et al., "Scaling Distributed
// Training with Adaptive Summation" (MLSys 2021), as an allreduce over a
// power-of-two number of ranks.
//
// Two vectors combine as
//   Adasum(a, b) = (1 - a.b / (2|a|^2)) a + (1 - a.b / (2|b|^2)) b:
// their sum when they are orthogonal, their mean when they are equal, and in
// between the sum with half of each one's projection on the other taken out.
// P = 2^k ranks combine in a binary tree: rank r with r ^ 1, then the results
// of the pairs at distance 2 (r with r ^ 2), then 4, ...; the left operand
// is always the half of the tree with the lower ranks. Each tensor of a
// fused batch is its own vector, with its own coefficients.
//
// The tree is computed by recursive vector halving, distance doubling:
//   For d = 1, 2, 4, ..., P/2, with the peer p = r ^ d:
//     1. Split this rank's slice of the buffer (all of it at d = 1) at its
//        middle element (SplitAdasumSlice): the rank whose bit d is clear
//        (the left one) keeps the first half, the right one the second.
//        Each sends the half it gives up to p and receives p's values of
//        the half it keeps.
//     2. For each tensor, the partial dot product and squared norms of the
//        left and right vectors over the elements this rank keeps
//        (AdasumSliceSums).
//     3. The partial sums of the 2d ranks of the block r / 2d are added up
//        by exchanging them with r ^ 1, r ^ 2, ..., r ^ d (recursive
//        doubling; MergeAdasumSums is commutative, so every rank of the
//        block ends with the same bits, and the halves of a tensor use the
//        same coefficients).
//     4. kept = c_left * left + c_right * right (AdasumCoefficientsFor),
//        rounded into the dtype.
//   Then for d = P/2, ..., 2, 1: each rank swaps its slice for p's, so that
//   every rank ends with the whole result (distance halving).
// Each rank sends and receives about twice the buffer in all, plus 4
// doubles per tensor in each exchange of step 3.
//
// Numerics. The sums are computed in double over the elements scaled by a
// power of two that brings the largest one near 1, and partial sums with
// different scales are merged exactly: no overflow or underflow for any
// finite input, and Adasum(2^k a, 2^k b) = 2^k Adasum(a, b) bit for bit
// (while no result leaves the dtype's range). A vector whose squared norm is
// 0 (all zeros) gets coefficient 1, so Adasum(0, b) = b and
// Adasum(0, 0) = 0. A NaN or infinite element makes its tensor's result NaN.
//
// Pure functions, callable from any thread; AdasumAllreduce runs on the
// thread that owns the exchange (the coordinator, ops/adasum_op.cc).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "accord/accord.h"

namespace accord {

// One step of vector halving: how a slice holding `counts[i]` elements of
// tensor i (tensors concatenated) is split. Offsets are within the slice.
struct AdasumSplit {
  int64_t kept_begin = 0;
  int64_t kept_count = 0;
  int64_t given_begin = 0;
  int64_t given_count = 0;
  std::vector<int64_t> kept;  // per tensor: its elements in the kept part
};
// The left rank (keep_first) keeps the first total/2 elements (rounded
// down), the right rank the rest.
AdasumSplit SplitAdasumSlice(const std::vector<int64_t>& counts, bool keep_first);

// Partial sums of one tensor over some of its elements, of the elements
// times 2^-exponent. Four doubles, sent as float64 between ranks.
struct AdasumSums {
  double exponent = 0.0;
  double dot = 0.0;          // left . right
  double left_norm2 = 0.0;   // |left|^2
  double right_norm2 = 0.0;  // |right|^2
};
static_assert(sizeof(AdasumSums) == 4 * sizeof(double), "AdasumSums travels as 4 float64");

// The sums over n elements of `left` and `right` (floating dtype).
AdasumSums AdasumSliceSums(const void* left, const void* right, int64_t n, DataType dtype);
// The sums over the elements of both (commutative, bit for bit).
AdasumSums MergeAdasumSums(const AdasumSums& x, const AdasumSums& y);

struct AdasumCoefficients {
  double left = 1.0;
  double right = 1.0;
};
// c_left = 1 - dot / (2 |left|^2), 1 if |left|^2 is 0; c_right likewise.
AdasumCoefficients AdasumCoefficientsFor(const AdasumSums& sums);

// Sends send_count elements of dtype to `peer` and receives recv_count from
// it (Backend::SendRecv).
using AdasumExchange = std::function<Status(const void* send, int64_t send_count, void* recv, int64_t recv_count,
                                            DataType dtype, int peer)>;

// Replaces `data`, the concatenation of tensors of counts[i] elements of a
// floating dtype, with the Adasum of every rank's `data`, on `rank` of
// `size` (a power of two; every rank passes the same counts). `scratch`
// holds at least (sum of counts + 1) / 2 elements.
Status AdasumAllreduce(void* data, void* scratch, const std::vector<int64_t>& counts, DataType dtype, int rank,
                       int size, const AdasumExchange& exchange);

}  // namespace accord
