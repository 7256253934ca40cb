// Tests for ops/adasum.h: the per-step split, the partial sums and their
// merge (scaling, commutativity), the coefficients with the zero-norm rule,
// and the whole allreduce with 1 to 16 ranks as threads exchanging through
// in-memory mailboxes, against the pairwise formula applied in tree order.
#include "ops/adasum.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/half.h"

namespace accord {
namespace {

using Vector = std::vector<double>;

// ------------------------------------------------------------- reference

// Adasum(a, b) from the formula, in double, with the zero-norm rule.
Vector Pairwise(const Vector& a, const Vector& b) {
  const double dot = std::inner_product(a.begin(), a.end(), b.begin(), 0.0);
  const double aa = std::inner_product(a.begin(), a.end(), a.begin(), 0.0);
  const double bb = std::inner_product(b.begin(), b.end(), b.begin(), 0.0);
  const double ca = aa == 0 ? 1 : 1 - dot / (2 * aa);
  const double cb = bb == 0 ? 1 : 1 - dot / (2 * bb);
  Vector out(a.size());
  for (size_t i = 0; i < a.size(); ++i) out[i] = ca * a[i] + cb * b[i];
  return out;
}

// Ranks at distance 1, then 2, 4, ...: the lower half of each block on the left.
Vector Tree(std::vector<Vector> vectors) {
  const size_t p = vectors.size();
  for (size_t d = 1; d < p; d *= 2) {
    for (size_t r = 0; r < p; r += 2 * d) vectors[r] = Pairwise(vectors[r], vectors[r + d]);
  }
  return vectors[0];
}

// ------------------------------------------------------ ranks as threads

// Point-to-point messages between `size` threads: one FIFO per ordered pair.
class Mailboxes {
 public:
  AdasumExchange For(int rank) {
    return [this, rank](const void* send, int64_t send_count, void* recv, int64_t recv_count, DataType dtype,
                        int peer) -> Status {
      const size_t element = DataTypeSize(dtype);
      const char* bytes = static_cast<const char*>(send);
      std::string message(bytes, bytes + send_count * element);
      std::unique_lock<std::mutex> lock(mutex_);
      boxes_[{rank, peer}].push_back(std::move(message));
      cv_.notify_all();
      std::deque<std::string>& inbox = boxes_[{peer, rank}];
      cv_.wait(lock, [&] { return !inbox.empty(); });
      const std::string got = std::move(inbox.front());
      inbox.pop_front();
      if (got.size() != static_cast<size_t>(recv_count) * element) {
        return Status::Internal("rank " + std::to_string(rank) + " expected " + std::to_string(recv_count) +
                                " elements from " + std::to_string(peer) + ", got " +
                                std::to_string(got.size() / element));
      }
      if (!got.empty()) std::memcpy(recv, got.data(), got.size());
      return Status::OK();
    };
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::map<std::pair<int, int>, std::deque<std::string>> boxes_;
};

// inputs[rank][tensor]: float64 values. Returns each rank's result, tensors
// concatenated.
std::vector<Vector> RunThreads(const std::vector<std::vector<Vector>>& inputs) {
  const int size = static_cast<int>(inputs.size());
  std::vector<int64_t> counts;
  for (const Vector& t : inputs[0]) counts.push_back(static_cast<int64_t>(t.size()));
  std::vector<Vector> data(size);
  for (int r = 0; r < size; ++r) {
    for (const Vector& t : inputs[r]) data[r].insert(data[r].end(), t.begin(), t.end());
  }
  Mailboxes boxes;
  std::vector<Status> status(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      Vector scratch((data[r].size() + 1) / 2);
      status[r] = AdasumAllreduce(data[r].data(), scratch.data(), counts, DataType::kFloat64, r, size, boxes.For(r));
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < size; ++r) {
    INFO("rank " << r);
    CHECK(status[r].ok());
  }
  return data;
}

// Checks every rank's result against the tree of the formula, tensor by
// tensor, each element within `tolerance` of the tensor's largest element.
void CheckAgainstTree(const std::string& what, const std::vector<std::vector<Vector>>& inputs, double tolerance) {
  const std::vector<Vector> results = RunThreads(inputs);
  const size_t size = inputs.size();
  size_t at = 0;
  for (size_t t = 0; t < inputs[0].size(); ++t) {
    std::vector<Vector> operands;
    for (size_t r = 0; r < size; ++r) operands.push_back(inputs[r][t]);
    const Vector want = Tree(operands);
    double largest = 0;
    for (double v : want) largest = std::max(largest, std::fabs(v));
    for (size_t r = 0; r < size; ++r) {
      for (size_t i = 0; i < want.size(); ++i) {
        const double got = results[r][at + i];
        if (!(std::fabs(got - want[i]) <= tolerance * largest)) {
          FAIL_CHECK(what << ": " << size << " ranks, rank " << r << ", tensor " << t << ", index " << i
                          << ": expected " << want[i] << ", got " << got);
          return;
        }
      }
    }
    at += want.size();
  }
}

std::vector<std::vector<Vector>> RandomInputs(int size, const std::vector<size_t>& counts, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<double> normal;
  std::vector<std::vector<Vector>> inputs(size);
  for (auto& rank : inputs) {
    for (size_t n : counts) {
      Vector t(n);
      for (double& v : t) v = normal(gen);
      rank.push_back(std::move(t));
    }
  }
  return inputs;
}

// ------------------------------------------------------------------ tests

// Checks a split: the kept part [kept_begin, +kept_count), the given part
// [given_begin, +given_count), and each tensor's elements in the kept part.
void CheckSplit(const std::vector<int64_t>& counts, bool keep_first, const std::vector<int64_t>& parts,
                const std::vector<int64_t>& kept) {
  const AdasumSplit split = SplitAdasumSlice(counts, keep_first);
  INFO((keep_first ? "left" : "right") << " of " << counts.size() << " tensors");
  CHECK(std::vector<int64_t>{split.kept_begin, split.kept_count, split.given_begin, split.given_count} == parts);
  CHECK(split.kept == kept);
}

TEST_CASE("SplitAdasumSlice: the left rank keeps the first half, rounded down", "[adasum]") {
  CheckSplit({3, 0, 4, 1}, true, {0, 4, 4, 4}, {3, 0, 1, 0});
  CheckSplit({3, 0, 4, 1}, false, {4, 4, 0, 4}, {0, 0, 3, 1});
  // Odd: what one gives, the other keeps.
  CheckSplit({5}, true, {0, 2, 2, 3}, {2});
  CheckSplit({5}, false, {2, 3, 0, 2}, {3});
  CheckSplit({0, 1}, true, {0, 0, 0, 1}, {0, 0});
  CheckSplit({0, 1}, false, {0, 1, 0, 0}, {0, 1});
  CheckSplit({}, false, {0, 0, 0, 0}, {});
}

TEST_CASE("AdasumCoefficientsFor: orthogonal, equal, parallel, opposite and zero vectors", "[adasum]") {
  auto coefficients = [](const Vector& a, const Vector& b) {
    return AdasumCoefficientsFor(
        AdasumSliceSums(a.data(), b.data(), static_cast<int64_t>(a.size()), DataType::kFloat64));
  };
  AdasumCoefficients c = coefficients({1, 0, 2}, {0, 5, 0});  // orthogonal: the sum
  CHECK(c.left == 1.0);
  CHECK(c.right == 1.0);
  c = coefficients({3, -1, 2}, {3, -1, 2});  // equal: the mean
  CHECK(c.left == 0.5);
  CHECK(c.right == 0.5);
  c = coefficients({1, 2}, {2, 4});  // b = 2a: 0 a + 0.75 b = 1.5 a
  CHECK(c.left == 0.0);
  CHECK(c.right == 0.75);
  c = coefficients({1, 2}, {-1, -2});  // opposite: 1.5 a + 1.5 b = 0
  CHECK(c.left == 1.5);
  CHECK(c.right == 1.5);
  // A zero vector's coefficient is 1: Adasum(0, b) = b, Adasum(0, 0) = 0.
  c = coefficients({0, 0}, {4, 5});
  CHECK(c.left == 1.0);
  CHECK(c.right == 1.0);
  c = coefficients({0, 0}, {0, 0});
  CHECK(c.left == 1.0);
  CHECK(c.right == 1.0);
}

TEST_CASE("AdasumSliceSums: scaled by a power of two, so that no magnitude overflows", "[adasum]") {
  const Vector a = {3, -1, 2}, b = {1, 4, -2};
  const AdasumSums base = AdasumSliceSums(a.data(), b.data(), 3, DataType::kFloat64);
  for (int k : {-1070, -600, -300, 300, 600, 1000}) {
    INFO("scale 2^" << k);
    Vector sa = a, sb = b;
    for (double& v : sa) v = std::ldexp(v, k);
    for (double& v : sb) v = std::ldexp(v, k);
    const AdasumSums scaled = AdasumSliceSums(sa.data(), sb.data(), 3, DataType::kFloat64);
    const AdasumCoefficients c = AdasumCoefficientsFor(scaled);
    const AdasumCoefficients want = AdasumCoefficientsFor(base);
    CHECK(std::isfinite(scaled.dot));
    CHECK(c.left == Approx(want.left).epsilon(1e-12));
    CHECK(c.right == Approx(want.right).epsilon(1e-12));
    if (k > -1000) {  // above the clamp, the sums are the same bits
      CHECK(scaled.exponent == base.exponent + k);
      CHECK(scaled.dot == base.dot);
      CHECK(scaled.left_norm2 == base.left_norm2);
    }
  }
  const Vector zeros = {0, 0, 0};
  const AdasumSums none = AdasumSliceSums(zeros.data(), zeros.data(), 3, DataType::kFloat64);
  CHECK(none.dot == 0.0);
  CHECK(none.left_norm2 == 0.0);
  CHECK(none.exponent < -1074);
  const Vector nan = {1, std::nan(""), 0};
  CHECK(std::isnan(AdasumCoefficientsFor(AdasumSliceSums(nan.data(), a.data(), 3, DataType::kFloat64)).left));
}

TEST_CASE("MergeAdasumSums: pieces merge to the whole, in either order, bit for bit", "[adasum]") {
  // A vector whose pieces differ by 2^400 in magnitude, split in three.
  Vector a = {1e-120, -3e-121, 2e-120, 5.0, -7.0, 1e120, 3e119, -2e120};
  Vector b = {-2e-120, 1e-120, 4e-121, 1.0, 2.0, -4e119, 1e120, 5e119};
  auto piece = [&](size_t from, size_t n) {
    return AdasumSliceSums(a.data() + from, b.data() + from, static_cast<int64_t>(n), DataType::kFloat64);
  };
  const AdasumSums x = piece(0, 3), y = piece(3, 2), z = piece(5, 3);
  const AdasumSums xy = MergeAdasumSums(x, y), yx = MergeAdasumSums(y, x);
  CHECK(std::memcmp(&xy, &yx, sizeof(xy)) == 0);
  const AdasumSums all = MergeAdasumSums(xy, z);
  const AdasumSums whole = piece(0, 8);
  CHECK(all.exponent == whole.exponent);
  CHECK(all.dot == Approx(whole.dot).epsilon(1e-14));
  CHECK(all.left_norm2 == Approx(whole.left_norm2).epsilon(1e-14));
  CHECK(all.right_norm2 == Approx(whole.right_norm2).epsilon(1e-14));
  // Merging with an all-zero piece changes nothing.
  const Vector zeros(3, 0.0);
  const AdasumSums none = AdasumSliceSums(zeros.data(), zeros.data(), 3, DataType::kFloat64);
  const AdasumSums same = MergeAdasumSums(none, all);
  CHECK(std::memcmp(&same, &all, sizeof(all)) == 0);
}

TEST_CASE("AdasumSliceSums reads float16 and bfloat16", "[adasum]") {
  const std::vector<uint16_t> a = {FloatToHalf(1.0f), FloatToHalf(2.0f)};
  const std::vector<uint16_t> b = {FloatToHalf(2.0f), FloatToHalf(4.0f)};
  AdasumCoefficients c = AdasumCoefficientsFor(AdasumSliceSums(a.data(), b.data(), 2, DataType::kFloat16));
  CHECK(c.left == 0.0);
  CHECK(c.right == 0.75);
  const std::vector<uint16_t> ba = {FloatToBFloat16(1.0f), FloatToBFloat16(0.0f)};
  const std::vector<uint16_t> bb = {FloatToBFloat16(0.0f), FloatToBFloat16(3.0f)};
  c = AdasumCoefficientsFor(AdasumSliceSums(ba.data(), bb.data(), 2, DataType::kBFloat16));
  CHECK(c.left == 1.0);
  CHECK(c.right == 1.0);
}

TEST_CASE("AdasumAllreduce with ranks as threads equals the formula in tree order", "[adasum]") {
  // Tensors of uneven sizes, empty ones included, so the halves end inside
  // tensors and some ranks keep nothing of some tensors.
  const std::vector<size_t> counts = {1, 7, 0, 33, 2, 100};
  for (int size : {1, 2, 4, 8, 16}) {
    CheckAgainstTree("random", RandomInputs(size, counts, 17u + size), 1e-12);
  }
}

TEST_CASE("AdasumAllreduce: orthogonal vectors sum, equal vectors stay, zero vectors drop out", "[adasum]") {
  const int size = 8;
  const size_t n = 24;
  std::vector<std::vector<Vector>> orthogonal(size), equal(size), zeros(size);
  for (int r = 0; r < size; ++r) {
    Vector mine(n, 0.0);
    for (size_t i = 0; i < n / size; ++i) mine[r * (n / size) + i] = r + 1.0 + i;  // rank r's own block
    orthogonal[r] = {mine};
    Vector same(n);
    for (size_t i = 0; i < n; ++i) same[i] = std::sin(1.0 + i);
    equal[r] = {same};
    zeros[r] = {r % 2 == 0 ? same : Vector(n, 0.0)};
  }
  std::vector<Vector> results = RunThreads(orthogonal);
  for (int r = 0; r < size; ++r) {
    for (size_t i = 0; i < n; ++i) CHECK(results[r][i] == orthogonal[i / (n / size)][0][i]);  // exact sum
  }
  results = RunThreads(equal);
  for (int r = 0; r < size; ++r) CHECK(results[r] == equal[0][0]);  // exact
  CheckAgainstTree("zeros", zeros, 1e-12);
  results = RunThreads(zeros);
  for (int r = 0; r < size; ++r) {
    for (size_t i = 0; i < n; ++i) CHECK(results[r][i] == Approx(equal[0][0][i]).margin(1e-15));
  }
}

TEST_CASE("AdasumAllreduce refuses a rank count that is not a power of two", "[adasum]") {
  double value = 1;
  const Status status = AdasumAllreduce(&value, nullptr, {1}, DataType::kFloat64, 0, 3, nullptr);
  CHECK(status.code() == StatusCode::kInternal);
  CHECK_THAT(status.message(), Catch::Contains("3"));
}

}  // namespace
}  // namespace accord
