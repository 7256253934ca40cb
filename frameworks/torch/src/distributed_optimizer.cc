// DistributedOptimizer: a post hook on each parameter's AccumulateGrad node
// enqueues the gradient's allreduce; step() waits for them all.
#include "accord/torch/distributed_optimizer.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <cmath>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "accord/torch/basics.h"
#include "accord/torch/collectives.h"
#include "cuda_streams.h"

namespace accord {
namespace torch {

namespace {

// One reduced parameter.
struct Slot {
  at::Tensor param;
  std::string name;        // as in named_parameters, or "noname.<i>"
  int remaining = 1;       // backward passes until its gradient is reduced
  bool touched = false;    // backward produced a gradient since the last synchronize
  bool submitted = false;  // its allreduce is in flight
  TensorHandle handle;
  at::Tensor sent;  // the tensor being reduced: .grad() itself or its float16 copy
  std::shared_ptr<::torch::autograd::Node> grad_accumulator;  // kept alive: it holds the hook
  uintptr_t hook_key = 0;
};

std::string OptionError(const std::string& message) { return "DistributedOptimizer: " + message; }

}  // namespace

// Shared by the optimizer and its hooks (which hold it weakly, so a hook of
// a destroyed optimizer does nothing). `mutex` guards everything: hooks run
// on the backward thread, the rest on the training thread.
struct DistributedOptimizer::State {
  std::mutex mutex;
  DistributedOptimizerOptions options;
  double prescale = 1.0;
  double postscale = 1.0;
  bool included = true;       // this rank is a member of options.process_set
  bool synchronized = false;  // synchronize() ran and no backward since
  std::vector<Slot> slots;
  // Every parameter of the optimizer's groups, frozen ones too, by name.
  NamedParameters named;

  // Hook: backward has accumulated a new gradient into slots[index].param.
  void OnGradient(size_t index);
  // Enqueues the allreduce of a slot's gradient (zeros if it has none).
  void Submit(Slot& slot);
  void Synchronize();
  bool AnyPending() const;
};

namespace {

class GradientReadyHook : public ::torch::autograd::FunctionPostHook {
 public:
  GradientReadyHook(std::weak_ptr<DistributedOptimizer::State> state, size_t index)
      : state_(std::move(state)), index_(index) {}

  ::torch::autograd::variable_list operator()(const ::torch::autograd::variable_list& outputs,
                                              const ::torch::autograd::variable_list& /*inputs*/) override {
    if (auto state = state_.lock()) state->OnGradient(index_);
    return outputs;
  }

