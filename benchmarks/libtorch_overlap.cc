// libtorch_overlap: what DistributedOptimizer's overlap of communication with
// backward is worth, measured on one model in one run.
//
//   mpirun -np 2 build/benchmarks/libtorch_overlap [--layers=8] [--hidden=1024]
//       [--batch=64] [--steps=10] [--rounds=5] [--warmup=2] [--threads=1]
//       [--variants=overlap,after_async,after_sync,local]
//
// The model is an MLP of `layers` x (Linear(hidden, hidden) + ReLU), float32,
// trained with SGD on random data. Each step is zero_grad, forward, MSE loss,
// backward, gradient averaging, SGD step. The variants differ only in how the
// gradients are averaged:
//
//   overlap      accord::torch::DistributedOptimizer: each gradient's
//                allreduce is enqueued by a hook as soon as backward has
//                produced it, and step() waits for them
//   after_async  after backward, every gradient's allreduce is enqueued, then
//                all are awaited (fused by the core, but no overlap)
//   after_sync   after backward, one blocking allreduce per gradient (what a
//                LibTorch user writes without an overlapping optimizer)
//   local        no averaging at all: the compute-only lower bound
//
// Variants alternate within each round (round k runs every variant for
// `steps` timed steps after `warmup` untimed ones), so slow drift of a shared
// machine falls on all of them alike. A variant's figures are medians over
// rounds of the round's mean times, taking the slowest rank each round: the
// step, forward + backward, and the wait after backward for the averaged
// gradients (the communication backward did not hide). Rank 0 prints them,
// each step time's ratio to overlap's, and the load average before and
// after. The model is the W4 MLP of docs/benchmarks.md, where a run is
// recorded.
#include <accord/torch.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

struct Options {
  int layers = 8;
  int hidden = 1024;
  int batch = 64;
  int steps = 10;
  int rounds = 5;
  int warmup = 2;
  int threads = 1;
  std::string variants = "overlap,after_async,after_sync,local";  // run in this order each round
};

bool ParseOptions(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const size_t eq = arg.find('=');
    if (arg.rfind("--", 0) != 0 || eq == std::string::npos) {
      std::fprintf(stderr, "libtorch_overlap: unknown argument %s\n", arg.c_str());
      return false;
    }
    const std::string key = arg.substr(2, eq - 2);
    if (key == "variants") {
      o->variants = arg.substr(eq + 1);
      continue;
    }
    const int value = std::atoi(arg.c_str() + eq + 1);
    std::map<std::string, int*> fields = {{"layers", &o->layers},  {"hidden", &o->hidden}, {"batch", &o->batch},
                                          {"steps", &o->steps},    {"rounds", &o->rounds}, {"warmup", &o->warmup},
                                          {"threads", &o->threads}};
    auto it = fields.find(key);
    if (it == fields.end() || value < (key == "warmup" ? 0 : 1)) {
      std::fprintf(stderr, "libtorch_overlap: bad option %s\n", arg.c_str());
      return false;
    }
    *it->second = value;
  }
  return true;
}

double LoadAverage() {
  std::ifstream in("/proc/loadavg");
  double load = -1;
  in >> load;
  return load;
}

double Now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

torch::nn::Sequential MakeModel(const Options& o) {
  torch::manual_seed(0);
  torch::nn::Sequential model;
  for (int i = 0; i < o.layers; ++i) {
    model->push_back(torch::nn::Linear(o.hidden, o.hidden));
    model->push_back(torch::nn::ReLU());
  }
  return model;
}

enum class Variant { kOverlap, kAfterAsync, kAfterSync, kLocal };
const char* VariantName(Variant v) {
  switch (v) {
    case Variant::kOverlap: return "overlap";
    case Variant::kAfterAsync: return "after_async";
    case Variant::kAfterSync: return "after_sync";
    case Variant::kLocal: return "local";
  }
  return "?";
}

// Mean times of the timed steps of one variant, in seconds: the whole step,
// forward + backward, and the wait for the averaged gradients after backward
// (the communication that was not hidden behind backward).
struct StepTimes {
  double step = 0, backward = 0, wait = 0;
};

