// accord::torch collectives on at::Tensor across ranks: allreduce (in place,
// out of place, async, non-contiguous, scaled), grouped allreduce, allgather,
// broadcast, alltoall, reducescatter and barrier, on float32, float64,
// float16, bfloat16 and integer tensors (and bool where it is defined), each
// checked element by element against a reference every rank computes from
// every rank's seeded input; and the errors: ranks that disagree, bad tensors,
// CUDA tensors when LibTorch has no CUDA.
#include "torch_test_util.h"  // first: LibTorch, then Catch

#include <c10/core/TensorImpl.h>

#include <functional>
#include <string>
#include <vector>

namespace {

using accord::DataType;
using accord::ReduceOp;
using namespace accord_test;
using namespace accord_torch_test;

const std::vector<int64_t> kShape = {3, 5};

std::string Label(const std::string& what, const DtypeCase& type) { return what + " " + DataTypeName(type.dtype); }

std::vector<ReduceOp> Ops() { return {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax}; }

TEST_CASE("allreduce out of place and in place, every op and dtype") {
  const int64_t n = kShape[0] * kShape[1];
  for (const DtypeCase& type : TestedDtypes()) {
    for (ReduceOp op : Ops()) {
      const std::string key = Label(std::string("torch.allreduce.") + accord::ReduceOpName(op), type);
      ReduceSpec spec;
      spec.op = op;
      const auto expected = ReferenceAllreduce(key, AllRanks(), type.dtype, n, ValueKind::kSmall, spec);
      const double tolerance = op == ReduceOp::kAverage ? Tolerance(type.dtype) : 0.0;
      accord::AllreduceOptions options;
      options.op = op;

      // Out of place: a new tensor, the input untouched.
      const at::Tensor input = RankTensor(key, Rank(), kShape, type);
      const at::Tensor before = input.clone();
      options.name = key + ".out";
      const at::Tensor output = accord::torch::allreduce(input, options);
      CHECK_FALSE(output.is_same(input));
      ExpectTensor(key + " out of place", output, type, kShape, expected, tolerance);
      CHECK(at::equal(input, before));

      // In place: the caller's tensor receives the result and is returned.
      at::Tensor tensor = RankTensor(key, Rank(), kShape, type);
      options.name = key + ".in";
      const at::Tensor result = accord::torch::allreduce_(tensor, options);
      CHECK(result.is_same(tensor));
      ExpectTensor(key + " in place", tensor, type, kShape, expected, tolerance);
    }
  }
}

TEST_CASE("allreduce of bool tensors: Sum and Max are OR, Min is AND") {
  const DtypeCase type{at::kBool, DataType::kBool};
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax}) {
    const std::string key = Label(std::string("torch.allreduce_bool.") + accord::ReduceOpName(op), type);
    ReduceSpec spec;
    spec.op = op;
    const auto expected = ReferenceAllreduce(key, AllRanks(), type.dtype, 15, ValueKind::kSmall, spec);
    accord::AllreduceOptions options;
    options.op = op;
    options.name = key;
    ExpectTensor(key, accord::torch::allreduce(RankTensor(key, Rank(), kShape, type), options), type, kShape, expected);
  }
}

TEST_CASE("allreduce with scale factors, async, all in flight at once") {
  struct Case {
    std::string key;
    DtypeCase type;
    at::Tensor tensor;
    accord::torch::TensorHandle handle;
  };
  std::vector<Case> cases;
  for (const DtypeCase& type : TestedDtypes()) {
    Case c{Label("torch.allreduce_async", type), type, {}, {}};
    c.tensor = RankTensor(c.key, Rank(), {7}, type);
    cases.push_back(std::move(c));
  }
  accord::AllreduceOptions options;
  options.op = ReduceOp::kSum;
  options.prescale_factor = 0.5;
  options.postscale_factor = 4.0;
  // Every allreduce enqueued before the first wait: the core fuses them.
  for (Case& c : cases) {
    options.name = c.key;
    c.handle = accord::torch::allreduce_async_(c.tensor, options);
  }
  ReduceSpec spec;
  spec.op = ReduceOp::kSum;
  spec.prescale = 0.5;
  spec.postscale = 4.0;
  for (Case& c : cases) {
    const at::Tensor result = c.handle.wait();
    CHECK(result.is_same(c.tensor));
    CHECK(c.handle.poll());
    ExpectTensor(c.key, result, c.type, {7},
                 ReferenceAllreduce(c.key, AllRanks(), c.type.dtype, 7, ValueKind::kSmall, spec),
                 Tolerance(c.type.dtype));
    // Waiting again returns the same tensor.
    CHECK(c.handle.wait().is_same(c.tensor));
  }
}

