// accord::torch::DistributedOptimizer, broadcast_parameters and
// broadcast_optimizer_state across ranks.
//
// Training runs on rank-dependent data (seeded per rank and step), so every
// rank can regenerate every rank's batch and train a reference model in a
// single process: on the concatenated batch (equal local batches: the average
// of the local mean-loss gradients is the gradient of the mean over the whole
// batch), or, where ranks differ in what they compute, by replaying each
// rank's local gradient and averaging. Models are float64, so the distributed
// and the reference parameters agree to rounding; and every rank's parameters
// must equal rank 0's exactly.
#include "torch_test_util.h"  // first: LibTorch, then Catch

#include <ATen/CPUGeneratorImpl.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace {

using accord::ReduceOp;
using accord::torch::DistributedOptimizer;
using accord::torch::DistributedOptimizerOptions;
using namespace accord_test;
using namespace accord_torch_test;

// Two layers, and an optional extra branch that some ranks may leave unused.
struct Net : torch::nn::Module {
  explicit Net(bool with_extra) {
    fc1 = register_module("fc1", torch::nn::Linear(4, 6));
    fc2 = register_module("fc2", torch::nn::Linear(6, 3));
    if (with_extra) extra = register_module("extra", torch::nn::Linear(4, 3));
  }
  at::Tensor forward(const at::Tensor& x, bool use_extra = true) {
    at::Tensor y = fc2->forward(torch::tanh(fc1->forward(x)));
    if (!extra.is_empty() && use_extra) y = y + extra->forward(x);
    return y;
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, extra{nullptr};
};

// The same parameters on every rank that passes the same seed.
std::shared_ptr<Net> MakeNet(uint64_t seed, bool with_extra = false) {
  torch::manual_seed(seed);
  auto net = std::make_shared<Net>(with_extra);
  net->to(at::kDouble);
  return net;
}

struct Batch {
  at::Tensor x, y;
};

constexpr int64_t kRows = 5;

// Rank `rank`'s batch number `index` for data key `key`.
Batch MakeBatch(const std::string& key, int index, int rank) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(Seed(key + "." + std::to_string(index), rank));
  Batch batch;
  batch.x = at::randn({kRows, 4}, generator, at::kDouble);
  batch.y = at::randn({kRows, 3}, generator, at::kDouble);
  return batch;
}

// Every rank's batch `index`, concatenated in rank order.
Batch ConcatenatedBatch(const std::string& key, int index) {
  std::vector<at::Tensor> xs, ys;
  for (int q = 0; q < Size(); ++q) {
    Batch b = MakeBatch(key, index, q);
    xs.push_back(b.x);
    ys.push_back(b.y);
  }
  return {at::cat(xs), at::cat(ys)};
}

at::Tensor Loss(Net& net, const Batch& batch, bool use_extra = true) {
  return torch::mse_loss(net.forward(batch.x, use_extra), batch.y);
}

// Parameters of `got` against the reference `want` (same names), and against
// rank 0's parameters, exactly.
void CheckParameters(const std::string& what, const Net& got, const Net& want, double tolerance) {
  const auto reference = want.named_parameters();
  for (const auto& item : got.named_parameters()) {
    const at::Tensor* expected = reference.find(item.key());
    REQUIRE(expected != nullptr);
    ExpectClose(what + ": parameter " + item.key() + " vs single-process training", item.value(), *expected, tolerance);
    accord::CollectiveOptions options;
    options.name = what + ".check." + item.key();
    const at::Tensor rank0 = accord::torch::broadcast(item.value().detach(), 0, options);
    INFO("rank " << Rank() << ": " << what << ": parameter " << item.key() << " differs from rank 0's");
    CHECK(at::equal(rank0, item.value().detach()));
  }
}

