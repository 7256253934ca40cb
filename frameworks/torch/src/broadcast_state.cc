// broadcast_parameters and broadcast_optimizer_state.
//
// broadcast_parameters first checks that every rank holds the same tensors
// (names, dtypes, shapes: one small allgather of a digest, see
// tensor_agreement.h), then broadcasts them all, fused.
//
// broadcast_optimizer_state, on every rank of the set, in this order (each
// step a collective every rank enters, so a problem on one rank becomes an
// error on all of them instead of a hang):
//   1. check that every rank's optimizer holds the same parameters (groups,
//      dtypes, shapes, by position): one allgather of a digest; where they
//      differ, all ranks throw, naming the first differing parameters;
//   2. the root serializes its optimizer (Optimizer::save) and how each of
//      its parameters' gradients stands (frozen, none yet, or a dense
//      gradient's dtype and shape) into bytes; broadcast their count (-1:
//      the root could not serialize), then them;
//   3. the other ranks clear their state and load the bytes
//      (Optimizer::load), then each parameter group's options;
//   4. allreduce (Max) a "load failed" flag; all ranks throw if it is set;
//   5. the root's gradients: each dense one broadcast (fused) into this
//      rank's gradient where that has its dtype and shape, else into a new
//      tensor; zeros where the root has none yet; frozen parameters of the
//      root left alone. Every rank knows the same list from step 2, so all
//      of them enqueue the same broadcasts.
#include "accord/torch/broadcast_state.h"

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <torch/serialize/archive.h>

#include <limits>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "accord/torch/basics.h"
#include "accord/torch/collectives.h"
#include "accord/torch/distributed_optimizer.h"
#include "tensor_agreement.h"