TEST_CASE("allreduce in place of a non-contiguous tensor writes through the view") {
  const DtypeCase type{at::kFloat, DataType::kFloat32};
  const std::string key = "torch.allreduce_transposed";
  // A 4x6 transposed view of a 6x4 tensor: the view's element (i, j) is
  // the base's (j, i).
  const at::Tensor logical = RankTensor(key, Rank(), {4, 6}, type);
  at::Tensor base = at::empty({6, 4}, at::kFloat);
  at::Tensor view = base.t();
  view.copy_(logical);
  REQUIRE_FALSE(view.is_contiguous());
  accord::AllreduceOptions options;
  options.name = key;
  options.op = ReduceOp::kSum;
  const at::Tensor result = accord::torch::allreduce_(view, options);
  CHECK(result.is_same(view));
  ReduceSpec spec;
  spec.op = ReduceOp::kSum;
  const auto expected = ReferenceAllreduce(key, AllRanks(), type.dtype, 24, ValueKind::kSmall, spec);
  ExpectTensor(key + " (view)", view, type, {4, 6}, expected);
  ExpectTensor(key + " (base, transposed back)", base.t(), type, {4, 6}, expected);
}

TEST_CASE("grouped allreduce out of place and in place") {
  for (const DtypeCase& type : TestedDtypes()) {
    const std::string key = Label("torch.grouped_allreduce", type);
    const std::vector<std::vector<int64_t>> shapes = {{4}, {2, 3}, {1, 2, 2}};
    std::vector<at::Tensor> inputs, in_place;
    for (size_t i = 0; i < shapes.size(); ++i) {
      inputs.push_back(RankTensor(key + "." + std::to_string(i), Rank(), shapes[i], type));
      in_place.push_back(inputs.back().clone());
    }
    accord::AllreduceOptions options;
    options.op = ReduceOp::kAverage;
    options.name = key + ".out";
    const std::vector<at::Tensor> outputs = accord::torch::grouped_allreduce(inputs, options);
    options.name = key + ".in";
    const std::vector<at::Tensor> results = accord::torch::grouped_allreduce_(in_place, options);
    REQUIRE(outputs.size() == shapes.size());
    REQUIRE(results.size() == shapes.size());
    ReduceSpec spec;
    spec.op = ReduceOp::kAverage;
    for (size_t i = 0; i < shapes.size(); ++i) {
      const std::string member = key + "." + std::to_string(i);
      int64_t n = 1;
      for (int64_t d : shapes[i]) n *= d;
      const auto expected = ReferenceAllreduce(member, AllRanks(), type.dtype, n, ValueKind::kSmall, spec);
      ExpectTensor(member + " out of place", outputs[i], type, shapes[i], expected, Tolerance(type.dtype));
      CHECK(results[i].is_same(in_place[i]));
      ExpectTensor(member + " in place", in_place[i], type, shapes[i], expected, Tolerance(type.dtype));
    }
  }
  // wait() is for single outputs; a grouped handle needs wait_all().
  accord::AllreduceOptions options;
  options.name = "torch.grouped_allreduce.wait";
  auto handle = accord::torch::grouped_allreduce_async({at::ones({2}), at::ones({3})}, options);
  CHECK_THROWS_AS(handle.wait(), accord::torch::Error);
  const std::vector<at::Tensor> all = handle.wait_all();
  REQUIRE(all.size() == 2);
  CHECK(at::equal(all[1], at::ones({3})));
}

