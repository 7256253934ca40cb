// Adasum allreduce (ReduceOp::kAdasum) on CPU tensors: every rank checks its
// result against the pairwise formula
//   Adasum(a, b) = (1 - a.b / (2|a|^2)) a + (1 - a.b / (2|b|^2)) b
// applied in tree order (ranks at distance 1, then 2, ...) to every rank's
// regenerated input, each level rounded into the dtype as the algorithm
// stores it; for random, orthogonal, parallel and zero vectors, single and
// grouped (each tensor with its own coefficients), with scale factors, in a
// process set, and at huge and tiny magnitudes. At a rank count that is not a
// power of two every case checks instead that the enqueue fails on every
// rank, naming the count; the dtype, device and reducescatter errors are
// checked at every count.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "test_util.h"

namespace {

using accord::DataType;
using accord::ReduceOp;
using accord::Shape;
using accord::StatusCode;
using namespace accord_test;

using Vector = std::vector<double>;

const DataType kFloatTypes[] = {DataType::kFloat16, DataType::kBFloat16, DataType::kFloat32, DataType::kFloat64};

bool PowerOfTwo(int n) { return n > 0 && (n & (n - 1)) == 0; }

// ------------------------------------------------------------- reference

// The tree of the formula over `inputs` (one vector per rank of the set, in
// set rank order), each level rounded into `dtype`. A zero vector's
// coefficient is 1.
Vector ReferenceAdasum(std::vector<Vector> inputs, DataType dtype) {
  for (size_t d = 1; d < inputs.size(); d *= 2) {
    for (size_t r = 0; r < inputs.size(); r += 2 * d) {
      Vector& a = inputs[r];
      const Vector& b = inputs[r + d];
      double dot = 0, aa = 0, bb = 0;
      for (size_t i = 0; i < a.size(); ++i) {
        dot += a[i] * b[i];
        aa += a[i] * a[i];
        bb += b[i] * b[i];
      }
      const double ca = aa == 0 ? 1 : 1 - dot / (2 * aa);
      const double cb = bb == 0 ? 1 : 1 - dot / (2 * bb);
      for (size_t i = 0; i < a.size(); ++i) a[i] = RoundToDataType(dtype, ca * a[i] + cb * b[i]);
    }
  }
  return inputs[0];
}

// How far a result may be from the reference, as a fraction of the
// tensor's largest element: a few units in the last place of the dtype (the
// dot products are summed in another order, which can move a rounding).
double Tolerance(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat16: return std::ldexp(4.0, -10);
    case DataType::kBFloat16: return std::ldexp(4.0, -7);
    case DataType::kFloat32: return std::ldexp(4.0, -23);
    default: return 1e-12;
  }
}

// Checks every element of `got` against `want` within Tolerance(dtype) of
// the largest |want|; up to five failures are reported.
void ExpectNear(const std::string& what, const accord::TensorView& got, const Vector& want,
                double tolerance_scale = 1.0) {
  double largest = 0;
  for (double v : want) largest = std::max(largest, std::fabs(v));
  const double tolerance = Tolerance(got.dtype) * tolerance_scale * largest;
  int failures = 0;
  for (size_t i = 0; i < want.size() && failures < 5; ++i) {
    const double value = ReadElement(got, static_cast<int64_t>(i));
    if (!(std::fabs(value - want[i]) <= tolerance)) {
      FAIL_CHECK("rank " << Rank() << ": " << what << " (" << accord::DataTypeName(got.dtype) << "): index " << i
                         << ": expected " << want[i] << ", got " << value << " (tolerance " << tolerance << ")");
      ++failures;
    }
  }
}

// ------------------------------------------------------------ the inputs

enum class Pattern { kRandom, kOrthogonal, kParallel, kZeros };

const char* PatternName(Pattern p) {
  switch (p) {
    case Pattern::kRandom: return "random";
    case Pattern::kOrthogonal: return "orthogonal";
    case Pattern::kParallel: return "parallel";
    case Pattern::kZeros: return "zeros";
  }
  return "?";
}

