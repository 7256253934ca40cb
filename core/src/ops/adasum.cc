#include "ops/adasum.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "common/dtype_kernels.h"

namespace accord {

namespace {

// The exponent of a slice that holds only zeros: below that of any double,
// so merging it with other sums scales it (zero) away.
constexpr int kZeroExponent = -4096;
// Scales are 2^-e with e in this range, so that 2^-e is a double: the
// largest element then scales to at most 1, and the smallest nonzero one
// (2^-1074) to at least 2^-74, whose square is still a normal double.
constexpr int kMinExponent = -1000;
constexpr int kMaxExponent = 1024;

// `value`, a sum of elements scaled by 2^-from, rescaled by 2^-to (to >= from).
double Rescale(double value, double from, double to) {
  return std::ldexp(value, 2 * (static_cast<int>(from) - static_cast<int>(to)));
}

}  // namespace

AdasumSplit SplitAdasumSlice(const std::vector<int64_t>& counts, bool keep_first) {
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  const int64_t half = total / 2;
  AdasumSplit split;
  split.kept_begin = keep_first ? 0 : half;
  split.kept_count = keep_first ? half : total - half;
  split.given_begin = keep_first ? half : 0;
  split.given_count = total - split.kept_count;
  const int64_t kept_end = split.kept_begin + split.kept_count;
  split.kept.reserve(counts.size());
  int64_t begin = 0;  // tensor i's first element in the slice
  for (int64_t c : counts) {
    const int64_t from = std::max(begin, split.kept_begin);
    const int64_t to = std::min(begin + c, kept_end);
    split.kept.push_back(std::max<int64_t>(to - from, 0));
    begin += c;
  }
  return split;
}

AdasumSums AdasumSliceSums(const void* left, const void* right, int64_t n, DataType dtype) {
  double largest = MaxAbs(left, n, dtype);
  const double right_largest = MaxAbs(right, n, dtype);
  if (right_largest > largest || std::isnan(right_largest)) largest = right_largest;  // NaN stays NaN
  AdasumSums sums;
  if (largest == 0.0) {
    sums.exponent = kZeroExponent;
    return sums;
  }
  int exponent = 0;  // largest = f 2^exponent, f in [0.5, 1); NaN or inf: unscaled NaN sums
  if (std::isfinite(largest)) std::frexp(largest, &exponent);
  exponent = std::clamp(exponent, kMinExponent, kMaxExponent);
  const DotAndNorms scaled = ScaledDotAndNorms(left, right, n, dtype, std::ldexp(1.0, -exponent));
  sums.exponent = exponent;
  sums.dot = scaled.dot;
  sums.left_norm2 = scaled.a_norm2;
  sums.right_norm2 = scaled.b_norm2;
  return sums;
}

AdasumSums MergeAdasumSums(const AdasumSums& x, const AdasumSums& y) {
  AdasumSums merged;
  merged.exponent = std::max(x.exponent, y.exponent);
  auto add = [&](double AdasumSums::*field) {
    return Rescale(x.*field, x.exponent, merged.exponent) + Rescale(y.*field, y.exponent, merged.exponent);
  };
  merged.dot = add(&AdasumSums::dot);
  merged.left_norm2 = add(&AdasumSums::left_norm2);
  merged.right_norm2 = add(&AdasumSums::right_norm2);
  return merged;
}

AdasumCoefficients AdasumCoefficientsFor(const AdasumSums& sums) {
  // The scale 2^-2e of the sums cancels in each quotient.
  AdasumCoefficients c;
  if (sums.left_norm2 != 0.0) c.left = 1.0 - sums.dot / (2.0 * sums.left_norm2);
  if (sums.right_norm2 != 0.0) c.right = 1.0 - sums.dot / (2.0 * sums.right_norm2);
  return c;
}

namespace {

// One step of vector halving, distance doubling with `peer` (steps 1-4 of
// the header): on return the kept part of the slice holds the Adasum of the
// left and right vectors there.
Status HalvingStep(char* slice, const AdasumSplit& split, char* received, DataType dtype, int rank, int distance,
                   const AdasumExchange& exchange) {
  const size_t element = DataTypeSize(dtype);
  const int peer = rank ^ distance;
  const bool left = (rank & distance) == 0;
  char* kept = slice + split.kept_begin * element;
  ACCORD_RETURN_IF_ERROR(
      exchange(slice + split.given_begin * element, split.given_count, received, split.kept_count, dtype, peer));

  const size_t tensors = split.kept.size();
  std::vector<AdasumSums> sums(tensors), theirs(tensors);
  int64_t at = 0;
  for (size_t i = 0; i < tensors; ++i) {
    const char* mine = kept + at * element;
    const char* other = received + at * element;
    sums[i] = AdasumSliceSums(left ? mine : other, left ? other : mine, split.kept[i], dtype);
    at += split.kept[i];
  }
  const int64_t doubles = static_cast<int64_t>(4 * tensors);
  for (int d = 1; d <= distance; d <<= 1) {
    ACCORD_RETURN_IF_ERROR(exchange(sums.data(), doubles, theirs.data(), doubles, DataType::kFloat64, rank ^ d));
    for (size_t i = 0; i < tensors; ++i) sums[i] = MergeAdasumSums(sums[i], theirs[i]);
  }

  at = 0;
  for (size_t i = 0; i < tensors; ++i) {
    char* mine = kept + at * element;
    const char* other = received + at * element;
    const AdasumCoefficients c = AdasumCoefficientsFor(sums[i]);
    LinearCombination(left ? mine : other, left ? other : mine, mine, split.kept[i], dtype, c.left, c.right);
    at += split.kept[i];
  }
  return Status::OK();
}

}  // namespace

Status AdasumAllreduce(void* data, void* scratch, const std::vector<int64_t>& counts, DataType dtype, int rank,
                       int size, const AdasumExchange& exchange) {
  if (size < 1 || (size & (size - 1)) != 0) {
    return Status::Internal("Adasum needs a power-of-two number of ranks, not " + std::to_string(size));
  }
  const size_t element = DataTypeSize(dtype);
  char* base = static_cast<char*>(data);
  std::vector<int64_t> slice_counts = counts;
  int64_t begin = 0;  // this rank's slice: from element `begin` of data
  std::vector<AdasumSplit> steps;
  for (int distance = 1; distance < size; distance <<= 1) {
    AdasumSplit split = SplitAdasumSlice(slice_counts, (rank & distance) == 0);
    ACCORD_RETURN_IF_ERROR(
        HalvingStep(base + begin * element, split, static_cast<char*>(scratch), dtype, rank, distance, exchange));
    begin += split.kept_begin;
    slice_counts = split.kept;
    steps.push_back(std::move(split));
  }
  // Distance halving: the peer holds the part this rank gave up.
  for (int distance = size / 2; distance >= 1; distance >>= 1) {
    const AdasumSplit& split = steps.back();
    begin -= split.kept_begin;
    char* slice = base + begin * element;
    ACCORD_RETURN_IF_ERROR(exchange(slice + split.kept_begin * element, split.kept_count,
                                    slice + split.given_begin * element, split.given_count, dtype, rank ^ distance));
    steps.pop_back();
  }
  return Status::OK();
}

}  // namespace accord
