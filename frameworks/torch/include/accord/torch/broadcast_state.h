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
// tensors are skipped.
//
// First the ranks check that they hold the same tensors: the same names
// with the same dtypes and shapes, in any order (one small collective, an
// allgather of a digest of the list). If they do not, every rank of the set
// throws Error(kInvalidArgument) at once, before any broadcast, e.g.
//   broadcast_parameters: the ranks' tensors differ: 'fc3.weight' is missing
//   on rank 1 (present on ranks 0, 2 as float32 [10, 20]); 'fc2.weight' is
//   float32 [20, 50] on ranks 0, 2 and float32 [30, 50] on rank 1
// naming the first three differing tensors (then "and N more") and the
// (global) ranks that hold each version; accord stays usable. Throws Error
// when a broadcast fails, after waiting for the others.
void broadcast_parameters(const ::torch::OrderedDict<std::string, at::Tensor>& named_tensors, int root_rank,
                          ProcessSetId process_set = kGlobalProcessSet);
// Unnamed tensors: matched by position, so every rank passes the same list;
// the check calls the tensor at index i of `tensors` "#i".
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
// Gradients end equal too, as accord.torch's broadcast_optimizer_state
// leaves them: every parameter that requires a gradient gets the root's
// gradient (broadcast into this rank's gradient where that has the root's
// dtype and shape, else into a new tensor; a sparse gradient of the root
// arrives dense), or zeros where the root has none yet. The gradients of
// parameters that are frozen (requires_grad() false) on the root are left
// as they are everywhere, and so is a rank's own frozen parameter's. The
// root's own gradients are not changed (except zeros where it has none).
//
// First the ranks check that their optimizers hold the same parameters, by
// position in the parameter groups, with the same dtypes and shapes (one
// small collective). If not, every rank throws Error(kInvalidArgument) at
// once, naming the first differing parameters by place and, for a
// DistributedOptimizer, by name, and the ranks that hold each version:
//   broadcast_optimizer_state: the ranks' tensors differ:
//   'param_groups[0][4] (fc3.weight)' is missing on rank 0 (present on rank 1
//   as float32 [3, 6])
void broadcast_optimizer_state(::torch::optim::Optimizer& optimizer, int root_rank,
                               ProcessSetId process_set = kGlobalProcessSet);
// The wrapped optimizer's state; its parameters are named in messages as in
// the DistributedOptimizer's named_parameters().
void broadcast_optimizer_state(DistributedOptimizer& optimizer, int root_rank,
                               ProcessSetId process_set = kGlobalProcessSet);

}  // namespace torch
}  // namespace accord
