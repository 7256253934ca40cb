// The collectives whose output shape comes from negotiation or that move
// rather than reduce data: allgather (uneven dim 0, zero rows on some
// ranks, multi-dim, caller allocator), broadcast from every root, alltoall
// (even and uneven splits, zero splits), reducescatter (dim 0 not divisible
// by the size), and the grouped forms. Part of the collectives program.
#include <catch2/catch.hpp>

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "test_util.h"

namespace {

using accord::DataType;
using accord::ReduceOp;
using accord::Shape;
using namespace accord_test;

Shape WithRows(int64_t rows, const Shape& trailing) {
  Shape shape{rows};
  shape.insert(shape.end(), trailing.begin(), trailing.end());
  return shape;
}

// Output `index` of a completed handle, or an empty view (and a failure).
accord::TensorView OutputOf(const accord::Handle& handle, size_t index, const std::string& what) {
  const std::vector<accord::TensorView> outputs = handle.outputs();
  INFO("rank " << Rank() << ": " << what);
  CHECK(outputs.size() > index);
  return outputs.size() > index ? outputs[index] : accord::TensorView{};
}

// Rows rank r contributes to the uneven allgathers: rank 0 (and 3) none.
int64_t UnevenRows(int rank) { return rank % 3; }

// Every rank's rows of `key`, concatenated in rank order.
std::vector<double> GatheredValues(const std::string& key, DataType dtype, int64_t row_elements,
                                   const std::vector<int64_t>& rows_per_rank) {
  std::vector<double> all;
  for (int r = 0; r < static_cast<int>(rows_per_rank.size()); ++r) {
    const std::vector<double> part = RankValues(key, r, dtype, rows_per_rank[r] * row_elements);
    all.insert(all.end(), part.begin(), part.end());
  }
  return all;
}

struct GatherCase {
  std::string name;
  DataType dtype;
  Shape trailing;
  std::vector<int64_t> rows;  // per rank
  TestTensor input;
  accord::Handle handle;
};

TEST_CASE("allgather: per-rank dim 0 (zero rows on some ranks), every dtype, multi-dim") {
  const std::vector<Shape> trailings = {{3, 2}, {}, {4}, {2}, {5}, {2, 2, 2}, {1}, {}, {3}, {2}};
  std::vector<GatherCase> cases;
  for (size_t i = 0; i < AllDataTypes().size(); ++i) {
    for (bool uneven : {true, false}) {
      GatherCase c;
      c.dtype = AllDataTypes()[i];
      c.name = std::string("allgather.") + DataTypeName(c.dtype) + (uneven ? ".uneven" : ".even");
      c.trailing = trailings[i];
      for (int r = 0; r < Size(); ++r) c.rows.push_back(uneven ? UnevenRows(r) : 2);
      cases.push_back(std::move(c));
    }
  }
  for (GatherCase& c : cases) {
    const Shape shape = WithRows(c.rows[Rank()], c.trailing);
    c.input = TestTensor(c.dtype, shape, RankValues(c.name, Rank(), c.dtype, accord::NumElements(shape)));
    accord::CollectiveOptions options;
    options.name = c.name;
    c.handle = Enqueued(accord::Allgather(c.input.view(), nullptr, options), c.name);
  }
  for (GatherCase& c : cases) {
    if (!WaitOk(c.handle, c.name)) continue;
    int64_t total = 0;
    for (int64_t rows : c.rows) total += rows;
    const Shape trailing_shape = WithRows(1, c.trailing);
    ExpectValues(c.name, OutputOf(c.handle, 0, c.name), c.dtype, WithRows(total, c.trailing),
                 GatheredValues(c.name, c.dtype, RowElements(trailing_shape), c.rows));
  }
}

// An Allocator that records its calls and owns what it hands out. Called on
// the coordinator thread; read by the test after the handle completed.
struct RecordingAllocator {
  std::mutex mutex;
  std::vector<std::unique_ptr<TestTensor>> tensors;