TEST_CASE("allgather with a different dim 0 on every rank") {
  std::vector<DtypeCase> dtypes = TestedDtypes();
  dtypes.push_back({at::kBool, DataType::kBool});
  for (const DtypeCase& type : dtypes) {
    const std::string key = Label("torch.allgather", type);
    const int64_t cols = 3;
    const at::Tensor input = RankTensor(key, Rank(), {Rank() + 1, cols}, type);
    accord::CollectiveOptions options;
    options.name = key;
    const at::Tensor output = accord::torch::allgather(input, options);
    std::vector<double> expected;
    int64_t rows = 0;
    for (int q = 0; q < Size(); ++q) {
      const auto values = RankValues(key, q, type.dtype, (q + 1) * cols);
      expected.insert(expected.end(), values.begin(), values.end());
      rows += q + 1;
    }
    ExpectTensor(key, output, type, {rows, cols}, expected);
  }
}

TEST_CASE("broadcast from every root, in place and out of place") {
  for (const DtypeCase& type : TestedDtypes()) {
    for (int root = 0; root < Size(); ++root) {
      const std::string key = Label("torch.broadcast.root" + std::to_string(root), type);
      const auto expected = RankValues(key, root, type.dtype, 15);
      accord::CollectiveOptions options;
      options.name = key + ".out";
      const at::Tensor input = RankTensor(key, Rank(), kShape, type);
      const at::Tensor before = input.clone();
      const at::Tensor output = accord::torch::broadcast(input, root, options);
      ExpectTensor(key + " out of place", output, type, kShape, expected);
      CHECK(at::equal(input, before));

      options.name = key + ".in";
      at::Tensor tensor = RankTensor(key, Rank(), kShape, type);
      auto handle = accord::torch::broadcast_async_(tensor, root, options);
      CHECK(handle.wait().is_same(tensor));
      ExpectTensor(key + " in place", tensor, type, kShape, expected);
    }
  }
}

TEST_CASE("alltoall with uneven splits and received splits") {
  // Rank s sends 1 + (s + d) % 2 rows to rank d.
  auto rows_from_to = [](int s, int d) -> int64_t { return 1 + (s + d) % 2; };
  const int64_t cols = 2;
  for (const DtypeCase& type : TestedDtypes()) {
    const std::string key = Label("torch.alltoall", type);
    std::vector<int64_t> splits;
    int64_t rows = 0;
    for (int d = 0; d < Size(); ++d) {
      splits.push_back(rows_from_to(Rank(), d));
      rows += splits.back();
    }
    const at::Tensor input = RankTensor(key, Rank(), {rows, cols}, type);
    accord::CollectiveOptions options;
    options.name = key;
    auto handle = accord::torch::alltoall_async(input, splits, options);
    const at::Tensor output = handle.wait();
    std::vector<double> expected;
    std::vector<int64_t> expected_splits;
    int64_t received = 0;
    for (int s = 0; s < Size(); ++s) {
      int64_t sender_rows = 0, offset = 0;
      for (int d = 0; d < Size(); ++d) {
        if (d == Rank()) offset = sender_rows;
        sender_rows += rows_from_to(s, d);
      }
      const auto values = RankValues(key, s, type.dtype, sender_rows * cols);
      const int64_t count = rows_from_to(s, Rank());
      expected.insert(expected.end(), values.begin() + offset * cols, values.begin() + (offset + count) * cols);
      expected_splits.push_back(count);
      received += count;
    }
    ExpectTensor(key, output, type, {received, cols}, expected);
    CHECK(handle.received_splits() == expected_splits);
  }

  // Without splits: dim 0 is divided evenly.
  const DtypeCase type{at::kFloat, DataType::kFloat32};
  const std::string key = "torch.alltoall.even";
  const at::Tensor input = RankTensor(key, Rank(), {2 * Size()}, type);
  accord::CollectiveOptions options;
  options.name = key;
  const at::Tensor output = accord::torch::alltoall(input, {}, options);
  std::vector<double> expected;
  for (int s = 0; s < Size(); ++s) {
    const auto values = RankValues(key, s, type.dtype, 2 * Size());
    expected.insert(expected.end(), values.begin() + 2 * Rank(), values.begin() + 2 * Rank() + 2);
  }
  ExpectTensor(key, output, type, {2 * Size()}, expected);
}

