// Hierarchical collectives through the whole runtime
// (ACCORD_HIERARCHICAL_ALLREDUCE=1, ACCORD_HIERARCHICAL_ALLGATHER=1; see
// tests/CMakeLists.txt): allreduces of every op x dtype at odd counts, fused
// (all in flight at once) and one at a time, a large one over many staging
// windows and shards, allgathers of uneven rows, and process sets that span
// hosts or sit on one. On one host the backend is the flat one and the same
// checks must pass; on the test bed (tests/multihost/) the global set spans
// 2 or 3 hosts, evenly (2x2, 3x1) or not (2+1), and the sets added later
// span hosts or not depending on the layout.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "test_util.h"

namespace {

using accord::DataType;
using accord::ReduceOp;
using accord::Shape;
using namespace accord_test;

const ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct};
// Around the shard sizes of 2-4 ranks per host: fewer elements than ranks,
// remainders of every size.
const int64_t kCounts[] = {1, 2, 3, 7, 13, 1001};

ValueKind KindFor(ReduceOp op) { return op == ReduceOp::kProduct ? ValueKind::kProduct : ValueKind::kSmall; }

struct Reduction {
  std::string name;
  DataType dtype;
  int64_t n;
  ReduceSpec spec;
  std::vector<int> ranks;  // global ranks of the set
  accord::ProcessSetId set = accord::kGlobalProcessSet;
  TestTensor tensor;
  accord::Handle handle;
};

int SetRank(const std::vector<int>& ranks) {
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] == Rank()) return static_cast<int>(i);
  }
  return -1;
}

void Start(Reduction& r) {
  r.tensor = TestTensor(r.dtype, {r.n}, RankValues(r.name, Rank(), r.dtype, r.n, KindFor(r.spec.op)));
  accord::AllreduceOptions options;
  options.name = r.name;
  options.op = r.spec.op;
  options.prescale_factor = r.spec.prescale;
  options.postscale_factor = r.spec.postscale;
  options.process_set = r.set;
  r.handle = Enqueued(accord::Allreduce(r.tensor.view(), r.tensor.view(), options), r.name);
}

void Finish(Reduction& r) {
  if (!WaitOk(r.handle, r.name)) return;
  const double tolerance = r.spec.op == ReduceOp::kAverage ? Tolerance(r.dtype) : 0.0;
  ExpectValues(r.name, r.tensor.view(), r.dtype, {r.n},
               ReferenceAllreduce(r.name, r.ranks, r.dtype, r.n, KindFor(r.spec.op), r.spec), tolerance);
}

// Every (op, dtype) at every count, over the set of `ranks`; scaled by
// powers of two (exact) where the op and dtype allow.
std::vector<Reduction> Matrix(const std::string& prefix, const std::vector<int>& ranks, accord::ProcessSetId set) {
  std::vector<Reduction> cases;
  for (ReduceOp op : kOps) {
    for (DataType dtype : AllDataTypes()) {
      if (dtype == DataType::kBool && op == ReduceOp::kAverage) continue;
      const bool scalable = dtype != DataType::kBool && op != ReduceOp::kProduct;
      for (int64_t n : kCounts) {
        Reduction r;
        r.name = prefix + "." + accord::ReduceOpName(op) + "." + accord::DataTypeName(dtype) + "." + std::to_string(n);
        r.dtype = dtype;
        r.n = n;
        r.spec = scalable && n % 2 == 1 ? ReduceSpec{op, 2.0, 0.5} : ReduceSpec{op};
        r.ranks = ranks;
        r.set = set;
        cases.push_back(std::move(r));
      }
    }
  }
  return cases;
}

void RunFused(std::vector<Reduction>& cases) {
  for (Reduction& r : cases) Start(r);
  for (Reduction& r : cases) Finish(r);
}

void RunOneAtATime(std::vector<Reduction>& cases) {
  for (Reduction& r : cases) {
    Start(r);
    Finish(r);
  }
}

TEST_CASE("hierarchical allreduce: every op x dtype at odd counts, fused") {
  std::vector<Reduction> cases = Matrix("fused", AllRanks(), accord::kGlobalProcessSet);
  RunFused(cases);
}

TEST_CASE("hierarchical allreduce: every op x dtype at odd counts, one at a time") {
  std::vector<Reduction> cases = Matrix("single", AllRanks(), accord::kGlobalProcessSet);
  RunOneAtATime(cases);
}

TEST_CASE("hierarchical allreduce: 4 MiB + 3 elements of float32 and of float16", "[large]") {
  for (DataType dtype : {DataType::kFloat32, DataType::kFloat16}) {
    Reduction r;
    r.name = std::string("large.") + accord::DataTypeName(dtype);
    r.dtype = dtype;
    r.n = (int64_t{1} << 20) + 3;
    r.spec = ReduceSpec{ReduceOp::kSum};
    r.ranks = AllRanks();
    Start(r);
    Finish(r);
  }
}