 private:
  std::weak_ptr<DistributedOptimizer::State> state_;
  size_t index_;
};

}  // namespace

void DistributedOptimizer::State::OnGradient(size_t index) {
  std::lock_guard<std::mutex> lock(mutex);
  Slot& slot = slots[index];
  if (!slot.param.grad().defined()) return;
  if (slot.remaining <= 0) {
    throw Error(StatusCode::kPreconditionFailed,
                OptionError("the gradient of parameter '" + slot.name + "' was computed more than " +
                            "backward_passes_per_step=" + std::to_string(options.backward_passes_per_step) +
                            " times before step() or synchronize(); raise backward_passes_per_step to "
                            "accumulate more backward passes locally"));
  }
  slot.touched = true;
  synchronized = false;
  if (--slot.remaining > 0) return;
  Submit(slot);
}

void DistributedOptimizer::State::Submit(Slot& slot) {
  at::Tensor& grad = slot.param.mutable_grad();
  if (!grad.defined()) {
    // No gradient reached this parameter on this rank, but other ranks may
    // reduce one: take part with zeros so that no rank waits forever.
    grad = at::zeros_like(slot.param, at::MemoryFormat::Contiguous);
  } else if (grad.is_sparse()) {
    grad = grad.to_dense();
  }
  AllreduceOptions reduce;
  reduce.name = "allreduce." + slot.name;
  reduce.op = options.op;
  reduce.prescale_factor = prescale;
  reduce.postscale_factor = postscale;
  reduce.process_set = options.process_set;
  const bool compress = options.compression == Compression::kFp16 && at::isFloatingType(grad.scalar_type()) &&
                        grad.scalar_type() != at::kHalf;
  slot.sent = compress ? grad.detach().to(at::kHalf) : grad;
  slot.handle = allreduce_async_(slot.sent, reduce);
  slot.submitted = true;
}

bool DistributedOptimizer::State::AnyPending() const {
  for (const Slot& slot : slots) {
    if (slot.touched || slot.submitted) return true;
  }
  return false;
}

void DistributedOptimizer::State::Synchronize() {
  std::lock_guard<std::mutex> lock(mutex);
  if (!included) {
    synchronized = true;
    return;
  }
  // Every rank takes part in every reduction: submit those that backward
  // did not (no gradient here, or fewer than backward_passes_per_step
  // passes), then wait for all of them, also after a failure, so that no
  // name stays in flight.
  std::optional<Error> first_error;
  for (Slot& slot : slots) {
    if (slot.submitted) continue;
    try {
      Submit(slot);
    } catch (const Error& error) {
      if (!first_error) first_error = error;
    }
  }
  c10::NoGradGuard no_grad;
  for (Slot& slot : slots) {
    if (slot.submitted) {
      try {
        slot.handle.wait();
        at::Tensor& grad = slot.param.mutable_grad();
        if (!slot.sent.is_same(grad)) {
          grad.copy_(slot.sent);
          // The float16 copy is released below, possibly before this copy
          // has run on the device: keep the caching allocator from handing
          // it out to the stream it was made on meanwhile.
          if (slot.sent.is_cuda()) slot.sent.record_stream(internal::CurrentStream(slot.sent.device()));
        }
      } catch (const Error& error) {
        if (!first_error) first_error = error;
      }
    }
    slot.handle = TensorHandle();
    slot.sent = at::Tensor();
    slot.submitted = false;
    slot.touched = false;
    slot.remaining = options.backward_passes_per_step;
  }
  synchronized = true;
  if (first_error) throw *first_error;
}

// ------------------------------------------------------------ the optimizer

DistributedOptimizer::DistributedOptimizer(::torch::optim::Optimizer& optimizer,
                                           const NamedParameters& named_parameters,
                                           const DistributedOptimizerOptions& options)
    : optimizer_(optimizer), options_(options) {
  Setup(&named_parameters);
}

DistributedOptimizer::DistributedOptimizer(::torch::optim::Optimizer& optimizer,
                                           const DistributedOptimizerOptions& options)
    : optimizer_(optimizer), options_(options) {
  Setup(nullptr);
}

void DistributedOptimizer::Setup(const NamedParameters* named_parameters) {
  if (options_.op != ReduceOp::kAverage && options_.op != ReduceOp::kSum) {
    throw Error(StatusCode::kInvalidArgument,
                OptionError(std::string("op must be Average or Sum, got ") + ReduceOpName(options_.op)));
  }
  if (options_.backward_passes_per_step < 1) {
    throw Error(StatusCode::kInvalidArgument, OptionError("backward_passes_per_step must be at least 1, got " +
                                                          std::to_string(options_.backward_passes_per_step)));
  }
  const double factor = options_.gradient_predivide_factor;
  if (!(std::isfinite(factor) && factor > 0)) {
    throw Error(StatusCode::kInvalidArgument,
                OptionError("gradient_predivide_factor must be positive and finite, got " + std::to_string(factor)));
  }
  if (factor != 1.0 && options_.op != ReduceOp::kAverage) {
    throw Error(StatusCode::kInvalidArgument, OptionError("gradient_predivide_factor is only supported with Average"));
  }

  state_ = std::make_shared<State>();
  State& state = *state_;
  state.options = options_;
  if (options_.op == ReduceOp::kAverage) {
    // Divide by f before the sum and multiply by f after it; Average then
    // divides by the set's size.
    state.prescale = 1.0 / factor;
    state.postscale = factor;
  }
  if (options_.process_set != kGlobalProcessSet) {
    Result<int> set_rank = ProcessSetRank(options_.process_set);
    if (!set_rank.ok()) throw Error(set_rank.status());
    state.included = set_rank.value() >= 0;
  }

  // Names: from named_parameters, else "noname.<i>" counting the unnamed
  // parameters in the optimizer's order (the same on every rank).
  std::unordered_map<const c10::TensorImpl*, std::string> names;
  std::unordered_set<std::string> used;
  if (named_parameters != nullptr) {
    for (const auto& item : *named_parameters) {
      if (!item.value().defined()) continue;
      names.emplace(item.value().unsafeGetTensorImpl(), item.key());
      used.insert(item.key());
    }
  }
  std::unordered_set<const c10::TensorImpl*> seen;
  int unnamed = 0;
  for (const auto& group : optimizer_.param_groups()) {
    for (const at::Tensor& param : group.params()) {
      if (!param.defined() || !seen.insert(param.unsafeGetTensorImpl()).second) continue;
      auto it = names.find(param.unsafeGetTensorImpl());
      std::string name;
      if (it != names.end()) {
        name = it->second;
      } else {
        do {
          name = "noname." + std::to_string(unnamed++);
        } while (used.count(name) != 0);
        used.insert(name);
      }
      if (!state.named.contains(name)) state.named.insert(name, param);
      if (!param.requires_grad()) continue;
      Slot slot;
      slot.param = param;
      slot.name = std::move(name);
      slot.remaining = options_.backward_passes_per_step;
      state.slots.push_back(std::move(slot));
    }
  }
  if (!state.included) return;

  std::weak_ptr<State> weak_state = state_;
  for (size_t i = 0; i < state.slots.size(); ++i) {
    Slot& slot = state.slots[i];
    try {
      slot.grad_accumulator = ::torch::autograd::impl::grad_accumulator(slot.param);
    } catch (const std::exception& error) {
      throw Error(StatusCode::kInvalidArgument, OptionError("parameter '" + slot.name +
                                                            "' is not a leaf tensor, so it has no gradient "
                                                            "accumulator to hook: " +
                                                            error.what()));
    }
    if (!slot.grad_accumulator) {
      throw Error(StatusCode::kInvalidArgument,
                  OptionError("parameter '" + slot.name + "' has no gradient accumulator"));
    }
    slot.hook_key = slot.grad_accumulator->add_post_hook(std::make_unique<GradientReadyHook>(weak_state, i));
  }
}

DistributedOptimizer::~DistributedOptimizer() {
  if (!state_) return;
  std::lock_guard<std::mutex> lock(state_->mutex);
  for (Slot& slot : state_->slots) {
    if (slot.grad_accumulator) slot.grad_accumulator->del_post_hook(slot.hook_key);
  }
  // Reductions still in flight finish in the background (TensorHandle keeps
  // their tensors alive).
}

at::Tensor DistributedOptimizer::step(::torch::optim::Optimizer::LossClosure closure) {
  bool reduce;
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    reduce = !(state_->synchronized && !state_->AnyPending());
  }
  if (reduce) state_->Synchronize();
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->synchronized = false;
  }
  return optimizer_.step(std::move(closure));
}

