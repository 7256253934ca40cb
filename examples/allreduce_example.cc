// A first accord program: allreduce, allgather and broadcast on CPU tensors.
//
// Run it with
//   mpirun -np 2 build/examples/allreduce_example
// (add --allow-run-as-root as root, and --oversubscribe for more ranks than
// cores). Every rank checks every element it receives; the program prints
// "OK" on rank 0 and exits 0 only if every rank saw the right values.
//
// The pattern is the one a training loop uses: enqueue named collectives
// (which return at once), then wait on their handles.
#include <cstdio>
#include <string>
#include <vector>

#include <accord/accord.h>

namespace {

// Wraps a std::vector<float> in the non-owning view accord works on. The
// vector must outlive the operation's handle.
accord::TensorView ViewOf(std::vector<float>& values, accord::Shape shape) {
  accord::TensorView view;
  view.data = values.data();
  view.dtype = accord::DataType::kFloat32;
  view.shape = std::move(shape);
  return view;
}

// Counts the elements of `got` that differ from `expected(i)` and prints the
// first few with rank, index, expected and got.
template <typename ExpectedFn>
int CountMismatches(const char* what, const float* got, int64_t n, ExpectedFn expected) {
  int mismatches = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float want = expected(i);
    if (got[i] == want) continue;
    if (++mismatches <= 5) {
      std::fprintf(stderr, "rank %d: %s[%lld]: expected %g, got %g\n", accord::Rank(), what, static_cast<long long>(i),
                   want, got[i]);
    }
  }
  return mismatches;
}

bool Report(const accord::Status& status, const char* what) {
  if (status.ok()) return true;
  std::fprintf(stderr, "rank %d: %s failed: %s\n", accord::Rank(), what, status.ToString().c_str());
  return false;
}

// Rank r contributes r+1 everywhere; checks Sum and Average of three tensors
// of different sizes, all in flight at the same time (so accord may fuse them).
int RunAllreduces() {
  const int rank = accord::Rank();
  const int size = accord::Size();
  const float sum = size * (size + 1) / 2.0f;
  const float average = (size + 1) / 2.0f;

  const std::vector<int64_t> lengths = {1, 1000, 4096};
  std::vector<std::vector<float>> sums, averages;
  std::vector<accord::Handle> handles;
  for (size_t t = 0; t < lengths.size(); ++t) {
    sums.emplace_back(lengths[t], static_cast<float>(rank + 1));
    averages.emplace_back(lengths[t], static_cast<float>(rank + 1));
  }
  for (size_t t = 0; t < lengths.size(); ++t) {
    accord::AllreduceOptions opts;
    opts.name = "example.sum." + std::to_string(t);
    opts.op = accord::ReduceOp::kSum;
    accord::TensorView view = ViewOf(sums[t], {lengths[t]});
    auto handle = accord::Allreduce(view, view, opts);  // in place
    if (!Report(handle.status(), "enqueue allreduce (sum)")) return 1;
    handles.push_back(*handle);

    opts.name = "example.average." + std::to_string(t);
    opts.op = accord::ReduceOp::kAverage;
    view = ViewOf(averages[t], {lengths[t]});
    handle = accord::Allreduce(view, view, opts);
    if (!Report(handle.status(), "enqueue allreduce (average)")) return 1;
    handles.push_back(*handle);
  }
  for (const accord::Handle& handle : handles) {
    if (!Report(handle.Wait(), "allreduce")) return 1;
  }

  int mismatches = 0;
  for (size_t t = 0; t < lengths.size(); ++t) {
    mismatches += CountMismatches("sum", sums[t].data(), lengths[t], [&](int64_t) { return sum; });
    mismatches += CountMismatches("average", averages[t].data(), lengths[t], [&](int64_t) { return average; });
  }
  if (rank == 0 && mismatches == 0) {
    std::printf("allreduce: Sum = %g (expected %g), Average = %g (expected %g)\n", sums[0][0], sum, averages[0][0],
                average);
  }
  return mismatches;
}

