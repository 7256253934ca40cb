// Data-parallel training with LibTorch and accord::torch::DistributedOptimizer.
//
// Every rank fits the same small MLP to its own shard of a synthetic
// regression problem (y = sin(x A) B + noise, a different shard per rank);
// gradients are averaged across ranks while backward runs, so every rank
// takes the same step and the model learns from all shards. Run with
//
//   mpirun -np 2 build/examples/libtorch_train [steps]
//   accordrun -np 2 build/examples/libtorch_train [steps]
//
// Rank 0 prints the loss averaged over the ranks. At the end every rank
// checks that its parameters equal rank 0's and that the loss went down;
// the program exits non-zero otherwise.
#include <ATen/CPUGeneratorImpl.h>
#include <accord/torch.h>
#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <utility>

namespace {

constexpr int64_t kInputs = 16;
constexpr int64_t kOutputs = 4;
constexpr int64_t kBatch = 64;

struct Net : torch::nn::Module {
  Net() {
    fc1 = register_module("fc1", torch::nn::Linear(kInputs, 64));
    fc2 = register_module("fc2", torch::nn::Linear(64, 64));
    fc3 = register_module("fc3", torch::nn::Linear(64, kOutputs));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(fc1->forward(x));
    x = torch::relu(fc2->forward(x));
    return fc3->forward(x);
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr};
};

// The synthetic problem: the same A and B on every rank, a different
// stream of inputs per rank.
struct Problem {
  torch::Tensor a, b;
  torch::Generator generator;

  explicit Problem(int rank) {
    torch::manual_seed(1234);
    a = torch::randn({kInputs, 8}) / 4;  // x A has unit variance: a smooth target
    b = torch::randn({8, kOutputs});
    generator = at::make_generator<at::CPUGeneratorImpl>(1000 + rank);
  }
  std::pair<torch::Tensor, torch::Tensor> Batch() {
    torch::Tensor x = torch::randn({kBatch, kInputs}, generator);
    torch::Tensor y = torch::sin(x.matmul(a)).matmul(b) + 0.01 * torch::randn({kBatch, kOutputs}, generator);
    return {x, y};
  }
};

// The mean of `value` over all ranks.
double AverageOverRanks(double value, const std::string& name) {
  accord::AllreduceOptions options;
  options.name = name;
  return accord::torch::allreduce(torch::tensor({value}, torch::kDouble), options).item<double>();
}

}  // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 200;
  try {
    accord::torch::init();
    const int rank = accord::torch::rank();
    const int size = accord::torch::size();

    // Ranks may start from different random weights: rank 0's win.
    torch::manual_seed(rank);
    auto model = std::make_shared<Net>();
    accord::torch::broadcast_parameters(model->named_parameters(), /*root_rank=*/0);

    torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
    accord::torch::DistributedOptimizer opt(sgd, model->named_parameters());
    accord::torch::broadcast_optimizer_state(sgd, /*root_rank=*/0);

    Problem problem(rank);
    double first_loss = 0, last_loss = 0;
    for (int step = 0; step < steps; ++step) {
      auto [x, y] = problem.Batch();
      opt.zero_grad();
      torch::Tensor loss = torch::mse_loss(model->forward(x), y);
      loss.backward();  // each gradient's allreduce starts as soon as it is ready
      opt.step();       // waits for them, then SGD's step
      if (step == 0 || step == steps - 1 || (step + 1) % 50 == 0) {
        const double mean = AverageOverRanks(loss.item<double>(), "loss");
        if (step == 0) first_loss = mean;
        last_loss = mean;
        if (rank == 0) std::printf("step %4d  loss %.5f  (mean over %d ranks)\n", step + 1, mean, size);
      }
    }

    // Every rank must hold rank 0's parameters.
    int failures = 0;
    for (const auto& item : model->named_parameters()) {
      accord::CollectiveOptions options;
      options.name = "check." + item.key();
      const torch::Tensor root = accord::torch::broadcast(item.value().detach(), 0, options);
      if (!torch::equal(root, item.value().detach())) {
        std::fprintf(stderr, "rank %d: parameter %s differs from rank 0's\n", rank, item.key().c_str());
        ++failures;
      }
    }
    if (steps > 1 && !(last_loss < first_loss)) {
      std::fprintf(stderr, "rank %d: the loss did not go down (%.5f -> %.5f)\n", rank, first_loss, last_loss);
      ++failures;
    }
    const double failed_ranks = AverageOverRanks(failures > 0 ? 1.0 : 0.0, "failed") * size;
    if (rank == 0) {
      std::printf(failed_ranks == 0 ? "OK: every rank holds the same parameters; loss %.5f -> %.5f\n"
                                    : "FAILED on some rank; loss %.5f -> %.5f\n",
                  first_loss, last_loss);
    }
    accord::torch::shutdown();
    return failures == 0 ? 0 : 1;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "libtorch_train: %s\n", error.what());
    return 1;
  }
}