// Set rank `r`'s input of `n` elements (of `set_size` ranks) for `key`:
//   random      small integers, different on every rank;
//   orthogonal  rank r's values only where i % set_size == r;
//   parallel    (r + 1) v for one v shared by every rank;
//   zeros       random on even ranks, zeros on odd ones.
Vector Input(Pattern p, const std::string& key, int r, int set_size, DataType dtype, int64_t n) {
  Vector v = RankValues(key, p == Pattern::kParallel ? 0 : r, dtype, n);
  for (int64_t i = 0; i < n; ++i) {
    if (p == Pattern::kOrthogonal && i % set_size != r) v[i] = 0;
    if (p == Pattern::kParallel) v[i] *= r + 1;
    if (p == Pattern::kZeros && r % 2 == 1) v[i] = 0;
  }
  return v;
}

std::vector<Vector> AllInputs(Pattern p, const std::string& key, int set_size, DataType dtype, int64_t n) {
  std::vector<Vector> inputs;
  for (int r = 0; r < set_size; ++r) inputs.push_back(Input(p, key, r, set_size, dtype, n));
  return inputs;
}

accord::AllreduceOptions AdasumOptions(const std::string& name) {
  accord::AllreduceOptions options;
  options.name = name;
  options.op = ReduceOp::kAdasum;
  return options;
}

// At a rank count that is not a power of two: the enqueue fails at once, on
// every rank, with kUnimplemented naming the count.
void ExpectRefusedCount(const std::string& what, const accord::Result<accord::Handle>& result, int count) {
  INFO("rank " << Rank() << ": " << what << ": " << result.status());
  CHECK(result.status().code() == StatusCode::kUnimplemented);
  CHECK_THAT(result.status().message(), Catch::Contains("power-of-two") && Catch::Contains(std::to_string(count)));
  if (result.ok()) (void)WaitFor(result.value(), what);
}

// ------------------------------------------------------------------ tests

TEST_CASE("adasum: one tensor per call, each pattern and floating dtype, against the formula") {
  const int64_t n = 1001;  // odd: the halves are uneven at every level
  for (DataType dtype : kFloatTypes) {
    for (Pattern p : {Pattern::kRandom, Pattern::kOrthogonal, Pattern::kParallel, Pattern::kZeros}) {
      const std::string name = std::string("adasum.single.") + PatternName(p) + "." + accord::DataTypeName(dtype);
      TestTensor t(dtype, {n}, Input(p, name, Rank(), Size(), dtype, n));
      accord::Result<accord::Handle> result = accord::Allreduce(t.view(), t.view(), AdasumOptions(name));
      if (!PowerOfTwo(Size())) {
        ExpectRefusedCount(name, result, Size());
        continue;
      }
      if (!WaitOk(Enqueued(std::move(result), name), name)) continue;
      const std::vector<Vector> inputs = AllInputs(p, name, Size(), dtype, n);
      ExpectNear(name, t.view(), ReferenceAdasum(inputs, dtype));
      if (p == Pattern::kOrthogonal) {  // the plain sum, exactly
        Vector sum(n, 0.0);
        for (const Vector& v : inputs) {
          for (int64_t i = 0; i < n; ++i) sum[i] += v[i];
        }
        ExpectValues(name + " (the sum)", t.view(), dtype, {n}, sum);
      }
      if (p == Pattern::kParallel) {  // (r + 1) v on rank r: the mean, (size + 1) / 2 v
        Vector mean = inputs[0];
        for (double& v : mean) v *= (Size() + 1) / 2.0;
        ExpectNear(name + " (the mean)", t.view(), mean);
      }
    }
  }
}