// Rank r contributes r+1 rows of 3 values, all equal to r: the rows per rank
// differ, which allgather allows along dim 0.
int RunAllgather() {
  const int rank = accord::Rank();
  const int size = accord::Size();
  const int64_t cols = 3;
  std::vector<float> input((rank + 1) * cols, static_cast<float>(rank));

  accord::CollectiveOptions opts;
  opts.name = "example.allgather";
  auto handle = accord::Allgather(ViewOf(input, {rank + 1, cols}), nullptr, opts);
  if (!Report(handle.status(), "enqueue allgather")) return 1;
  if (!Report(handle->Wait(), "allgather")) return 1;

  // The output (allocated by accord, alive while the handle is) holds rank 0's
  // one row, then rank 1's two rows, and so on.
  const accord::TensorView output = handle->outputs().at(0);
  const int64_t rows = size * (size + 1) / 2;
  if (output.shape != accord::Shape{rows, cols}) {
    std::fprintf(stderr, "rank %d: allgather: expected shape %s, got %s\n", rank,
                 accord::ShapeToString({rows, cols}).c_str(), accord::ShapeToString(output.shape).c_str());
    return 1;
  }
  std::vector<float> expected;
  for (int r = 0; r < size; ++r) {
    expected.insert(expected.end(), (r + 1) * cols, static_cast<float>(r));
  }
  const int mismatches = CountMismatches("allgather", static_cast<const float*>(output.data), rows * cols,
                                         [&](int64_t i) { return expected[i]; });
  if (rank == 0 && mismatches == 0) {
    std::printf("allgather: shape %s, row values", accord::ShapeToString(output.shape).c_str());
    for (int64_t row = 0; row < rows; ++row) std::printf(" %g", expected[row * cols]);
    std::printf("\n");
  }
  return mismatches;
}

// Rank 0 holds 42s, every other rank -1s; afterwards everyone holds 42s.
int RunBroadcast() {
  const int rank = accord::Rank();
  const int64_t n = 100;
  const float root_value = 42.0f;
  std::vector<float> values(n, rank == 0 ? root_value : -1.0f);

  accord::CollectiveOptions opts;
  opts.name = "example.broadcast";
  auto handle = accord::Broadcast(ViewOf(values, {n}), /*root_rank=*/0, opts);
  if (!Report(handle.status(), "enqueue broadcast")) return 1;
  if (!Report(handle->Wait(), "broadcast")) return 1;

  const int mismatches = CountMismatches("broadcast", values.data(), n, [&](int64_t) { return root_value; });
  if (rank == 0 && mismatches == 0) std::printf("broadcast: value %g from rank 0\n", values[0]);
  return mismatches;
}

// Sums every rank's failure count through accord itself, so that one failing
// rank fails the whole run.
int TotalFailures(int local_failures) {
  std::vector<float> count = {static_cast<float>(local_failures)};
  accord::AllreduceOptions opts;
  opts.name = "example.failures";
  opts.op = accord::ReduceOp::kSum;
  accord::TensorView view = ViewOf(count, {1});
  auto handle = accord::Allreduce(view, view, opts);
  if (!handle.ok() || !handle->Wait().ok()) return local_failures + 1;
  return static_cast<int>(count[0]);
}

}  // namespace

int main() {
  if (!Report(accord::Init(), "accord::Init")) return 1;
  std::printf("rank %d of %d (local rank %d of %d)\n", accord::Rank(), accord::Size(), accord::LocalRank(),
              accord::LocalSize());
  std::fflush(stdout);

  int failures = 0;
  failures += RunAllreduces();
  failures += RunAllgather();
  failures += RunBroadcast();
  const int total = TotalFailures(failures);

  if (accord::Rank() == 0) {
    if (total == 0) {
      std::printf("OK\n");
    } else {
      std::printf("FAILED: %d mismatches or errors over all ranks\n", total);
    }
  }
  if (!Report(accord::Shutdown(), "accord::Shutdown")) return 1;
  return total == 0 ? 0 : 1;
}