void DistributedOptimizer::synchronize() { state_->Synchronize(); }

void DistributedOptimizer::zero_grad() {
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    if (state_->AnyPending()) {
      throw Error(StatusCode::kPreconditionFailed,
                  OptionError("zero_grad() was called after backward() but before step() or synchronize(); "
                              "gradients are still being reduced (or accumulated over backward_passes_per_step) "
                              "and would be lost. Call step() or synchronize() first"));
    }
  }
  optimizer_.zero_grad();
}

void DistributedOptimizer::set_backward_passes_per_step(int passes) {
  if (passes < 1) {
    throw Error(StatusCode::kInvalidArgument,
                OptionError("backward_passes_per_step must be at least 1, got " + std::to_string(passes)));
  }
  std::lock_guard<std::mutex> lock(state_->mutex);
  if (state_->AnyPending()) {
    throw Error(StatusCode::kPreconditionFailed,
                OptionError("cannot change backward_passes_per_step while gradients are pending; call step() or "
                            "synchronize() first"));
  }
  options_.backward_passes_per_step = passes;
  state_->options.backward_passes_per_step = passes;
  for (Slot& slot : state_->slots) slot.remaining = passes;
}

int DistributedOptimizer::backward_passes_per_step() const { return options_.backward_passes_per_step; }

std::vector<std::string> DistributedOptimizer::parameter_names() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  std::vector<std::string> names;
  for (const Slot& slot : state_->slots) names.push_back(slot.name);
  return names;
}

DistributedOptimizer::NamedParameters DistributedOptimizer::named_parameters() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->named;
}

int DistributedOptimizer::started_reductions() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  int started = 0;
  for (const Slot& slot : state_->slots) started += slot.submitted ? 1 : 0;
  return started;
}

}  // namespace torch
}  // namespace accord