TEST_CASE("adasum: a grouped call gives each tensor its own coefficients") {
  // Patterns that need different coefficients, and sizes that put the
  // halving's cuts inside tensors, in one fused batch; also out of place.
  const std::vector<int64_t> sizes = {3, 0, 1000, 1, 257, 64};
  const Pattern patterns[] = {Pattern::kParallel, Pattern::kRandom,   Pattern::kOrthogonal,
                              Pattern::kRandom,   Pattern::kParallel, Pattern::kZeros};
  for (DataType dtype : kFloatTypes) {
    const std::string group = std::string("adasum.group.") + accord::DataTypeName(dtype);
    std::vector<TestTensor> inputs, outputs;
    std::vector<accord::TensorView> in_views, out_views;
    for (size_t i = 0; i < sizes.size(); ++i) {
      const std::string key = group + "." + std::to_string(i);
      inputs.emplace_back(dtype, Shape{sizes[i]}, Input(patterns[i], key, Rank(), Size(), dtype, sizes[i]));
      outputs.emplace_back(dtype, Shape{sizes[i]});
      in_views.push_back(inputs.back().view());
      out_views.push_back(outputs.back().view());
    }
    accord::Result<accord::Handle> result = accord::GroupedAllreduce(in_views, out_views, AdasumOptions(group));
    if (!PowerOfTwo(Size())) {
      ExpectRefusedCount(group, result, Size());
      continue;
    }
    if (!WaitOk(Enqueued(std::move(result), group), group)) continue;
    for (size_t i = 0; i < sizes.size(); ++i) {
      const std::string key = group + "." + std::to_string(i);
      ExpectNear(key, outputs[i].view(), ReferenceAdasum(AllInputs(patterns[i], key, Size(), dtype, sizes[i]), dtype));
      ExpectValues(key + " (input untouched)", inputs[i].view(), dtype, {sizes[i]},
                   Input(patterns[i], key, Rank(), Size(), dtype, sizes[i]));
    }
  }
}

TEST_CASE("adasum: the prescale factor applies before, the postscale factor after") {
  const int64_t n = 300;
  for (DataType dtype : kFloatTypes) {
    const std::string name = std::string("adasum.scaled.") + accord::DataTypeName(dtype);
    TestTensor t(dtype, {n}, Input(Pattern::kRandom, name, Rank(), Size(), dtype, n));
    accord::AllreduceOptions options = AdasumOptions(name);
    options.prescale_factor = 3.0;
    options.postscale_factor = 0.25;
    accord::Result<accord::Handle> result = accord::Allreduce(t.view(), t.view(), options);
    if (!PowerOfTwo(Size())) {
      ExpectRefusedCount(name, result, Size());
      continue;
    }
    if (!WaitOk(Enqueued(std::move(result), name), name)) continue;
    std::vector<Vector> inputs = AllInputs(Pattern::kRandom, name, Size(), dtype, n);
    for (Vector& v : inputs) {
      for (double& x : v) x = RoundToDataType(dtype, 3.0 * x);
    }
    Vector want = ReferenceAdasum(inputs, dtype);
    for (double& x : want) x = RoundToDataType(dtype, 0.25 * x);
    ExpectNear(name, t.view(), want);
  }
}

TEST_CASE("adasum: huge and tiny magnitudes scale the result exactly as the inputs") {
  // Adasum(2^k a, 2^k b) = 2^k Adasum(a, b). Sums of squares of these
  // inputs overflow or underflow the dtype (and, for float64, double).
  struct Case {
    DataType dtype;
    int exponent;
  };
  const Case cases[] = {{DataType::kFloat16, 10},   {DataType::kFloat16, -8},  {DataType::kBFloat16, 100},
                        {DataType::kBFloat16, -90}, {DataType::kFloat32, 100}, {DataType::kFloat32, -90},
                        {DataType::kFloat64, 1000}, {DataType::kFloat64, -900}};
  const int64_t n = 200;
  for (const Case& c : cases) {
    const std::string name =
        std::string("adasum.magnitude.") + accord::DataTypeName(c.dtype) + "." + std::to_string(c.exponent);
    Vector mine = Input(Pattern::kRandom, name, Rank(), Size(), c.dtype, n);
    for (double& x : mine) x = std::ldexp(x, c.exponent);
    TestTensor t(c.dtype, {n}, mine);
    accord::Result<accord::Handle> result = accord::Allreduce(t.view(), t.view(), AdasumOptions(name));
    if (!PowerOfTwo(Size())) {
      ExpectRefusedCount(name, result, Size());
      continue;
    }
    if (!WaitOk(Enqueued(std::move(result), name), name)) continue;
    Vector want = ReferenceAdasum(AllInputs(Pattern::kRandom, name, Size(), c.dtype, n), c.dtype);
    for (double& x : want) x = std::ldexp(x, c.exponent);
    // float16 results near zero can be subnormal after scaling, and round
    // more coarsely there.
    ExpectNear(name, t.view(), want, c.dtype == DataType::kFloat16 ? 2.0 : 1.0);
  }
}

