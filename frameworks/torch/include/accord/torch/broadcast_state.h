// Making model parameters and optimizer state the same on every rank.
//
// Call these once after building the model and optimizer (or after loading a
// checkpoint on one rank), on every rank, so that every rank starts from the
// root rank's values:
//
//   accord::torch::broadcast_parameters(model->named_parameters(), /*root_rank=*/0);
//   accord::torch::broadcast_optimizer_state(sgd, /*root_rank=*/0);
//
// Thread safety: call from the training thread, on every rank of the process
// set, with no backward pass running.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/ordered_dict.h>

#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "accord/accord.h"

namespace torch {
namespace nn {
class Module;
}  // namespace nn
namespace optim {
class Optimizer;
}  // namespace optim
}  // namespace torch

namespace accord {
namespace torch {

class DistributedOptimizer;

// Overwrites, in place, every tensor with the root rank's. Tensors are
// matched across ranks by name ("broadcast_parameters.<name>"); every
// broadcast is enqueued before the first is awaited, so they fuse. Undefined
// tensors are skipped. Throws Error when a broadcast fails (e.g. a tensor's
// shape differs between ranks) after waiting for the others.
void broadcast_parameters(const ::torch::OrderedDict<std::string, at::Tensor>& named_tensors, int root_rank,
                          ProcessSetId process_set = kGlobalProcessSet);
// Unnamed tensors: matched by position, so every rank passes the same list.
void broadcast_parameters(const std::vector<at::Tensor>& tensors, int root_rank,
                          ProcessSetId process_set = kGlobalProcessSet);
// A module's parameters and buffers (e.g. BatchNorm's running statistics),
// recursively: what a Python user gets from model.state_dict().
void broadcast_parameters(const ::torch::nn::Module& module, int root_rank,
                          ProcessSetId process_set = kGlobalProcessSet);
template <typename M, typename = std::enable_if_t<std::is_base_of<::torch::nn::Module, M>::value>>
void broadcast_parameters(const std::shared_ptr<M>& module, int root_rank,
                          ProcessSetId process_set = kGlobalProcessSet) {
  broadcast_parameters(static_cast<const ::torch::nn::Module&>(*module), root_rank, process_set);
}

// Makes every rank's optimizer state (momentum buffers, Adam's moments and
// step counts, ...) and every parameter group's options (lr, momentum, betas,
// ...) equal to the root rank's. The root's state travels as the bytes of
// the optimizer's own serialization (Optimizer::save), which every rank
// loads (Optimizer::load) after clearing its state, so a rank has state for
// a parameter exactly when the root has; the parameters themselves are not
// touched and no step is taken. Works for every optimizer of torch::optim
// (a custom optimizer needs save() and load()).
//
// Throws Error(kInvalidArgument) on every rank when the ranks' parameter
// groups differ in number or in their parameters' shapes.
void broadcast_optimizer_state(::torch::optim::Optimizer& optimizer, int root_rank,
                               ProcessSetId process_set = kGlobalProcessSet);
// The wrapped optimizer's state.
void broadcast_optimizer_state(DistributedOptimizer& optimizer, int root_rank,
                               ProcessSetId process_set = kGlobalProcessSet);

}  // namespace torch
}  // namespace accord