namespace accord {
namespace torch {

namespace {

using internal::AgreementCheck;
using internal::Described;
// Names of the optimizer's parameters, where they are known (a
// DistributedOptimizer's), for the messages of step 1.
using ParameterNames = std::unordered_map<const c10::TensorImpl*, std::string>;

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

// The tensors of one broadcast_parameters call, as the ranks match them
// (their names, or "#<position>") and with the names of their broadcasts.
struct Broadcasts {
  std::vector<Described> described;
  std::vector<std::pair<std::string, at::Tensor>> entries;
};

void AddNamed(const ::torch::OrderedDict<std::string, at::Tensor>& named, Broadcasts* broadcasts) {
  for (const auto& item : named) {
    if (!item.value().defined()) continue;
    broadcasts->described.push_back(internal::Describe(item.key(), item.value()));
    broadcasts->entries.emplace_back("broadcast_parameters." + item.key(), item.value());
  }
}

// Named tensors are broadcast by name, so their order does not matter;
// unnamed ones are matched by position.
void CheckAndBroadcast(const Broadcasts& broadcasts, bool by_name, int root_rank, ProcessSetId process_set) {
  AgreementCheck check;
  check.caller = "broadcast_parameters";
  check.collective = "broadcast_parameters.check";
  check.by_name = by_name;
  check.process_set = process_set;
  internal::CheckSameTensors(broadcasts.described, check);
  BroadcastInPlace(broadcasts.entries, root_rank, process_set);
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

// Every parameter of the optimizer's groups, in order.
std::vector<at::Tensor> Parameters(const ::torch::optim::Optimizer& optimizer) {
  std::vector<at::Tensor> params;
  for (const auto& group : optimizer.param_groups()) {
    params.insert(params.end(), group.params().begin(), group.params().end());
  }
  return params;
}

// Step 1's list: each parameter by its place, "param_groups[g][j]", with
// " (<name>)" where `names` knows it, as accord.torch labels them.
std::vector<Described> DescribeParameters(const ::torch::optim::Optimizer& optimizer, const ParameterNames& names) {
  std::vector<Described> described;
  const auto& groups = optimizer.param_groups();
  for (size_t g = 0; g < groups.size(); ++g) {
    for (size_t j = 0; j < groups[g].params().size(); ++j) {
      const at::Tensor& p = groups[g].params()[j];
      std::string label = "param_groups[" + std::to_string(g) + "][" + std::to_string(j) + "]";
      const auto name = p.defined() ? names.find(p.unsafeGetTensorImpl()) : names.end();
      if (name != names.end()) label += " (" + name->second + ")";
      described.push_back(internal::Describe(std::move(label), p));
    }
  }
  return described;
}

// How the root's gradient of a parameter stands (step 2).
enum class RootGradient : int64_t {
  kFrozen = 0,  // the parameter does not require a gradient: left alone everywhere
  kNone = 1,    // none yet: zeros everywhere
  kDense = 2,   // broadcast (a sparse one as dense)
};

struct GradientPlan {
  RootGradient kind = RootGradient::kFrozen;
  c10::ScalarType dtype = at::kFloat;
  std::vector<int64_t> shape;
};

// Per parameter its RootGradient; a dense one's scalar type, number of dims
// and sizes after it.
std::vector<int64_t> DescribeGradients(const std::vector<at::Tensor>& params) {
  std::vector<int64_t> codes;
  for (const at::Tensor& p : params) {
    const at::Tensor grad = p.defined() ? p.grad() : at::Tensor();
    if (!p.defined() || !p.requires_grad()) {
      codes.push_back(static_cast<int64_t>(RootGradient::kFrozen));
    } else if (!grad.defined()) {
      codes.push_back(static_cast<int64_t>(RootGradient::kNone));
    } else {
      codes.insert(codes.end(),
                   {static_cast<int64_t>(RootGradient::kDense), static_cast<int64_t>(grad.scalar_type()), grad.dim()});
      codes.insert(codes.end(), grad.sizes().begin(), grad.sizes().end());
    }
  }
  return codes;
}

// The inverse, for `count` parameters. Throws std::runtime_error on codes
// that do not fit (a bug, or bytes from another build).
std::vector<GradientPlan> ReadGradients(const std::vector<int64_t>& codes, size_t count) {
  size_t at = 0;
  auto next = [&](int64_t low, int64_t high) {
    if (at >= codes.size() || codes[at] < low || codes[at] > high) {
      throw std::runtime_error("the root's description of its gradients does not fit at code " + std::to_string(at));
    }
    return codes[at++];
  };
  std::vector<GradientPlan> plans(count);
  for (GradientPlan& plan : plans) {
    plan.kind = static_cast<RootGradient>(next(0, static_cast<int64_t>(RootGradient::kDense)));
    if (plan.kind != RootGradient::kDense) continue;
    plan.dtype = static_cast<c10::ScalarType>(next(0, static_cast<int64_t>(c10::ScalarType::NumOptions) - 1));
    const int64_t dims = next(0, 64);
    for (int64_t d = 0; d < dims; ++d) plan.shape.push_back(next(0, std::numeric_limits<int64_t>::max()));
  }
  if (at != codes.size()) {
    throw std::runtime_error("the root describes gradients of more parameters than this rank has");
  }
  return plans;
}

// Step 2 on the root: its optimizer and its gradients' description as
// bytes, or the reason it could not make them in `problem`.
std::string SaveRoot(::torch::optim::Optimizer& optimizer, const std::vector<at::Tensor>& params,
                     std::string* problem) {
  try {
    ::torch::serialize::OutputArchive archive, optimizer_archive;
    optimizer.save(optimizer_archive);
    archive.write("optimizer", optimizer_archive);
    archive.write("gradients", c10::IValue(DescribeGradients(params)));
    std::ostringstream stream;
    archive.save_to(stream);
    return stream.str();
  } catch (const std::exception& error) {
    *problem = error.what();
    return "";
  }
}

// Step 2 everywhere: the root's bytes.
std::string BroadcastRootBytes(::torch::optim::Optimizer& optimizer, const std::vector<at::Tensor>& params,
                               bool is_root, int root_rank, ProcessSetId process_set) {
  std::string bytes;
  std::string root_problem;
  if (is_root) bytes = SaveRoot(optimizer, params, &root_problem);
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
  return bytes;
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

// Step 3 on the other ranks: takes the root's state and options, and
// returns the root's gradients' description.
std::vector<GradientPlan> LoadRoot(const std::string& bytes, ::torch::optim::Optimizer& optimizer, size_t params) {
  ::torch::serialize::InputArchive archive, optimizer_archive;
  archive.load_from(bytes.data(), bytes.size(), StateDevice(optimizer));
  archive.read("optimizer", optimizer_archive);
  optimizer.state().clear();
  optimizer.load(optimizer_archive);
  LoadGroupOptions(optimizer_archive, optimizer);
  c10::IValue codes;
  archive.read("gradients", codes);
  return ReadGradients(codes.toIntVector(), params);
}

// Step 5. The broadcasts go where the root has a dense gradient, also into
// a rank's frozen parameter (which keeps its own gradient), so that every
// rank enqueues the same ones. The root's own gradients stay as they are.
void TakeRootGradients(const std::vector<at::Tensor>& params, const std::vector<GradientPlan>& plans, bool is_root,
                       int root_rank, ProcessSetId process_set) {
  std::vector<std::pair<std::string, at::Tensor>> entries;
  std::vector<std::pair<at::Tensor, at::Tensor>> assigned;  // a parameter and its new gradient
  for (size_t i = 0; i < params.size(); ++i) {
    const at::Tensor& p = params[i];
    const GradientPlan& plan = plans[i];
    if (plan.kind == RootGradient::kFrozen) continue;
    if (plan.kind == RootGradient::kNone) {
      if (p.requires_grad()) assigned.emplace_back(p, at::zeros_like(p));
      continue;
    }
    at::Tensor grad = p.grad();
    if (is_root) {
      entries.emplace_back("broadcast_optimizer_state.grad." + std::to_string(i),
                           grad.is_sparse() ? grad.to_dense() : grad);
      continue;
    }
    if (!p.requires_grad() || !grad.defined() || grad.is_sparse() || !grad.sizes().equals(plan.shape) ||
        grad.scalar_type() != plan.dtype) {
      grad = at::empty(plan.shape, at::TensorOptions().dtype(plan.dtype).device(p.device()));
    }
    entries.emplace_back("broadcast_optimizer_state.grad." + std::to_string(i), grad);
    if (p.requires_grad()) assigned.emplace_back(p, grad);
  }
  BroadcastInPlace(entries, root_rank, process_set);
  for (auto& [p, grad] : assigned) p.mutable_grad() = grad;
}

void BroadcastOptimizerState(::torch::optim::Optimizer& optimizer, int root_rank, ProcessSetId process_set,
                             const ParameterNames& names) {
  const bool is_root = ProcessSetRankOrThrow(process_set) == root_rank;

  // 1: the same parameters everywhere, by position.
  AgreementCheck check;
  check.caller = "broadcast_optimizer_state";
  check.collective = "broadcast_optimizer_state.check";
  check.by_name = false;
  check.process_set = process_set;
  internal::CheckSameTensors(DescribeParameters(optimizer, names), check);

  // 2: the root's serialized optimizer and gradients' description.
  const std::vector<at::Tensor> params = Parameters(optimizer);
  const std::string bytes = BroadcastRootBytes(optimizer, params, is_root, root_rank, process_set);

  // 3-4: every other rank takes the root's state and options.
  std::vector<GradientPlan> plans;
  std::string load_problem;
  try {
    plans =
        is_root ? ReadGradients(DescribeGradients(params), params.size()) : LoadRoot(bytes, optimizer, params.size());
  } catch (const std::exception& error) {
    load_problem = error.what();
  }
  if (AnyRank(!load_problem.empty(), "load_check", process_set)) {
    throw Error(StatusCode::kInternal,
                "broadcast_optimizer_state: loading the root rank's optimizer state failed" +
                    (load_problem.empty() ? std::string(" on another rank") : ": " + load_problem));
  }

  // 5: the root's gradients.
  TakeRootGradients(params, plans, is_root, root_rank, process_set);
}

}  // namespace

void broadcast_parameters(const ::torch::OrderedDict<std::string, at::Tensor>& named_tensors, int root_rank,
                          ProcessSetId process_set) {
  Broadcasts broadcasts;
  AddNamed(named_tensors, &broadcasts);
  CheckAndBroadcast(broadcasts, /*by_name=*/true, root_rank, process_set);
}

void broadcast_parameters(const std::vector<at::Tensor>& tensors, int root_rank, ProcessSetId process_set) {
  Broadcasts broadcasts;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (!tensors[i].defined()) continue;
    // Unnamed: the core names each broadcast by the order of the calls.
    broadcasts.described.push_back(internal::Describe("#" + std::to_string(i), tensors[i]));
    broadcasts.entries.emplace_back("", tensors[i]);
  }
  CheckAndBroadcast(broadcasts, /*by_name=*/false, root_rank, process_set);
}

void broadcast_parameters(const ::torch::nn::Module& module, int root_rank, ProcessSetId process_set) {
  Broadcasts broadcasts;
  AddNamed(module.named_parameters(/*recurse=*/true), &broadcasts);
  AddNamed(module.named_buffers(/*recurse=*/true), &broadcasts);
  CheckAndBroadcast(broadcasts, /*by_name=*/true, root_rank, process_set);
}

void broadcast_optimizer_state(::torch::optim::Optimizer& optimizer, int root_rank, ProcessSetId process_set) {
  BroadcastOptimizerState(optimizer, root_rank, process_set, ParameterNames());
}

void broadcast_optimizer_state(DistributedOptimizer& optimizer, int root_rank, ProcessSetId process_set) {
  ParameterNames names;
  for (const auto& item : optimizer.named_parameters()) names.emplace(item.value().unsafeGetTensorImpl(), item.key());
  BroadcastOptimizerState(optimizer.optimizer(), root_rank, process_set, names);
}

}  // namespace torch
}  // namespace accord
