// broadcast_parameters and broadcast_optimizer_state.
//
// broadcast_optimizer_state, on every rank of the set, in this order (each
// step a collective every rank enters, so a problem on one rank becomes an
// error on all of them instead of a hang):
//   1. broadcast the root's layout (parameter groups and shapes), first its
//      length; every rank compares it with its own;
//   2. allreduce (Max) a "layouts differ" flag; all ranks throw if it is set;
//   3. the root serializes its optimizer (Optimizer::save) into bytes;
//      broadcast their count (-1: the root could not serialize), then them;
//   4. the other ranks clear their state and load the bytes
//      (Optimizer::load), then each parameter group's options;
//   5. allreduce (Max) a "load failed" flag; all ranks throw if it is set.
#include "accord/torch/broadcast_state.h"

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <torch/serialize/archive.h>

#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "accord/torch/basics.h"
#include "accord/torch/collectives.h"
#include "accord/torch/distributed_optimizer.h"

namespace accord {
namespace torch {

namespace {

// Broadcasts every tensor in place: all are enqueued before the first is
// awaited, so the core fuses them. Waits for every enqueued one even after
// a failure, then throws the first error.
void BroadcastInPlace(const std::vector<std::pair<std::string, at::Tensor>>& entries, int root_rank,
                      ProcessSetId process_set) {
  std::vector<TensorHandle> handles;
  std::optional<Error> first_error;
  for (const auto& [name, tensor] : entries) {
    CollectiveOptions options;
    options.name = name;
    options.process_set = process_set;
    try {
      handles.push_back(broadcast_async_(tensor, root_rank, options));
    } catch (const Error& error) {
      first_error = error;
      break;
    }
  }
  for (TensorHandle& handle : handles) {
    try {
      handle.wait();
    } catch (const Error& error) {
      if (!first_error) first_error = error;
    }
  }
  if (first_error) throw *first_error;
}

void AddNamed(const ::torch::OrderedDict<std::string, at::Tensor>& named,
              std::vector<std::pair<std::string, at::Tensor>>* entries) {
  for (const auto& item : named) {
    if (item.value().defined()) entries->emplace_back("broadcast_parameters." + item.key(), item.value());
  }
}

int ProcessSetRankOrThrow(ProcessSetId process_set) {
  Result<int> set_rank = ProcessSetRank(process_set);
  if (!set_rank.ok()) throw Error(set_rank.status());
  if (set_rank.value() < 0) {
    throw Error(StatusCode::kPreconditionFailed,
                "broadcast_optimizer_state: this rank is not a member of process set " + std::to_string(process_set));
  }
  return set_rank.value();
}

CollectiveOptions Named(const std::string& suffix, ProcessSetId process_set) {
  CollectiveOptions options;
  options.name = "broadcast_optimizer_state." + suffix;
  options.process_set = process_set;
  return options;
}

// The root's int64 vector on every rank: its length first, then the values.
std::vector<int64_t> BroadcastVector(std::vector<int64_t> values, int root_rank, const std::string& name,
                                     ProcessSetId process_set) {
  at::Tensor count = at::tensor({static_cast<int64_t>(values.size())}, at::kLong);
  broadcast_(count, root_rank, Named(name + ".size", process_set));
  values.resize(static_cast<size_t>(count.item<int64_t>()));
  at::Tensor data = at::from_blob(values.data(), {static_cast<int64_t>(values.size())}, at::kLong);
  broadcast_(data, root_rank, Named(name, process_set));
  return values;
}

// Whether `flag` is set on any rank of the set.
bool AnyRank(bool flag, const std::string& name, ProcessSetId process_set) {
  AllreduceOptions options;
  options.name = "broadcast_optimizer_state." + name;
  options.process_set = process_set;
  options.op = ReduceOp::kMax;
  at::Tensor value = at::tensor({flag ? 1 : 0}, at::kInt);
  allreduce_(value, options);
  return value.item<int>() != 0;
}

// Number of groups, then per group its number of parameters, then per
// parameter its number of dims and the sizes.
std::vector<int64_t> Layout(const ::torch::optim::Optimizer& optimizer) {
  std::vector<int64_t> layout{static_cast<int64_t>(optimizer.param_groups().size())};
  for (const auto& group : optimizer.param_groups()) {
    layout.push_back(static_cast<int64_t>(group.params().size()));
    for (const at::Tensor& p : group.params()) {
      layout.push_back(p.dim());
      for (int64_t size : p.sizes()) layout.push_back(size);
    }
  }
  return layout;
}

std::string SizesText(const std::vector<int64_t>& layout, size_t at, int64_t dims) {
  std::string text = "[";
  for (int64_t d = 0; d < dims; ++d) text += (d ? ", " : "") + std::to_string(layout[at + 1 + d]);
  return text + "]";
}

// Where `mine` differs from the root's `root`, or "" if it does not.
std::string LayoutMismatch(const std::vector<int64_t>& mine, const std::vector<int64_t>& root) {
  if (mine[0] != root[0]) {
    return std::to_string(mine[0]) + " parameter groups here, " + std::to_string(root[0]) + " on the root rank";
  }
  size_t i = 1, j = 1;
  for (int64_t g = 0; g < mine[0]; ++g) {
    if (mine[i] != root[j]) {
      return "parameter group " + std::to_string(g) + " has " + std::to_string(mine[i]) + " parameters here, " +
             std::to_string(root[j]) + " on the root rank";
    }
    const int64_t params = mine[i];
    ++i, ++j;
    for (int64_t p = 0; p < params; ++p) {
      const std::string here = SizesText(mine, i, mine[i]), there = SizesText(root, j, root[j]);
      if (here != there) {
        return "parameter " + std::to_string(p) + " of group " + std::to_string(g) + " has shape " + here +
               " here, " + there + " on the root rank";
      }
      i += 1 + static_cast<size_t>(mine[i]);
      j += 1 + static_cast<size_t>(root[j]);
    }
  }
  return "";
}

// Where the root's optimizer state goes on this rank: the device of the
// parameters (a CUDA state tensor of the root is on the root's GPU, which
// need not be this rank's), or where the archive says for CPU parameters.
c10::optional<c10::Device> StateDevice(const ::torch::optim::Optimizer& optimizer) {
  for (const auto& group : optimizer.param_groups()) {
    for (const at::Tensor& p : group.params()) {
      if (p.defined() && p.is_cuda()) return p.device();
    }
  }
  return c10::nullopt;
}

// Each parameter group's options (lr, momentum, ...) from the archive that
// Optimizer::save wrote; Optimizer::load itself restores only the state.
void LoadGroupOptions(::torch::serialize::InputArchive& archive, ::torch::optim::Optimizer& optimizer) {
  ::torch::serialize::InputArchive groups;
  if (!archive.try_read("param_groups", groups)) return;
  for (size_t i = 0; i < optimizer.param_groups().size(); ++i) {
    auto& group = optimizer.param_groups()[i];
    ::torch::serialize::InputArchive group_archive, options_archive;
    if (!group.has_options() || !groups.try_read("param_groups/" + std::to_string(i), group_archive) ||
        !group_archive.try_read("options", options_archive)) {
      continue;
    }
    group.options().serialize(options_archive);
  }
}

}  // namespace

void broadcast_parameters(const ::torch::OrderedDict<std::string, at::Tensor>& named_tensors, int root_rank,
                          ProcessSetId process_set) {
  std::vector<std::pair<std::string, at::Tensor>> entries;
  AddNamed(named_tensors, &entries);
  BroadcastInPlace(entries, root_rank, process_set);
}

void broadcast_parameters(const std::vector<at::Tensor>& tensors, int root_rank, ProcessSetId process_set) {
  std::vector<std::pair<std::string, at::Tensor>> entries;
  for (const at::Tensor& tensor : tensors) {
    if (tensor.defined()) entries.emplace_back("", tensor);
  }
  BroadcastInPlace(entries, root_rank, process_set);
}

void broadcast_parameters(const ::torch::nn::Module& module, int root_rank, ProcessSetId process_set) {
  std::vector<std::pair<std::string, at::Tensor>> entries;
  AddNamed(module.named_parameters(/*recurse=*/true), &entries);
  AddNamed(module.named_buffers(/*recurse=*/true), &entries);
  BroadcastInPlace(entries, root_rank, process_set);
}

void broadcast_optimizer_state(::torch::optim::Optimizer& optimizer, int root_rank, ProcessSetId process_set) {
  const bool is_root = ProcessSetRankOrThrow(process_set) == root_rank;

  // 1-2: the same parameter groups and shapes everywhere.
  const std::vector<int64_t> layout = Layout(optimizer);
  const std::vector<int64_t> root_layout = BroadcastVector(layout, root_rank, "layout", process_set);
  const std::string problem = LayoutMismatch(layout, root_layout);
  if (AnyRank(!problem.empty(), "layout_check", process_set)) {
    throw Error(StatusCode::kInvalidArgument,
                "broadcast_optimizer_state: the optimizer's parameters differ between ranks: " +
                    (problem.empty() ? std::string("another rank's parameters differ from the root's") : problem));
  }

  // 3: the root's serialized optimizer.
  std::string bytes;
  std::string root_problem;
  if (is_root) {
    try {
      ::torch::serialize::OutputArchive archive;
      optimizer.save(archive);
      std::ostringstream stream;
      archive.save_to(stream);
      bytes = stream.str();
    } catch (const std::exception& error) {
      root_problem = error.what();
    }
  }
  at::Tensor count = at::tensor({root_problem.empty() ? static_cast<int64_t>(bytes.size()) : int64_t{-1}}, at::kLong);
  broadcast_(count, root_rank, Named("bytes.size", process_set));
  const int64_t size = count.item<int64_t>();
  if (size < 0) {
    throw Error(StatusCode::kInternal, "broadcast_optimizer_state: the root rank could not serialize its optimizer" +
                                           (is_root ? ": " + root_problem : std::string()));
  }
  bytes.resize(static_cast<size_t>(size));
  at::Tensor data = at::from_blob(bytes.data(), {size}, at::kByte);
  broadcast_(data, root_rank, Named("bytes", process_set));

  // 4-5: every other rank takes the root's state and options.
  std::string load_problem;
  if (!is_root) {
    try {
      ::torch::serialize::InputArchive archive;
      archive.load_from(bytes.data(), bytes.size(), StateDevice(optimizer));
      optimizer.state().clear();
      optimizer.load(archive);
      LoadGroupOptions(archive, optimizer);
    } catch (const std::exception& error) {
      load_problem = error.what();
    }
  }
  if (AnyRank(!load_problem.empty(), "load_check", process_set)) {
    throw Error(StatusCode::kInternal,
                "broadcast_optimizer_state: loading the root rank's optimizer state failed" +
                    (load_problem.empty() ? std::string(" on another rank") : ": " + load_problem));
  }
}

void broadcast_optimizer_state(DistributedOptimizer& optimizer, int root_rank, ProcessSetId process_set) {
  broadcast_optimizer_state(optimizer.optimizer(), root_rank, process_set);
}

}  // namespace torch
}  // namespace accord
