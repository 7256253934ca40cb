// The collectives on at::Tensor: bind the operation to its device (and, for
// CUDA, to the current stream), stage the tensors, enqueue with the core,
// hand back a TensorHandle. The synchronous forms wait on it.
#include <ATen/ATen.h>

#include <memory>
#include <string>
#include <vector>

#include "accord/torch/collectives.h"
#include "operation.h"

namespace accord {
namespace torch {

namespace {

using Operation = TensorHandle::Operation;

std::string What(const char* collective, const CollectiveOptions& options) {
  std::string what = std::string("accord::torch::") + collective;
  if (!options.name.empty()) what += " of tensor '" + options.name + "'";
  return what;
}

TensorHandle Started(std::unique_ptr<Operation> op, Result<Handle> enqueued) {
  op->Start(std::move(enqueued));
  return TensorHandle(std::move(op));
}

// Allreduce of `tensors` (one or a group), in place or into new tensors.
TensorHandle AllreduceAsync(const std::vector<at::Tensor>& tensors, AllreduceOptions options, bool in_place,
                            bool grouped) {
  const std::string what = What(grouped ? "grouped_allreduce" : "allreduce", options);
  auto op = std::make_unique<Operation>(tensors.size());
  std::vector<TensorView> inputs, outputs;
  for (size_t i = 0; i < tensors.size(); ++i) {
    internal::CheckInput(tensors[i], what);
    // The core refuses a group whose tensors are on different devices.
    if (i == 0) op->Bind(tensors[0], &options);
    at::Tensor input = op->Stage(tensors[i], in_place, i);
    inputs.push_back(to_tensor_view(input));
    if (in_place) {
      outputs.push_back(inputs.back());
    } else {
      at::Tensor output = at::empty_like(input, at::MemoryFormat::Contiguous);
      op->keep_alive.push_back(output);
      op->outputs[i] = output;
      outputs.push_back(to_tensor_view(output));
    }
  }
  if (!grouped) return Started(std::move(op), Allreduce(inputs[0], outputs[0], options));
  return Started(std::move(op), GroupedAllreduce(inputs, outputs, options));
}

TensorHandle BroadcastAsync(const at::Tensor& tensor, int root_rank, CollectiveOptions options, bool in_place) {
  const std::string what = What("broadcast", options);
  auto op = std::make_unique<Operation>(1);
  internal::CheckInput(tensor, what);
  op->Bind(tensor, &options);
  at::Tensor target;
  if (in_place) {
    target = op->Stage(tensor, true, 0);
  } else {
    // The core broadcasts in place: into a copy, so `tensor` stays as it is.
    target = tensor.detach().clone(at::MemoryFormat::Contiguous);
    op->keep_alive.push_back(target);
    op->outputs[0] = target;
  }
  return Started(std::move(op), Broadcast(to_tensor_view(target), root_rank, options));
}

// Starts a collective of one input whose output the core allocates
// (allgather, alltoall, reducescatter) into the operation's store: checks,
// binds and stages `tensor`, then calls `enqueue(input view, allocator,
// options with the producer stream)`.
template <typename Options, typename Enqueue>
TensorHandle StartAllocating(const at::Tensor& tensor, const char* collective, Options options, Enqueue enqueue) {
  auto op = std::make_unique<Operation>(1);
  internal::CheckInput(tensor, What(collective, options));
  op->Bind(tensor, &options);
  op->allocated = std::make_shared<internal::OutputStore>();
  const Allocator allocator = internal::MakeAllocator(op->allocated, op->producer);
  at::Tensor input = op->Stage(tensor, false, 0);
  return Started(std::move(op), enqueue(to_tensor_view(input), allocator, options));
}

}  // namespace

// --------------------------------------------------------------- allreduce

TensorHandle allreduce_async(const at::Tensor& tensor, const AllreduceOptions& options) {
  return AllreduceAsync({tensor}, options, false, false);
}

TensorHandle allreduce_async_(const at::Tensor& tensor, const AllreduceOptions& options) {
  return AllreduceAsync({tensor}, options, true, false);
}

at::Tensor allreduce(const at::Tensor& tensor, const AllreduceOptions& options) {
  return allreduce_async(tensor, options).wait();
}

at::Tensor allreduce_(const at::Tensor& tensor, const AllreduceOptions& options) {
  return allreduce_async_(tensor, options).wait();
}

TensorHandle grouped_allreduce_async(const std::vector<at::Tensor>& tensors, const AllreduceOptions& options) {
  return AllreduceAsync(tensors, options, false, true);
}

TensorHandle grouped_allreduce_async_(const std::vector<at::Tensor>& tensors, const AllreduceOptions& options) {
  return AllreduceAsync(tensors, options, true, true);
}

std::vector<at::Tensor> grouped_allreduce(const std::vector<at::Tensor>& tensors, const AllreduceOptions& options) {
  return grouped_allreduce_async(tensors, options).wait_all();
}

std::vector<at::Tensor> grouped_allreduce_(const std::vector<at::Tensor>& tensors, const AllreduceOptions& options) {
  return grouped_allreduce_async_(tensors, options).wait_all();
}

// ---------------------------------------------------- gather, bcast, scatter

TensorHandle allgather_async(const at::Tensor& tensor, const CollectiveOptions& options) {
  return StartAllocating(tensor, "allgather", options,
                         [](const TensorView& input, const Allocator& allocator, const CollectiveOptions& bound) {
                           return Allgather(input, allocator, bound);
                         });
}

at::Tensor allgather(const at::Tensor& tensor, const CollectiveOptions& options) {
  return allgather_async(tensor, options).wait();
}

TensorHandle broadcast_async(const at::Tensor& tensor, int root_rank, const CollectiveOptions& options) {
  return BroadcastAsync(tensor, root_rank, options, false);
}

TensorHandle broadcast_async_(const at::Tensor& tensor, int root_rank, const CollectiveOptions& options) {
  return BroadcastAsync(tensor, root_rank, options, true);
}

at::Tensor broadcast(const at::Tensor& tensor, int root_rank, const CollectiveOptions& options) {
  return broadcast_async(tensor, root_rank, options).wait();
}

at::Tensor broadcast_(const at::Tensor& tensor, int root_rank, const CollectiveOptions& options) {
  return broadcast_async_(tensor, root_rank, options).wait();
}

TensorHandle alltoall_async(const at::Tensor& tensor, const std::vector<int64_t>& splits,
                            const CollectiveOptions& options) {
  return StartAllocating(tensor, "alltoall", options,
                         [&](const TensorView& input, const Allocator& allocator, const CollectiveOptions& bound) {
                           return Alltoall(input, splits, allocator, bound);
                         });
}

at::Tensor alltoall(const at::Tensor& tensor, const std::vector<int64_t>& splits, const CollectiveOptions& options) {
  return alltoall_async(tensor, splits, options).wait();
}

TensorHandle reducescatter_async(const at::Tensor& tensor, const ReducescatterOptions& options) {
  return StartAllocating(tensor, "reducescatter", options,
                         [](const TensorView& input, const Allocator& allocator, const ReducescatterOptions& bound) {
                           return Reducescatter(input, allocator, bound);
                         });
}

at::Tensor reducescatter(const at::Tensor& tensor, const ReducescatterOptions& options) {
  return reducescatter_async(tensor, options).wait();
}

void barrier(ProcessSetId process_set) {
  Result<Handle> handle = Barrier(process_set);
  if (!handle.ok()) throw Error(handle.status());
  check(handle->Wait());
}

}  // namespace torch
}  // namespace accord
