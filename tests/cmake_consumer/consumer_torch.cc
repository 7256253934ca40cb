// Built against an installed accord: accord::torch's quick start on a tiny
// model (two steps of DistributedOptimizer on rank-dependent data), then a
// check that every rank ended with rank 0's parameters. Exits non-zero on
// any failure.
#include <accord/torch.h>
#include <torch/torch.h>

#include <cstdio>

int main() {
  try {
    accord::torch::init();
    torch::manual_seed(1);
    auto model = torch::nn::Linear(3, 2);
    accord::torch::broadcast_parameters(model->named_parameters(), /*root_rank=*/0);
    torch::optim::SGD sgd(model->parameters(), 0.1);
    accord::torch::DistributedOptimizer opt(sgd, model->named_parameters());
    const int rank = accord::torch::rank();
    for (int step = 0; step < 2; ++step) {
      opt.zero_grad();
      const at::Tensor x = torch::full({4, 3}, static_cast<double>(rank + step + 1), torch::kFloat);
      model->forward(x).pow(2).mean().backward();
      opt.step();
    }
    int failures = 0;
    for (const auto& item : model->named_parameters()) {
      accord::CollectiveOptions options;
      options.name = "consumer.check." + item.key();
      const at::Tensor root = accord::torch::broadcast(item.value().detach(), 0, options);
      if (!torch::equal(root, item.value().detach())) {
        std::fprintf(stderr, "consumer_torch: rank %d: parameter %s differs from rank 0's\n", rank, item.key().c_str());
        ++failures;
      }
    }
    accord::torch::shutdown();
    if (failures == 0) std::printf("consumer_torch: rank %d OK\n", rank);
    return failures == 0 ? 0 : 1;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "consumer_torch: %s\n", error.what());
    return 1;
  }
}
