// libtorch_broadcast_check: what the check before broadcast_parameters adds
// (every rank agreeing on the names, dtypes and shapes of its tensors, see
// frameworks/torch/src/tensor_agreement.h), for a ResNet-50-size state dict.
//
//   mpirun -np 2 build/benchmarks/libtorch_broadcast_check [--runs=200] [--broadcasts=10]
//
// The state dict has the names and shapes of torchvision's ResNet-50 (320
// entries: 53 convolutions, 53 BatchNorms with their running statistics and
// counters, the classifier; 25.6M parameters), built here without
// torchvision. Timed, each `runs` times after 10 untimed calls, the slowest
// rank of each call counted:
//
//   describe    building the check's list from the state dict (local)
//   check       describing, hashing and the allgather of the digest: the
//               whole cost broadcast_parameters adds when the ranks agree
//   allreduce   a 1-element allreduce, the smallest collective, for scale
//   allgather   a 2-element int64 allgather, the check's collective alone
//
// and `broadcasts` times the whole broadcast_parameters (check and
// broadcasts, 98 MiB), for the check's share of it. Rank 0 prints medians.
#include <accord/torch.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "tensor_agreement.h"

namespace {

using accord::torch::internal::Described;
using Dict = torch::OrderedDict<std::string, at::Tensor>;

void AddConv(Dict* dict, const std::string& name, int64_t out, int64_t in, int64_t k) {
  dict->insert(name + ".weight", at::zeros({out, in, k, k}));
}

void AddBatchNorm(Dict* dict, const std::string& name, int64_t channels) {
  for (const char* key : {".weight", ".bias", ".running_mean", ".running_var"}) {
    dict->insert(name + key, at::zeros({channels}));
  }
  dict->insert(name + ".num_batches_tracked", at::zeros({}, at::kLong));
}

// torchvision's resnet50().state_dict(): names, shapes and dtypes.
Dict ResNet50StateDict() {
  Dict dict;
  AddConv(&dict, "conv1", 64, 3, 7);
  AddBatchNorm(&dict, "bn1", 64);
  int64_t in = 64;
  const int64_t blocks[] = {3, 4, 6, 3};
  for (int layer = 0; layer < 4; ++layer) {
    const int64_t width = 64 << layer;
    for (int64_t b = 0; b < blocks[layer]; ++b) {
      const std::string block = "layer" + std::to_string(layer + 1) + "." + std::to_string(b);
      AddConv(&dict, block + ".conv1", width, in, 1);
      AddBatchNorm(&dict, block + ".bn1", width);
      AddConv(&dict, block + ".conv2", width, width, 3);
      AddBatchNorm(&dict, block + ".bn2", width);
      AddConv(&dict, block + ".conv3", 4 * width, width, 1);
      AddBatchNorm(&dict, block + ".bn3", 4 * width);
      if (b == 0) {
        AddConv(&dict, block + ".downsample.0", 4 * width, in, 1);
        AddBatchNorm(&dict, block + ".downsample.1", 4 * width);
      }
      in = 4 * width;
    }
  }
  dict.insert("fc.weight", at::zeros({1000, 2048}));
  dict.insert("fc.bias", at::zeros({1000}));
  return dict;
}

// What broadcast_parameters builds before its check.
std::vector<Described> Describe(const Dict& dict) {
  std::vector<Described> described;
  for (const auto& item : dict) described.push_back(accord::torch::internal::Describe(item.key(), item.value()));
  return described;
}

double Now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// Median over calls of the slowest rank's time of `call`, in microseconds.
double TimeSlowest(int runs, int warmup, const std::function<void()>& call) {
  for (int i = 0; i < warmup; ++i) call();
  std::vector<double> mine;
  for (int i = 0; i < runs; ++i) {
    const double t0 = Now();
    call();
    mine.push_back((Now() - t0) * 1e6);
  }
  accord::CollectiveOptions options;
  options.name = "bench.times";
  const at::Tensor all = accord::torch::allgather(at::tensor(mine, at::kDouble), options);
  std::vector<double> slowest = std::vector<double>(all.data_ptr<double>(), all.data_ptr<double>() + runs);
  for (int64_t r = 1; r < all.numel() / runs; ++r) {
    for (int i = 0; i < runs; ++i) slowest[i] = std::max(slowest[i], all.data_ptr<double>()[r * runs + i]);
  }
  std::sort(slowest.begin(), slowest.end());
  return slowest[slowest.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int runs = 200, broadcasts = 10;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--runs=", 0) == 0)
      runs = std::atoi(arg.c_str() + 7);
    else if (arg.rfind("--broadcasts=", 0) == 0)
      broadcasts = std::atoi(arg.c_str() + 13);
    else {
      std::fprintf(stderr, "libtorch_broadcast_check: unknown argument %s\n", arg.c_str());
      return 2;
    }
  }
  if (runs < 1 || broadcasts < 1) return 2;
  try {
    accord::torch::init();
    at::set_num_threads(1);
    const Dict dict = ResNet50StateDict();
    int64_t parameters = 0;
    for (const auto& item : dict) {
      const bool statistic = item.key().find("running_") != std::string::npos ||
                             item.key().find("num_batches_tracked") != std::string::npos;
      if (!statistic) parameters += item.value().numel();
    }
    accord::torch::internal::AgreementCheck check;
    check.caller = "broadcast_parameters";
    check.collective = "broadcast_parameters.check";

    const double describe = TimeSlowest(runs, 10, [&] { (void)Describe(dict); });
    const double checked =
        TimeSlowest(runs, 10, [&] { accord::torch::internal::CheckSameTensors(Describe(dict), check); });
    at::Tensor one = at::ones({1});
    accord::AllreduceOptions sum;
    sum.name = "bench.one";
    const double allreduce = TimeSlowest(runs, 10, [&] { accord::torch::allreduce_(one, sum); });
    const at::Tensor two = at::zeros({2}, at::kLong);
    accord::CollectiveOptions gather;
    gather.name = "bench.two";
    const double allgather = TimeSlowest(runs, 10, [&] { (void)accord::torch::allgather(two, gather); });
    const double whole = TimeSlowest(broadcasts, 1, [&] { accord::torch::broadcast_parameters(dict, 0); });
    if (accord::torch::rank() == 0) {
      std::printf(
          "libtorch_broadcast_check: np=%d, a ResNet-50 state dict (%zu tensors, %.1fM parameters); "
          "medians of the slowest rank over %d calls (broadcast_parameters: %d)\n",
          accord::torch::size(), dict.size(), parameters / 1e6, runs, broadcasts);
      std::printf("  describe            %9.1f us\n", describe);
      std::printf("  check               %9.1f us   (what broadcast_parameters adds)\n", checked);
      std::printf("  1-element allreduce %9.1f us\n", allreduce);
      std::printf("  2-element allgather %9.1f us\n", allgather);
      std::printf("  broadcast_parameters%9.1f us   (check: %.2f%% of it)\n", whole, 100.0 * checked / whole);
    }
    accord::torch::shutdown();
  } catch (const std::exception& error) {
    std::fprintf(stderr, "libtorch_broadcast_check: %s\n", error.what());
    return 1;
  }
  return 0;
}