// Allgather of `rows[r]` rows of `trailing` from each rank r of the set.
struct Gather {
  std::string name;
  DataType dtype;
  Shape trailing;
  std::vector<int64_t> rows;  // per set rank
  accord::ProcessSetId set = accord::kGlobalProcessSet;
  std::vector<int> ranks;
  TestTensor input;
  accord::Handle handle;
};

Shape RowsOf(int64_t rows, const Shape& trailing) {
  Shape shape{rows};
  shape.insert(shape.end(), trailing.begin(), trailing.end());
  return shape;
}

void Start(Gather& g) {
  const Shape shape = RowsOf(g.rows[SetRank(g.ranks)], g.trailing);
  g.input = TestTensor(g.dtype, shape, RankValues(g.name, Rank(), g.dtype, accord::NumElements(shape)));
  accord::CollectiveOptions options;
  options.name = g.name;
  options.process_set = g.set;
  g.handle = Enqueued(accord::Allgather(g.input.view(), nullptr, options), g.name);
}

void Finish(Gather& g) {
  if (!WaitOk(g.handle, g.name)) return;
  const int64_t row = accord::NumElements(RowsOf(1, g.trailing));
  std::vector<double> expected;
  int64_t total = 0;
  for (size_t i = 0; i < g.ranks.size(); ++i) {
    for (double v : RankValues(g.name, g.ranks[i], g.dtype, g.rows[i] * row)) expected.push_back(v);
    total += g.rows[i];
  }
  const std::vector<accord::TensorView> outputs = g.handle.outputs();
  INFO("rank " << Rank() << ": " << g.name << ": outputs");
  REQUIRE(outputs.size() == 1);  // after the wait: no collective follows in this case on failure
  ExpectValues(g.name, outputs[0], g.dtype, RowsOf(total, g.trailing), expected);
}

std::vector<Gather> Gathers(const std::string& prefix, const std::vector<int>& ranks, accord::ProcessSetId set) {
  std::vector<Gather> cases;
  for (DataType dtype : AllDataTypes()) {
    for (int pattern = 0; pattern < 3; ++pattern) {
      Gather g;
      g.name = prefix + "." + accord::DataTypeName(dtype) + "." + std::to_string(pattern);
      g.dtype = dtype;
      g.trailing = pattern == 1 ? Shape{3} : Shape{};
      for (size_t i = 0; i < ranks.size(); ++i) {
        const int r = static_cast<int>(i);
        g.rows.push_back(pattern == 0 ? r % 3 : pattern == 1 ? 2 * r + 1 : (r == 0 ? 1000 : 0));
      }
      g.set = set;
      g.ranks = ranks;
      cases.push_back(std::move(g));
    }
  }
  return cases;
}

TEST_CASE("hierarchical allgather: uneven rows per rank, every dtype, fused and one at a time") {
  std::vector<Gather> fused = Gathers("gather.fused", AllRanks(), accord::kGlobalProcessSet);
  for (Gather& g : fused) Start(g);
  for (Gather& g : fused) Finish(g);
  std::vector<Gather> single = Gathers("gather.single", AllRanks(), accord::kGlobalProcessSet);
  for (Gather& g : single) {
    Start(g);
    Finish(g);
  }
}

// Added after Init: the first and the last rank (on two hosts on the bed),
// and every other rank (interleaved across the hosts of a 2x2 layout).
TEST_CASE("hierarchical collectives in process sets added later") {
  std::vector<std::vector<int>> sets = {Size() > 1 ? std::vector<int>{0, Size() - 1} : std::vector<int>{0}, {}};
  for (int r = 0; r < Size(); r += 2) sets[1].push_back(r);
  for (size_t k = 0; k < sets.size(); ++k) {
    const std::vector<int>& ranks = sets[k];
    accord::Result<accord::ProcessSetId> id = accord::AddProcessSet(ranks);
    INFO("rank " << Rank() << ": AddProcessSet: " << id.status().ToString());
    REQUIRE(id.ok());  // the same outcome on every rank
    if (SetRank(ranks) >= 0) {
      const std::string prefix = "set" + std::to_string(k);
      std::vector<Reduction> reductions = Matrix(prefix, ranks, *id);
      RunFused(reductions);
      std::vector<Gather> gathers = Gathers(prefix + ".gather", ranks, *id);
      for (Gather& g : gathers) Start(g);
      for (Gather& g : gathers) Finish(g);
    }
    CHECK(accord::RemoveProcessSet(*id).ok());
  }
}

}  // namespace