// Trains `steps` steps with a DistributedOptimizer over SGD with momentum,
// `passes` backward passes per step, and the same steps in a single process
// on the concatenated batches; compares the parameters.
void TrainAndCompare(const std::string& what, const DistributedOptimizerOptions& options, bool named, double tolerance,
                     int steps = 4) {
  auto net = MakeNet(7);
  auto ref = MakeNet(7);
  torch::optim::SGD sgd(net->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  torch::optim::SGD ref_sgd(ref->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  std::unique_ptr<DistributedOptimizer> opt =
      named ? std::make_unique<DistributedOptimizer>(sgd, net->named_parameters(), options)
            : std::make_unique<DistributedOptimizer>(sgd, options);
  // Sum adds the ranks' mean-loss gradients: size times the gradient of the
  // mean over the concatenated batch.
  const double scale = options.op == ReduceOp::kSum ? Size() : 1.0;
  const int passes = options.backward_passes_per_step;
  for (int step = 0; step < steps; ++step) {
    opt->zero_grad();
    for (int pass = 0; pass < passes; ++pass) Loss(*net, MakeBatch(what, step * passes + pass, Rank())).backward();
    opt->step();

    ref_sgd.zero_grad();
    for (int pass = 0; pass < passes; ++pass) {
      (Loss(*ref, ConcatenatedBatch(what, step * passes + pass)) * scale).backward();
    }
    ref_sgd.step();
  }
  CheckParameters(what, *net, *ref, tolerance);
}

TEST_CASE("DistributedOptimizer equals single-process training on the concatenated batch") {
  DistributedOptimizerOptions options;
  SECTION("Average, named parameters") { TrainAndCompare("dopt.average", options, true, 1e-12); }
  SECTION("Average, default names") { TrainAndCompare("dopt.unnamed", options, false, 1e-12); }
  SECTION("Sum") {
    options.op = ReduceOp::kSum;
    TrainAndCompare("dopt.sum", options, true, 1e-12);
  }
  SECTION("gradient_predivide_factor") {
    options.gradient_predivide_factor = 2.0;
    TrainAndCompare("dopt.predivide", options, true, 1e-12);
  }
  SECTION("fp16 compression: gradients rounded to float16 on the wire") {
    options.compression = accord::torch::Compression::kFp16;
    TrainAndCompare("dopt.fp16", options, true, 5e-3);
  }
  SECTION("backward_passes_per_step = 2") {
    options.backward_passes_per_step = 2;
    TrainAndCompare("dopt.passes2", options, true, 1e-12);
  }
}

TEST_CASE("DistributedOptimizer starts each reduction during backward, on the N-th pass") {
  auto net = MakeNet(41, /*with_extra=*/true);
  torch::optim::SGD sgd(net->parameters(), 0.1);
  DistributedOptimizerOptions options;
  options.backward_passes_per_step = 2;
  DistributedOptimizer opt(sgd, net->named_parameters(), options);
  const bool uses_extra = Rank() != Size() - 1;
  const int used = uses_extra ? 6 : 4;  // the extra branch's weight and bias
  for (int step = 0; step < 2; ++step) {
    opt.zero_grad();
    Loss(*net, MakeBatch("dopt.started", 2 * step, Rank()), uses_extra).backward();
    INFO("rank " << Rank() << ": step " << step);
    CHECK(opt.started_reductions() == 0);  // one pass of two: accumulated locally
    Loss(*net, MakeBatch("dopt.started", 2 * step + 1, Rank()), uses_extra).backward();
    CHECK(opt.started_reductions() == used);  // started by the hooks, before step()
    opt.step();
    CHECK(opt.started_reductions() == 0);
  }
}

TEST_CASE("DistributedOptimizer names its reductions after named_parameters, else by position") {
  auto net = MakeNet(3);
  torch::optim::SGD sgd(net->parameters(), 0.1);
  DistributedOptimizer named(sgd, net->named_parameters());
  CHECK(named.parameter_names() == net->named_parameters().keys());
  DistributedOptimizer unnamed(sgd);
  CHECK(unnamed.parameter_names() == std::vector<std::string>{"noname.0", "noname.1", "noname.2", "noname.3"});
  // named_parameters() names frozen parameters too (as broadcast_optimizer_state's messages do).
  net->fc1->weight.set_requires_grad(false);
  DistributedOptimizer frozen(sgd, net->named_parameters());
  CHECK(frozen.parameter_names().size() == 3);
  CHECK(frozen.named_parameters().keys() == net->named_parameters().keys());
  CHECK(frozen.named_parameters()["fc1.weight"].is_same(net->fc1->weight));
}

TEST_CASE("DistributedOptimizer: a parameter unused on one rank is reduced with zeros there") {
  const std::string key = "dopt.unused";
  auto net = MakeNet(11, /*with_extra=*/true);
  auto ref = MakeNet(11, /*with_extra=*/true);
  torch::optim::SGD sgd(net->parameters(), torch::optim::SGDOptions(0.1).momentum(0.5));
  torch::optim::SGD ref_sgd(ref->parameters(), torch::optim::SGDOptions(0.1).momentum(0.5));
  DistributedOptimizer opt(sgd, net->named_parameters());
  // The last rank never uses the extra branch: its gradient stays undefined.
  auto uses_extra = [](int rank) { return rank != Size() - 1; };
  for (int step = 0; step < 3; ++step) {
    opt.zero_grad();
    Loss(*net, MakeBatch(key, step, Rank()), uses_extra(Rank())).backward();
    opt.step();

    // The reference: every rank's local gradient (zeros where a parameter
    // got none), averaged.
    auto params = ref->parameters();
    std::vector<at::Tensor> sums;
    for (const at::Tensor& p : params) sums.push_back(at::zeros_like(p));
    for (int q = 0; q < Size(); ++q) {
      for (at::Tensor& p : params) p.mutable_grad() = at::Tensor();
      Loss(*ref, MakeBatch(key, step, q), uses_extra(q)).backward();
      for (size_t i = 0; i < params.size(); ++i) {
        if (params[i].grad().defined()) sums[i] += params[i].grad();
      }
    }
    for (size_t i = 0; i < params.size(); ++i) params[i].mutable_grad() = sums[i] / Size();
    ref_sgd.step();
  }
  if (Size() > 1) {
    // The extra branch was trained on the other ranks' gradients everywhere.
    const auto initial = MakeNet(11, true);
    CHECK_FALSE(at::equal(net->extra->weight, initial->extra->weight));
  }
  CheckParameters(key, *net, *ref, 1e-12);
}

TEST_CASE("DistributedOptimizer: synchronize(), zero_grad() and too many backward passes") {
  SECTION("step() after synchronize() does not reduce again") {
    const std::string key = "dopt.synchronize";
    auto net = MakeNet(13);
    auto ref = MakeNet(13);
    torch::optim::SGD sgd(net->parameters(), 0.1);
    torch::optim::SGD ref_sgd(ref->parameters(), 0.1);
    DistributedOptimizerOptions options;
    options.op = ReduceOp::kSum;  // a second reduction would multiply by size
    DistributedOptimizer opt(sgd, net->named_parameters(), options);
    Loss(*net, MakeBatch(key, 0, Rank())).backward();
    opt.synchronize();
    (Loss(*ref, ConcatenatedBatch(key, 0)) * Size()).backward();
    const auto ref_params = ref->named_parameters();
    for (const auto& item : net->named_parameters()) {
      ExpectClose(key + ": reduced gradient of " + item.key(), item.value().grad(), ref_params[item.key()].grad(),
                  1e-12);
    }
    opt.step();
    ref_sgd.step();
    CheckParameters(key, *net, *ref, 1e-12);
  }
  SECTION("zero_grad() between backward and step() is refused") {
    auto net = MakeNet(17);
    torch::optim::SGD sgd(net->parameters(), 0.1);
    DistributedOptimizer opt(sgd, net->named_parameters());
    Loss(*net, MakeBatch("dopt.zero_grad", 0, Rank())).backward();
    try {
      opt.zero_grad();
      FAIL_CHECK("rank " << Rank() << ": zero_grad() with reductions pending did not throw");
    } catch (const accord::torch::Error& error) {
      CHECK(error.code() == accord::StatusCode::kPreconditionFailed);
      CHECK(std::string(error.what()).find("zero_grad") != std::string::npos);
    }
    CHECK_NOTHROW(opt.step());
    CHECK_NOTHROW(opt.zero_grad());
  }
  SECTION("more backward passes than backward_passes_per_step fail in backward()") {
    auto net = MakeNet(19);
    torch::optim::SGD sgd(net->parameters(), 0.1);
    DistributedOptimizerOptions options;
    options.backward_passes_per_step = 2;
    DistributedOptimizer opt(sgd, net->named_parameters(), options);
    const Batch batch = MakeBatch("dopt.too_many", 0, Rank());
    Loss(*net, batch).backward();
    Loss(*net, batch).backward();
    bool threw = false;
    try {
      Loss(*net, batch).backward();
    } catch (const std::exception& error) {
      threw = true;
      CHECK(std::string(error.what()).find("backward_passes_per_step=2") != std::string::npos);
    }
    CHECK(threw);
    // The reductions of the first two passes are still in flight on every
    // rank: waiting for them leaves the optimizer usable.
    CHECK_NOTHROW(opt.synchronize());
    CHECK_NOTHROW(opt.zero_grad());
  }
  SECTION("bad options are refused") {
    auto net = MakeNet(23);
    torch::optim::SGD sgd(net->parameters(), 0.1);
    DistributedOptimizerOptions options;
    options.op = ReduceOp::kMax;
    CHECK_THROWS_AS(DistributedOptimizer(sgd, options), accord::torch::Error);
    options = {};
    options.backward_passes_per_step = 0;
    CHECK_THROWS_AS(DistributedOptimizer(sgd, options), accord::torch::Error);
    options = {};
    options.op = ReduceOp::kSum;
    options.gradient_predivide_factor = 2.0;
    CHECK_THROWS_AS(DistributedOptimizer(sgd, options), accord::torch::Error);
  }
}

TEST_CASE("broadcast_parameters: named parameters, a module with buffers, unnamed tensors") {
  for (int root : {Size() - 1, 0}) {
    const std::string suffix = " from root " + std::to_string(root);
    SECTION("named_parameters" + suffix) {
      auto net = MakeNet(100 + Rank());
      accord::torch::broadcast_parameters(net->named_parameters(), root);
      CheckParameters("broadcast_parameters.named" + std::to_string(root), *net, *MakeNet(100 + root), 0.0);
    }
    SECTION("a module's parameters and buffers" + suffix) {
      torch::manual_seed(200 + Rank());
      torch::nn::Sequential model(torch::nn::Linear(3, 4), torch::nn::BatchNorm1d(4));
      model->to(at::kDouble);
      for (auto& buffer : model->buffers()) buffer.fill_(Rank() + 1);
      accord::torch::broadcast_parameters(model.ptr(), root);
      torch::manual_seed(200 + root);
      torch::nn::Sequential expected(torch::nn::Linear(3, 4), torch::nn::BatchNorm1d(4));
      expected->to(at::kDouble);
      for (auto& buffer : expected->buffers()) buffer.fill_(root + 1);
      const auto want = expected->named_parameters();
      for (const auto& item : model->named_parameters()) {
        ExpectClose("broadcast_parameters(module) parameter " + item.key() + suffix, item.value(), want[item.key()],
                    0.0);
      }
      const auto want_buffers = expected->named_buffers();
      for (const auto& item : model->named_buffers()) {
        ExpectClose("broadcast_parameters(module) buffer " + item.key() + suffix, item.value(),
                    want_buffers[item.key()], 0.0);
      }
    }
    SECTION("unnamed tensors, matched by position" + suffix) {
      const DtypeCase type{at::kFloat, accord::DataType::kFloat32};
      std::vector<at::Tensor> tensors = {RankTensor("bp.a", Rank(), {3}, type),
                                         RankTensor("bp.b", Rank(), {2, 2}, type)};
      // A non-contiguous one, too.
      tensors.push_back(RankTensor("bp.c", Rank(), {3, 2}, type).t());
      accord::torch::broadcast_parameters(tensors, root);
      ExpectTensor("bp.a" + suffix, tensors[0], type, {3}, RankValues("bp.a", root, type.dtype, 3));
      ExpectTensor("bp.b" + suffix, tensors[1], type, {2, 2}, RankValues("bp.b", root, type.dtype, 4));
      ExpectClose("bp.c" + suffix, tensors[2], RankTensor("bp.c", root, {3, 2}, type).t(), 0.0);
    }
  }
}

// Trains `steps` local steps (no communication) on this rank's data.
void LocalSteps(Net& net, torch::optim::Optimizer& optimizer, int steps, const std::string& key, int rank) {
  for (int step = 0; step < steps; ++step) {
    optimizer.zero_grad();
    Loss(net, MakeBatch(key, step, rank)).backward();
    optimizer.step();
  }
}

std::string StateKey(const at::Tensor& p) { return c10::guts::to_string(p.unsafeGetTensorImpl()); }

TEST_CASE("broadcast_optimizer_state: every rank ends with the root's state and options") {
  // Rank r takes r local steps with learning rate 0.01 * (r + 1): the
  // states differ in content, and rank 0 has none.
  for (int root : {Size() - 1, 0}) {
    const std::string suffix = " (root " + std::to_string(root) + ")";
    SECTION("Adam" + suffix) {
      const std::string key = "bos.adam";
      auto net = MakeNet(29);
      torch::optim::Adam adam(net->parameters(), torch::optim::AdamOptions(0.01 * (Rank() + 1)));
      LocalSteps(*net, adam, Rank(), key, Rank());
      accord::torch::broadcast_optimizer_state(adam, root);

      auto ref_net = MakeNet(29);
      torch::optim::Adam ref(ref_net->parameters(), torch::optim::AdamOptions(0.01 * (root + 1)));
      LocalSteps(*ref_net, ref, root, key, root);

      const auto& options = static_cast<const torch::optim::AdamOptions&>(adam.param_groups()[0].options());
      CHECK(options.lr() == 0.01 * (root + 1));
      CHECK(adam.state().size() == ref.state().size());
      const auto params = adam.param_groups()[0].params();
      const auto ref_params = ref.param_groups()[0].params();
      for (size_t i = 0; i < params.size(); ++i) {
        const auto ref_state = ref.state().find(StateKey(ref_params[i]));
        const auto state = adam.state().find(StateKey(params[i]));
        INFO("rank " << Rank() << ": Adam state of parameter " << i << suffix);
        REQUIRE((state != adam.state().end()) == (ref_state != ref.state().end()));
        if (state == adam.state().end()) continue;
        const auto& got = static_cast<const torch::optim::AdamParamState&>(*state->second);
        const auto& want = static_cast<const torch::optim::AdamParamState&>(*ref_state->second);
        CHECK(got.step() == want.step());
        ExpectClose("exp_avg of parameter " + std::to_string(i) + suffix, got.exp_avg(), want.exp_avg(), 0.0);
        ExpectClose("exp_avg_sq of parameter " + std::to_string(i) + suffix, got.exp_avg_sq(), want.exp_avg_sq(), 0.0);
      }
      // The parameters themselves are untouched: this rank's own training.
      auto own = MakeNet(29);
      torch::optim::Adam own_adam(own->parameters(), torch::optim::AdamOptions(0.01 * (Rank() + 1)));
      LocalSteps(*own, own_adam, Rank(), key, Rank());
      ExpectClose("fc1.weight after broadcast_optimizer_state" + suffix, net->fc1->weight, own->fc1->weight, 0.0);
    }
    SECTION("SGD with momentum, through a DistributedOptimizer" + suffix) {
      const std::string key = "bos.sgd";
      auto net = MakeNet(31);
      torch::optim::SGD sgd(net->parameters(), torch::optim::SGDOptions(0.01 * (Rank() + 1)).momentum(0.9));
      LocalSteps(*net, sgd, Rank(), key, Rank());
      DistributedOptimizer opt(sgd, net->named_parameters());
      accord::torch::broadcast_optimizer_state(opt, root);

      auto ref_net = MakeNet(31);
      torch::optim::SGD ref(ref_net->parameters(), torch::optim::SGDOptions(0.01 * (root + 1)).momentum(0.9));
      LocalSteps(*ref_net, ref, root, key, root);

      const auto& options = static_cast<const torch::optim::SGDOptions&>(sgd.param_groups()[0].options());
      CHECK(options.lr() == 0.01 * (root + 1));
      CHECK(options.momentum() == 0.9);
      CHECK(sgd.state().size() == ref.state().size());
      const auto params = sgd.param_groups()[0].params();
      const auto ref_params = ref.param_groups()[0].params();
      for (size_t i = 0; i < params.size(); ++i) {
        const auto ref_state = ref.state().find(StateKey(ref_params[i]));
        const auto state = sgd.state().find(StateKey(params[i]));
        INFO("rank " << Rank() << ": SGD state of parameter " << i << suffix);
        REQUIRE((state != sgd.state().end()) == (ref_state != ref.state().end()));
        if (state == sgd.state().end()) continue;
        ExpectClose("momentum_buffer of parameter " + std::to_string(i) + suffix,
                    static_cast<const torch::optim::SGDParamState&>(*state->second).momentum_buffer(),
                    static_cast<const torch::optim::SGDParamState&>(*ref_state->second).momentum_buffer(), 0.0);
      }
    }
  }
  SECTION("parameter groups that differ between ranks fail on every rank") {
    auto net = MakeNet(37);
    // The last rank's optimizer holds only fc1's parameters.
    std::vector<at::Tensor> params = Rank() == Size() - 1 ? net->fc1->parameters() : net->parameters();
    torch::optim::SGD sgd(params, 0.1);
    if (Size() == 1) return;
    try {
      accord::torch::broadcast_optimizer_state(sgd, 0);
      FAIL_CHECK("rank " << Rank() << ": differing parameter groups were accepted");
    } catch (const accord::torch::Error& error) {
      CHECK(error.code() == accord::StatusCode::kInvalidArgument);
      const std::string expected =
          "the ranks' tensors differ: 'param_groups[0][2]' is missing on rank " + std::to_string(Size() - 1);
      CHECK(std::string(error.what()).find(expected) != std::string::npos);
    }
  }
}

}  // namespace