TEST_CASE("adasum: in a process set, over the set's ranks in set rank order") {
  // The odd ranks (1 and 3 at 4 ranks; rank 1 alone at 2 or 3), and at 4
  // ranks a set of 3, which is refused on its members.
  std::vector<int> odd;
  for (int r = 1; r < Size(); r += 2) odd.push_back(r);
  if (odd.empty()) return;  // one rank: no set to make (the same on every rank)
  accord::Result<accord::ProcessSetId> set = accord::AddProcessSet(odd);
  CHECK(set.ok());
  if (set.ok() && Rank() % 2 == 1) {
    const int set_size = static_cast<int>(odd.size());
    const int set_rank = Rank() / 2;
    const std::string name = "adasum.set";
    const int64_t n = 77;
    TestTensor t(DataType::kFloat32, {n}, Input(Pattern::kRandom, name, set_rank, set_size, DataType::kFloat32, n));
    accord::AllreduceOptions options = AdasumOptions(name);
    options.process_set = set.value();
    if (WaitOk(Enqueued(accord::Allreduce(t.view(), t.view(), options), name), name)) {
      ExpectNear(
          name, t.view(),
          ReferenceAdasum(AllInputs(Pattern::kRandom, name, set_size, DataType::kFloat32, n), DataType::kFloat32));
    }
  }
  if (set.ok()) CHECK(accord::RemoveProcessSet(set.value()).ok());
  if (Size() != 4) return;
  accord::Result<accord::ProcessSetId> three = accord::AddProcessSet({0, 1, 2});
  CHECK(three.ok());
  if (three.ok() && Rank() < 3) {
    TestTensor t(DataType::kFloat32, {5});
    accord::AllreduceOptions options = AdasumOptions("adasum.set3");
    options.process_set = three.value();
    ExpectRefusedCount("adasum.set3", accord::Allreduce(t.view(), t.view(), options), 3);
  }
  if (three.ok()) CHECK(accord::RemoveProcessSet(three.value()).ok());
}

TEST_CASE("adasum: other dtypes, CUDA tensors and reducescatter are refused at enqueue") {
  for (DataType dtype : AllDataTypes()) {
    if (accord::IsFloatingPoint(dtype)) continue;
    TestTensor t(dtype, {4});
    const accord::Result<accord::Handle> result = accord::Allreduce(t.view(), t.view(), AdasumOptions("adasum.int"));
    INFO("rank " << Rank() << ": " << accord::DataTypeName(dtype) << ": " << result.status());
    CHECK(result.status().code() == StatusCode::kInvalidArgument);
    CHECK_THAT(result.status().message(), Catch::Contains(accord::DataTypeName(dtype)) && Catch::Contains("Adasum"));
  }
  // Checked before the device is touched: host memory that claims to be on a GPU.
  std::vector<float> host(4);
  accord::TensorView cuda{host.data(), DataType::kFloat32, {4}, accord::Device::CUDA(0)};
  const accord::Result<accord::Handle> on_gpu = accord::Allreduce(cuda, cuda, AdasumOptions("adasum.cuda"));
  INFO("rank " << Rank() << ": " << on_gpu.status());
  CHECK(on_gpu.status().code() == StatusCode::kUnimplemented);
  CHECK_THAT(on_gpu.status().message(), Catch::Contains("CPU tensors") && Catch::Contains("cuda:0"));

  TestTensor rows(DataType::kFloat32, {8});
  accord::ReducescatterOptions scatter;
  scatter.name = "adasum.reducescatter";
  scatter.op = ReduceOp::kAdasum;
  const accord::Result<accord::Handle> scattered = accord::Reducescatter(rows.view(), nullptr, scatter);
  CHECK(scattered.status().code() == StatusCode::kInvalidArgument);
  CHECK_THAT(scattered.status().message(), Catch::Contains("Adasum"));

  // Nothing was left in flight: a plain allreduce still lines up everywhere.
  CheckSumAllreduce("adasum.after_errors", 16);
}

}  // namespace