TEST_CASE("reducescatter, Sum and Average, uneven rows") {
  const int64_t rows = 2 * Size() + 1, cols = 3;
  for (const DtypeCase& type : TestedDtypes()) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
      const std::string key = Label(std::string("torch.reducescatter.") + accord::ReduceOpName(op), type);
      accord::ReducescatterOptions options;
      options.name = key;
      options.op = op;
      const at::Tensor output = accord::torch::reducescatter(RankTensor(key, Rank(), {rows, cols}, type), options);
      ReduceSpec spec;
      spec.op = op;
      const auto full = ReferenceAllreduce(key, AllRanks(), type.dtype, rows * cols, ValueKind::kSmall, spec);
      const int64_t first = ReducescatterFirstRow(rows, Size(), Rank());
      const int64_t mine = ReducescatterRows(rows, Size(), Rank());
      const std::vector<double> expected(full.begin() + first * cols, full.begin() + (first + mine) * cols);
      ExpectTensor(key, output, type, {mine, cols}, expected, op == ReduceOp::kAverage ? Tolerance(type.dtype) : 0.0);
    }
  }
}

TEST_CASE("barrier, rank queries and init when already initialised") {
  CHECK_NOTHROW(accord::torch::init());
  CHECK(accord::torch::is_initialized());
  CHECK(accord::torch::rank() == Rank());
  CHECK(accord::torch::size() == Size());
  CHECK(accord::torch::local_rank() == accord::LocalRank());
  CHECK(accord::torch::local_size() == accord::LocalSize());
  CHECK_NOTHROW(accord::torch::barrier());
}

TEST_CASE("a dropped handle: the operation finishes in the background") {
  // Neither the handle nor the tensor outlives this block; the operation
  // keeps its tensors until it completes.
  for (int i = 0; i < 20; ++i) {
    accord::AllreduceOptions options;
    options.name = "torch.dropped." + std::to_string(i);
    accord::torch::allreduce_async_(at::full({1000}, static_cast<double>(Rank()), at::kDouble), options);
  }
  // Later operations (which release finished orphans first) still work.
  accord::AllreduceOptions options;
  options.name = "torch.after_dropped";
  options.op = ReduceOp::kSum;
  const at::Tensor sum = accord::torch::allreduce(at::ones({4}, at::kInt), options);
  CHECK(at::equal(sum, at::full({4}, Size(), at::kInt)));
}

TEST_CASE("errors carry the core's message and code") {
  SECTION("ranks disagree on the shape: every rank fails with kMismatch") {
    accord::AllreduceOptions options;
    options.name = "torch.error.shape";
    try {
      accord::torch::allreduce(at::ones({Rank() + 1}), options);
      FAIL_CHECK("rank " << Rank() << ": the mismatched allreduce did not throw");
    } catch (const accord::torch::Error& error) {
      CHECK(error.code() == accord::StatusCode::kMismatch);
      const std::string message = error.what();
      INFO("rank " << Rank() << ": " << message);
      CHECK(message.find("torch.error.shape") != std::string::npos);
      CHECK(message.find("shape") != std::string::npos);
    }
  }
  SECTION("an unsupported dtype is refused before anything is enqueued") {
    try {
      accord::torch::allreduce(at::ones({2}, at::kComplexFloat));
      FAIL_CHECK("a complex tensor was accepted");
    } catch (const accord::torch::Error& error) {
      CHECK(error.code() == accord::StatusCode::kInvalidArgument);
      CHECK(std::string(error.what()).find("ComplexFloat") != std::string::npos);
    }
  }
  SECTION("undefined and sparse tensors") {
    CHECK_THROWS_AS(accord::torch::allreduce(at::Tensor()), accord::torch::Error);
    const at::Tensor sparse = at::ones({2, 2}).to_sparse();
    try {
      accord::torch::broadcast_(sparse, 0);
      FAIL_CHECK("a sparse tensor was accepted");
    } catch (const accord::torch::Error& error) {
      CHECK(error.code() == accord::StatusCode::kInvalidArgument);
      CHECK(std::string(error.what()).find("dense") != std::string::npos);
    }
  }
  SECTION("arguments the core refuses: a root outside the set, indivisible alltoall") {
    try {
      accord::torch::broadcast(at::ones({2}), Size());
      FAIL_CHECK("a root rank outside the set was accepted");
    } catch (const accord::torch::Error& error) {
      CHECK(error.code() == accord::StatusCode::kInvalidArgument);
      CHECK(std::string(error.what()).find("root rank") != std::string::npos);
    }
    CHECK_THROWS_AS(accord::torch::alltoall(at::ones({Size() + 1})), accord::torch::Error);
  }
  SECTION("a wait with a timeout, then the other ranks join and it completes") {
    // Rank 0 submits first and times out waiting; the others submit only
    // after the barrier, which rank 0 enters after its timeout.
    accord::AllreduceOptions options;
    options.name = "torch.error.late";
    options.op = ReduceOp::kSum;
    accord::torch::TensorHandle handle;
    if (Rank() == 0) {
      handle = accord::torch::allreduce_async(at::ones({3}), options);
      if (Size() > 1) {
        try {
          handle.wait(std::chrono::milliseconds(50));
          FAIL_CHECK("a wait on an operation no other rank had submitted returned");
        } catch (const accord::torch::Error& error) {
          CHECK(error.code() == accord::StatusCode::kTimeout);
        }
      }
    }
    accord::torch::barrier();
    if (Rank() != 0) handle = accord::torch::allreduce_async(at::ones({3}), options);
    CHECK(at::equal(handle.wait(), at::full({3}, static_cast<float>(Size()))));
  }
}