// Runs `warmup` + `steps` steps of `variant`.
StepTimes RunSteps(Variant variant, const Options& o, torch::nn::Sequential& model, torch::optim::SGD& sgd,
                   const torch::Tensor& x, const torch::Tensor& y) {
  const auto named = model->named_parameters();
  // The optimizer's hooks exist only while it does: only this variant uses them.
  std::unique_ptr<accord::torch::DistributedOptimizer> opt;
  if (variant == Variant::kOverlap) opt = std::make_unique<accord::torch::DistributedOptimizer>(sgd, named);
  StepTimes sum;
  for (int step = 0; step < o.warmup + o.steps; ++step) {
    const double t0 = Now();
    sgd.zero_grad();
    torch::mse_loss(model->forward(x), y).backward();
    const double t1 = Now();
    switch (variant) {
      case Variant::kOverlap:
        opt->synchronize();  // then opt->step() does not reduce again
        break;
      case Variant::kAfterAsync: {
        std::vector<accord::torch::TensorHandle> handles;
        for (const auto& item : named) {
          accord::AllreduceOptions options;
          options.name = "after_async." + item.key();
          handles.push_back(accord::torch::allreduce_async_(item.value().grad(), options));
        }
        for (auto& handle : handles) handle.wait();
        break;
      }
      case Variant::kAfterSync:
        for (const auto& item : named) {
          accord::AllreduceOptions options;
          options.name = "after_sync." + item.key();
          accord::torch::allreduce_(item.value().grad(), options);
        }
        break;
      case Variant::kLocal: break;
    }
    const double t2 = Now();
    if (opt) {
      opt->step();
    } else {
      sgd.step();
    }
    const double t3 = Now();
    if (step >= o.warmup) {
      sum.step += t3 - t0;
      sum.backward += t1 - t0;
      sum.wait += t2 - t1;
    }
  }
  return {sum.step / o.steps, sum.backward / o.steps, sum.wait / o.steps};
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!ParseOptions(argc, argv, &o)) return 2;
  try {
    accord::torch::init();
    at::set_num_threads(o.threads);
    const int rank = accord::torch::rank(), size = accord::torch::size();
    const double load_before = LoadAverage();

    torch::nn::Sequential model = MakeModel(o);
    torch::optim::SGD sgd(model->parameters(), 1e-4);
    torch::manual_seed(1 + rank);
    const torch::Tensor x = torch::randn({o.batch, o.hidden});
    const torch::Tensor y = torch::randn({o.batch, o.hidden});
    int64_t parameters = 0;
    for (const auto& p : model->parameters()) parameters += p.numel();

    if (rank == 0) {
      std::printf(
          "libtorch_overlap: np=%d, %d x Linear(%d, %d)+ReLU (%lld float32 parameters, %.1f MiB of gradients, "
          "%zu tensors), batch %d, %d intra-op thread(s); %d rounds x %d steps (+%d warm-up)\n",
          size, o.layers, o.hidden, o.hidden, static_cast<long long>(parameters), parameters * 4.0 / (1 << 20),
          model->parameters().size(), o.batch, o.threads, o.rounds, o.steps, o.warmup);
    }
    std::vector<Variant> variants;
    for (size_t start = 0; start <= o.variants.size();) {
      size_t end = o.variants.find(',', start);
      if (end == std::string::npos) end = o.variants.size();
      const std::string name = o.variants.substr(start, end - start);
      bool known = false;
      for (Variant v : {Variant::kOverlap, Variant::kAfterAsync, Variant::kAfterSync, Variant::kLocal}) {
        if (name == VariantName(v)) {
          variants.push_back(v);
          known = true;
        }
      }
      if (!known) throw std::invalid_argument("unknown variant '" + name + "' in --variants");
      start = end + 1;
    }
    // Per variant, per round: the slowest rank's mean step, and its
    // forward+backward and wait times.
    std::map<Variant, std::vector<StepTimes>> samples;
    for (int round = 0; round < o.rounds; ++round) {
      for (Variant v : variants) {
        const StepTimes mean = RunSteps(v, o, model, sgd, x, y);
        accord::AllreduceOptions max;
        max.name = "step_times";
        max.op = accord::ReduceOp::kMax;
        const torch::Tensor slowest =
            accord::torch::allreduce(torch::tensor({mean.step, mean.backward, mean.wait}, torch::kDouble), max);
        samples[v].push_back({slowest[0].item<double>(), slowest[1].item<double>(), slowest[2].item<double>()});
      }
    }
    const double load_after = LoadAverage();
    if (rank == 0) {
      auto median = [&](Variant v, double StepTimes::*field) {
        std::vector<double> values;
        for (const StepTimes& t : samples[v]) values.push_back(t.*field * 1e3);
        return Median(values);
      };
      const double first = median(variants[0], &StepTimes::step);
      std::printf("%-12s %10s %12s %12s %16s\n", "variant", "step ms",
                  (std::string("vs ") + VariantName(variants[0])).c_str(), "fwd+bwd ms", "wait after bwd ms");
      for (Variant v : variants) {
        const double step = median(v, &StepTimes::step);
        std::printf("%-12s %10.2f %12.3f %12.2f %16.2f\n", VariantName(v), step, step / first,
                    median(v, &StepTimes::backward), median(v, &StepTimes::wait));
      }
      std::printf("per-round step ms:");
      for (Variant v : variants) {
        std::printf("  %s", VariantName(v));
        for (const StepTimes& t : samples[v]) std::printf(" %.1f", t.step * 1e3);
      }
      std::printf("\nload average: %.2f before, %.2f after\n", load_before, load_after);
    }
    accord::torch::shutdown();
    return 0;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "libtorch_overlap: %s\n", error.what());
    return 1;
  }
}