  accord::Allocator Get() {
    return [this](DataType dtype, const Shape& shape, accord::Device device) -> accord::Result<accord::TensorView> {
      std::lock_guard<std::mutex> lock(mutex);
      if (device != TestDevice()) return accord::Status::InvalidArgument("not the test's device");
      tensors.push_back(std::make_unique<TestTensor>(dtype, shape));
      return tensors.back()->view();
    };
  }
};

TEST_CASE("allgather: output from the caller's allocator") {
  RecordingAllocator allocator;
  const std::string name = "allgather.allocator";
  std::vector<int64_t> rows;
  for (int r = 0; r < Size(); ++r) rows.push_back(r + 1);
  TestTensor input(DataType::kInt32, {rows[Rank()], 3}, RankValues(name, Rank(), DataType::kInt32, rows[Rank()] * 3));
  accord::CollectiveOptions options;
  options.name = name;
  accord::Handle handle = Enqueued(accord::Allgather(input.view(), allocator.Get(), options), name);
  if (!WaitOk(handle, name)) return;
  const int64_t total = static_cast<int64_t>(Size()) * (Size() + 1) / 2;
  std::lock_guard<std::mutex> lock(allocator.mutex);
  CHECK(allocator.tensors.size() == 1);
  const accord::TensorView out = OutputOf(handle, 0, name);
  if (!allocator.tensors.empty()) CHECK(out.data == allocator.tensors.back()->view().data);
  ExpectValues(name, out, DataType::kInt32, {total, 3}, GatheredValues(name, DataType::kInt32, 3, rows));
}

TEST_CASE("allgather: an allocator that fails on one rank fails only that rank's handle") {
  // accord still takes part with scratch memory on the failing rank, so the
  // others complete normally.
  const std::string name = "allgather.failing_allocator";
  RecordingAllocator recording;
  accord::Allocator allocator = recording.Get();
  if (Rank() == 0) {
    allocator = [](DataType, const Shape&, accord::Device) -> accord::Result<accord::TensorView> {
      return accord::Status::Internal("the test allocator refuses");
    };
  }
  std::vector<int64_t> rows;
  for (int r = 0; r < Size(); ++r) rows.push_back(r + 1);
  TestTensor input(DataType::kFloat32, {rows[Rank()], 2},
                   RankValues(name, Rank(), DataType::kFloat32, rows[Rank()] * 2));
  accord::CollectiveOptions options;
  options.name = name;
  accord::Handle handle = Enqueued(accord::Allgather(input.view(), allocator, options), name);
  const accord::Status status = WaitFor(handle, name);
  INFO("rank " << Rank() << ": " << name << ": " << status);
  if (Rank() == 0) {
    CHECK_FALSE(status.ok());
    CHECK_THAT(status.message(), Catch::Contains("the test allocator refuses"));
  } else if (status.ok()) {
    const int64_t total = static_cast<int64_t>(Size()) * (Size() + 1) / 2;
    ExpectValues(name, OutputOf(handle, 0, name), DataType::kFloat32, {total, 2},
                 GatheredValues(name, DataType::kFloat32, 2, rows));
  } else {
    CHECK(status.ok());
  }
}

TEST_CASE("broadcast: from every root, several dtypes") {
  const DataType dtypes[] = {DataType::kFloat32,  DataType::kInt64, DataType::kFloat16,
                             DataType::kBFloat16, DataType::kBool,  DataType::kUInt8};
  struct Case {
    std::string name;
    int root;
    DataType dtype;
    Shape shape;
    TestTensor tensor;
    accord::Handle handle;
  };
  std::vector<Case> cases;
  for (int root = 0; root < Size(); ++root) {
    for (DataType dtype : dtypes) {
      Case c{"broadcast.root" + std::to_string(root) + "." + DataTypeName(dtype), root, dtype, {root + 1, 5}, {}, {}};
      c.tensor = TestTensor(dtype, c.shape, RankValues(c.name, Rank(), dtype, 5 * (root + 1)));
      accord::CollectiveOptions options;
      options.name = c.name;
      c.handle = Enqueued(accord::Broadcast(c.tensor.view(), root, options), c.name);
      cases.push_back(std::move(c));
    }
  }
  for (Case& c : cases) {
    if (!WaitOk(c.handle, c.name)) continue;
    std::vector<double> expected = RankValues(c.name, c.root, c.dtype, 5 * (c.root + 1));
    for (double& v : expected) v = RoundToDataType(c.dtype, v);
    ExpectValues(c.name, c.tensor.view(), c.dtype, c.shape, expected);
  }
}

// Runs one alltoall where rank i sends splits(i)[j] rows to rank j, and
// checks the output rows and received_splits(). Empty splits: even split.
void CheckAlltoall(const std::string& name, DataType dtype, const Shape& trailing,
                   const std::function<std::vector<int64_t>(int)>& splits_of, bool pass_splits) {
  const int64_t row_elements = RowElements(WithRows(1, trailing));
  auto rows_of = [&](int rank) {
    int64_t rows = 0;
    for (int64_t s : splits_of(rank)) rows += s;
    return rows;
  };
  const Shape shape = WithRows(rows_of(Rank()), trailing);
  TestTensor input(dtype, shape, RankValues(name, Rank(), dtype, accord::NumElements(shape)));
  accord::CollectiveOptions options;
  options.name = name;
  const std::vector<int64_t> splits = pass_splits ? splits_of(Rank()) : std::vector<int64_t>{};
  accord::Handle handle = Enqueued(accord::Alltoall(input.view(), splits, nullptr, options), name);
  if (!WaitOk(handle, name)) return;

  std::vector<double> expected;
  std::vector<int64_t> expected_splits;
  for (int src = 0; src < Size(); ++src) {
    const std::vector<int64_t> src_splits = splits_of(src);
    int64_t first = 0;
    for (int j = 0; j < Rank(); ++j) first += src_splits[j];
    const std::vector<double> src_values = RankValues(name, src, dtype, rows_of(src) * row_elements);
    expected.insert(expected.end(), src_values.begin() + first * row_elements,
                    src_values.begin() + (first + src_splits[Rank()]) * row_elements);
    expected_splits.push_back(src_splits[Rank()]);
  }
  for (double& v : expected) v = RoundToDataType(dtype, v);
  int64_t total = 0;
  for (int64_t s : expected_splits) total += s;
  ExpectValues(name, OutputOf(handle, 0, name), dtype, WithRows(total, trailing), expected);
  INFO("rank " << Rank() << ": " << name << ": received_splits()");
  CHECK(handle.received_splits() == expected_splits);
}

TEST_CASE("alltoall: even split (no splits given and explicit)") {
  auto even = [](int) { return std::vector<int64_t>(Size(), 2); };
  CheckAlltoall("alltoall.even.implicit", DataType::kFloat32, {3}, even, false);
  CheckAlltoall("alltoall.even.explicit", DataType::kInt64, {}, even, true);
  CheckAlltoall("alltoall.even.float16", DataType::kFloat16, {2, 2}, even, false);
}

TEST_CASE("alltoall: uneven splits, including zero splits and zero rows") {
  // Rank i sends (i + 2j) % 3 rows to rank j: some zeros, different per pair.
  auto uneven = [](int src) {
    std::vector<int64_t> splits(Size());
    for (int j = 0; j < Size(); ++j) splits[j] = (src + 2 * j) % 3;
    return splits;
  };
  CheckAlltoall("alltoall.uneven.float32", DataType::kFloat32, {2}, uneven, true);
  CheckAlltoall("alltoall.uneven.int16", DataType::kInt16, {}, uneven, true);
  CheckAlltoall("alltoall.uneven.bool", DataType::kBool, {3, 1}, uneven, true);
  // Rank 0 sends nothing at all.
  auto none_from_0 = [](int src) { return std::vector<int64_t>(Size(), src == 0 ? 0 : 1); };
  CheckAlltoall("alltoall.none_from_rank0", DataType::kFloat64, {4}, none_from_0, true);
}

// The expected block of a reducescatter for this rank: the op over every
// rank's rows [first, first + rows) of `key`.
std::vector<double> ReducescatterExpected(const std::string& key, DataType dtype, const Shape& shape,
                                          const ReduceSpec& spec) {
  const int64_t row_elements = RowElements(shape);
  const int64_t first = ReducescatterFirstRow(shape[0], Size(), Rank());
  const int64_t rows = ReducescatterRows(shape[0], Size(), Rank());
  std::vector<std::vector<double>> blocks;
  for (int r = 0; r < Size(); ++r) {
    const std::vector<double> all = RankValues(key, r, dtype, accord::NumElements(shape));
    blocks.emplace_back(all.begin() + first * row_elements, all.begin() + (first + rows) * row_elements);
  }
  return Reduce(dtype, blocks, spec);
}

TEST_CASE("reducescatter: Sum and Average, dim 0 not divisible by the size") {
  struct Case {
    std::string name;
    DataType dtype;
    Shape shape;
    ReduceSpec spec;
    TestTensor input;
    accord::Handle handle;
  };
  std::vector<Case> cases;
  const int64_t n = Size();
  const std::vector<Shape> shapes = {{2 * n + 1, 3}, {n + 1}, {1, 4}, {3 * n, 2}};
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
    for (DataType dtype : {DataType::kFloat32, DataType::kInt32, DataType::kFloat16, DataType::kFloat64}) {
      for (size_t s = 0; s < shapes.size(); ++s) {
        Case c{std::string("reducescatter.") + accord::ReduceOpName(op) + "." + DataTypeName(dtype) + "." +
                   std::to_string(s),
               dtype,
               shapes[s],
               ReduceSpec{op},
               {},
               {}};
        if (s == 3) c.spec = ReduceSpec{op, 2.0, 0.5};  // scaled
        c.input = TestTensor(dtype, c.shape, RankValues(c.name, Rank(), dtype, accord::NumElements(c.shape)));
        accord::ReducescatterOptions options;
        options.name = c.name;
        options.op = op;
        options.prescale_factor = c.spec.prescale;
        options.postscale_factor = c.spec.postscale;
        c.handle = Enqueued(accord::Reducescatter(c.input.view(), nullptr, options), c.name);
        cases.push_back(std::move(c));
      }
    }
  }
  for (Case& c : cases) {
    if (!WaitOk(c.handle, c.name)) continue;
    Shape out_shape = c.shape;
    out_shape[0] = ReducescatterRows(c.shape[0], Size(), Rank());
    const double tolerance = c.spec.op == ReduceOp::kAverage ? Tolerance(c.dtype) : 0.0;
    ExpectValues(c.name, OutputOf(c.handle, 0, c.name), c.dtype, out_shape,
                 ReducescatterExpected(c.name, c.dtype, c.shape, c.spec), tolerance);
  }
}