#if !ACCORD_TORCH_WITH_CUDA
// A CUDA tensor as a LibTorch without CUDA can describe one (at::empty
// cannot make it): a CUDA storage over host memory that nothing reads, as
// the adapter refuses the tensor before anything is enqueued.
at::Tensor DescribedCudaTensor(std::vector<float>& memory) {
  c10::Storage storage(c10::Storage::use_byte_size_t(), memory.size() * sizeof(float),
                       c10::DataPtr(memory.data(), c10::Device(c10::kCUDA, 0)), nullptr, false);
  at::Tensor tensor = at::detail::make_tensor<c10::TensorImpl>(
      std::move(storage), c10::DispatchKeySet(c10::DispatchKey::CUDA), caffe2::TypeMeta::Make<float>());
  tensor.unsafeGetTensorImpl()->set_sizes_contiguous({static_cast<int64_t>(memory.size())});
  return tensor;
}

TEST_CASE("CUDA tensors are refused when LibTorch has no CUDA, and the error says so") {
  std::vector<float> memory(4, 1.0f);
  const at::Tensor cuda = DescribedCudaTensor(memory);
  REQUIRE(cuda.is_cuda());
  const auto refused = [](const std::string& what, const std::function<void()>& call) {
    try {
      call();
      FAIL_CHECK("rank " << Rank() << ": " << what << " accepted a CUDA tensor");
    } catch (const accord::torch::Error& error) {
      const std::string message = error.what();
      INFO("rank " << Rank() << ": " << what << ": " << message);
      CHECK(error.code() == accord::StatusCode::kUnimplemented);
      CHECK(message.find("cuda:0") != std::string::npos);
      CHECK(message.find("LibTorch without CUDA") != std::string::npos);
    }
  };
  refused("allreduce", [&] { accord::torch::allreduce(cuda); });
  refused("allreduce_", [&] { accord::torch::allreduce_(cuda); });
  refused("grouped_allreduce", [&] { accord::torch::grouped_allreduce({cuda, cuda}); });
  refused("allgather", [&] { accord::torch::allgather(cuda); });
  refused("broadcast", [&] { accord::torch::broadcast(cuda, 0); });
  refused("broadcast_", [&] { accord::torch::broadcast_(cuda, 0); });
  refused("alltoall", [&] { accord::torch::alltoall(cuda); });
  refused("reducescatter", [&] { accord::torch::reducescatter(cuda); });
  refused("broadcast_parameters", [&] { accord::torch::broadcast_parameters(std::vector<at::Tensor>{cuda}, 0); });
  // Nothing was enqueued: the next collective works.
  accord::AllreduceOptions options;
  options.name = "torch.after_cuda_refused";
  options.op = ReduceOp::kSum;
  CHECK(at::equal(accord::torch::allreduce(at::ones({2}, at::kInt), options), at::full({2}, Size(), at::kInt)));
}
#endif

}  // namespace
