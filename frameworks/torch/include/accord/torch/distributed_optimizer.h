// DistributedOptimizer: data-parallel training with any torch::optim optimizer.
//
//   torch::optim::SGD sgd(model->parameters(), 0.01);
//   accord::torch::DistributedOptimizer opt(sgd, model->named_parameters());
//   for (...) {
//     opt.zero_grad();
//     loss_fn(model->forward(x), y).backward();  // allreduces start during backward
//     opt.step();                                 // waits for them, then sgd.step()
//   }
//
// Overlap. A post hook on each parameter's gradient accumulator (the
// AccumulateGrad node of the autograd graph) runs as soon as backward has
// accumulated the parameter's gradient into .grad(), and enqueues that
// gradient's allreduce at once. The core's coordinator thread reduces it
// while backward goes on computing the gradients of earlier layers, and
// fuses gradients that become ready together. step() waits for the
// reductions, then runs the wrapped optimizer's step.
// (Parameter::register_hook would not do: it sees the incoming gradient
// before accumulation, so with backward_passes_per_step > 1 or a .grad()
// that already holds something, the reduced tensor would not be .grad().)
//
// Semantics, the same as accord.torch.DistributedOptimizer in Python:
// - Names. Gradients are matched across ranks by name: "allreduce.<name>",
//   with <name> from named_parameters (e.g. model->named_parameters()).
//   Parameters that are not named there are named "noname.<i>" by their
//   position in the optimizer's parameter groups, the same on every rank.
// - backward_passes_per_step = N: N backward passes accumulate into .grad()
//   locally and the sum is reduced once, when the N-th pass has produced it.
//   More than N passes before step() is an error.
// - A parameter that got no gradient on this rank (unused in its forward
//   pass) is reduced with zeros at step(), so no rank waits for it; every
//   rank then holds the same reduced gradient.
// - op: Average (default) or Sum. gradient_predivide_factor f (Average
//   only) scales by 1/f before the sum and by f/size after it.
// - Compression::kFp16 sends floating-point gradients as float16 and casts
//   the result back.
// - Sparse gradients are reduced as dense tensors.
// - synchronize() waits for every reduction (e.g. before clipping
//   gradients); a step() right after it does not reduce again.
// - Only parameters with requires_grad() are reduced.
//
// The wrapped optimizer must outlive the DistributedOptimizer; use it (not a
// copy) for learning-rate changes, state_dict-style save/load and
// broadcast_optimizer_state. On a rank outside options.process_set nothing
// is reduced and step() is the wrapped step.
//
// Thread safety: the hooks run on the thread that runs backward. Call
// step(), synchronize() and zero_grad() from the training thread, not while a
// backward pass is running on another thread. Destroying the optimizer
// removes its hooks; do it while no backward pass is running.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/optim/optimizer.h>
#include <torch/ordered_dict.h>

#include <memory>
#include <string>
#include <vector>

#include "accord/accord.h"

namespace accord {
namespace torch {

enum class Compression {
  kNone,  // gradients travel in their own dtype
  kFp16,  // floating-point gradients travel as float16
};

struct DistributedOptimizerOptions {
  ReduceOp op = ReduceOp::kAverage;  // kAverage or kSum
  int backward_passes_per_step = 1;  // >= 1
  Compression compression = Compression::kNone;
  double gradient_predivide_factor = 1.0;  // > 0; != 1 only with kAverage
  ProcessSetId process_set = kGlobalProcessSet;
};

class DistributedOptimizer {
 public:
  using NamedParameters = ::torch::OrderedDict<std::string, at::Tensor>;

  // Hooks every parameter of `optimizer` that requires grad. Throws
  // Error(kInvalidArgument) for bad options, and Error if this rank's
  // membership of options.process_set cannot be determined.
  DistributedOptimizer(::torch::optim::Optimizer& optimizer, const NamedParameters& named_parameters,
                       const DistributedOptimizerOptions& options = {});
  // Parameters named "noname.<i>" by position.
  explicit DistributedOptimizer(::torch::optim::Optimizer& optimizer, const DistributedOptimizerOptions& options = {});
  ~DistributedOptimizer();
  DistributedOptimizer(const DistributedOptimizer&) = delete;
  DistributedOptimizer& operator=(const DistributedOptimizer&) = delete;

  // Waits for every gradient's reduction (submitting first, with zeros where
  // needed, those not submitted during backward), then runs the wrapped
  // optimizer's step(closure) and returns what it returns. If a reduction
  // failed, throws the first Error after waiting for all of them, and does
  // not step.
  at::Tensor step(::torch::optim::Optimizer::LossClosure closure = nullptr);
  // Waits for every gradient's reduction; afterwards each .grad() holds the
  // reduced gradient. The next step() does not reduce again unless another
  // backward pass ran in between.
  void synchronize();
  // The wrapped optimizer's zero_grad(). Throws Error(kPreconditionFailed)
  // while gradients of this step are being reduced or accumulated (after
  // backward, before step() or synchronize()): they would be lost.
  void zero_grad();

  // Changes N; throws Error(kPreconditionFailed) while gradients are pending.
  void set_backward_passes_per_step(int passes);
  int backward_passes_per_step() const;

  ::torch::optim::Optimizer& optimizer() { return optimizer_; }
  const DistributedOptimizerOptions& options() const { return options_; }
  // The name of each reduced parameter (without the "allreduce." prefix),
  // in the order of the optimizer's parameter groups.
  std::vector<std::string> parameter_names() const;
  // Every parameter of the optimizer's groups, frozen ones included, with
  // the name it is (or, once it requires a gradient, would be) reduced under.
  NamedParameters named_parameters() const;
  // How many parameters' reductions have been enqueued since the last
  // synchronize(): right after backward() in a plain training loop, every
  // parameter that got a gradient (they started during backward).
  int started_reductions() const;

  struct State;  // defined in src/; shared with the hooks

 private:
  void Setup(const NamedParameters* named_parameters);

  ::torch::optim::Optimizer& optimizer_;
  DistributedOptimizerOptions options_;
  std::shared_ptr<State> state_;
};

}  // namespace torch
}  // namespace accord