TEST_CASE("grouped allreduce, allgather and reducescatter") {
  // Allreduce: mixed dtypes and shapes; members 0 and 2 in place.
  const std::vector<std::pair<DataType, Shape>> ar = {
      {DataType::kFloat32, {10}}, {DataType::kFloat32, {3, 3}}, {DataType::kInt32, {5}}, {DataType::kFloat64, {1}}};
  std::vector<TestTensor> ar_in, ar_out;
  std::vector<accord::TensorView> ar_in_views, ar_out_views;
  for (size_t i = 0; i < ar.size(); ++i) {
    const std::string key = "grouped.ar." + std::to_string(i);
    ar_in.emplace_back(ar[i].first, ar[i].second,
                       RankValues(key, Rank(), ar[i].first, accord::NumElements(ar[i].second)));
    ar_out.emplace_back(ar[i].first, ar[i].second);
  }
  for (size_t i = 0; i < ar.size(); ++i) {
    ar_in_views.push_back(ar_in[i].view());
    ar_out_views.push_back(i % 2 == 0 ? ar_in[i].view() : ar_out[i].view());
  }
  accord::AllreduceOptions ar_options;
  ar_options.name = "grouped.ar";
  ar_options.op = ReduceOp::kSum;
  accord::Handle ar_handle = Enqueued(accord::GroupedAllreduce(ar_in_views, ar_out_views, ar_options), "grouped.ar");

  // Allgather: rows per rank differ per member.
  const std::vector<Shape> ag_trailing = {{2}, {}, {3, 2}};
  std::vector<TestTensor> ag_in;
  std::vector<accord::TensorView> ag_views;
  for (size_t i = 0; i < ag_trailing.size(); ++i) {
    const std::string key = "grouped.ag." + std::to_string(i);
    const Shape shape = WithRows((Rank() + i) % 3, ag_trailing[i]);
    ag_in.emplace_back(DataType::kInt16, shape, RankValues(key, Rank(), DataType::kInt16, accord::NumElements(shape)));
    ag_views.push_back(ag_in.back().view());
  }
  accord::CollectiveOptions ag_options;
  ag_options.name = "grouped.ag";
  accord::Handle ag_handle = Enqueued(accord::GroupedAllgather(ag_views, nullptr, ag_options), "grouped.ag");

  // Reducescatter: two members, Average.
  const std::vector<Shape> rs_shapes = {{2 * Size() + 1, 2}, {Size(), 3}};
  std::vector<TestTensor> rs_in;
  std::vector<accord::TensorView> rs_views;
  for (size_t i = 0; i < rs_shapes.size(); ++i) {
    const std::string key = "grouped.rs." + std::to_string(i);
    rs_in.emplace_back(DataType::kFloat32, rs_shapes[i],
                       RankValues(key, Rank(), DataType::kFloat32, accord::NumElements(rs_shapes[i])));
    rs_views.push_back(rs_in.back().view());
  }
  accord::ReducescatterOptions rs_options;
  rs_options.name = "grouped.rs";
  rs_options.op = ReduceOp::kAverage;
  accord::Handle rs_handle = Enqueued(accord::GroupedReducescatter(rs_views, nullptr, rs_options), "grouped.rs");

  if (WaitOk(ar_handle, "grouped.ar")) {
    for (size_t i = 0; i < ar.size(); ++i) {
      const std::string key = "grouped.ar." + std::to_string(i);
      const accord::TensorView out = OutputOf(ar_handle, i, key);
      CHECK(out.data == ar_out_views[i].data);
      ExpectValues(key, out, ar[i].first, ar[i].second,
                   ReferenceAllreduce(key, AllRanks(), ar[i].first, accord::NumElements(ar[i].second),
                                      ValueKind::kSmall, ReduceSpec{ReduceOp::kSum}));
    }
  }
  if (WaitOk(ag_handle, "grouped.ag")) {
    for (size_t i = 0; i < ag_trailing.size(); ++i) {
      const std::string key = "grouped.ag." + std::to_string(i);
      std::vector<int64_t> rows;
      int64_t total = 0;
      for (int r = 0; r < Size(); ++r) total += rows.emplace_back((r + i) % 3);
      const Shape row = WithRows(1, ag_trailing[i]);
      ExpectValues(key, OutputOf(ag_handle, i, key), DataType::kInt16, WithRows(total, ag_trailing[i]),
                   GatheredValues(key, DataType::kInt16, RowElements(row), rows));
    }
  }
  if (WaitOk(rs_handle, "grouped.rs")) {
    for (size_t i = 0; i < rs_shapes.size(); ++i) {
      const std::string key = "grouped.rs." + std::to_string(i);
      Shape out_shape = rs_shapes[i];
      out_shape[0] = ReducescatterRows(out_shape[0], Size(), Rank());
      ExpectValues(key, OutputOf(rs_handle, i, key), DataType::kFloat32, out_shape,
                   ReducescatterExpected(key, DataType::kFloat32, rs_shapes[i], ReduceSpec{ReduceOp::kAverage}),
                   Tolerance(DataType::kFloat32));
    }
  }
}

}  // namespace
