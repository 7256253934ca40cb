// Built against an installed accord: allreduce (Sum) of rank+1 over all
// ranks, checked on every rank. Exits non-zero on any failure.
#include <accord/accord.h>

#include <cstdio>
#include <vector>

int main() {
  accord::Status status = accord::Init();
  if (!status.ok()) {
    std::fprintf(stderr, "consumer_core: Init failed: %s\n", status.ToString().c_str());
    return 1;
  }
  const int rank = accord::Rank(), size = accord::Size();
  std::vector<float> values(4, static_cast<float>(rank + 1));
  accord::TensorView view;
  view.data = values.data();
  view.dtype = accord::DataType::kFloat32;
  view.shape = {4};
  accord::AllreduceOptions options;
  options.name = "consumer.core";
  options.op = accord::ReduceOp::kSum;
  auto handle = accord::Allreduce(view, view, options);
  status = handle.ok() ? handle->Wait() : handle.status();
  int failures = status.ok() ? 0 : 1;
  const float expected = size * (size + 1) / 2.0f;
  for (size_t i = 0; i < values.size() && status.ok(); ++i) {
    if (values[i] != expected) {
      std::fprintf(stderr, "consumer_core: rank %d index %zu: expected %g, got %g\n", rank, i, expected, values[i]);
      ++failures;
    }
  }
  if (!status.ok()) std::fprintf(stderr, "consumer_core: rank %d: %s\n", rank, status.ToString().c_str());
  (void)accord::Shutdown();
  if (failures == 0) std::printf("consumer_core: rank %d of %d OK\n", rank, size);
  return failures == 0 ? 0 : 1;
}
