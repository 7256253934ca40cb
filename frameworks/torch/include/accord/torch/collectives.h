// Collectives on at::Tensor: each maps straight to the core's function of the
// same name (core/include/accord/accord.h) and takes the core's options
// structs (name, op, scale factors, process set).
//
//   accord::AllreduceOptions sum;
//   sum.op = accord::ReduceOp::kSum;
//   at::Tensor total = accord::torch::allreduce(t, sum);   // out of place
//   accord::torch::allreduce_(grad);                       // in place (Average)
//   auto handle = accord::torch::allgather_async(t);       // returns at once
//   at::Tensor all = handle.wait();                        // throws accord::torch::Error
//
// Naming follows horovod.torch: a trailing `_` works in place on the given
// tensor, `_async` returns a TensorHandle instead of waiting. The synchronous
// forms enqueue and wait.
//
// Tensors: dense (strided) CPU or CUDA tensors of uint8, int8, int16, int32,
// int64, float16, bfloat16, float32, float64 or bool; the tensors of one call
// are on one device. A non-contiguous tensor is sent through a contiguous
// copy (copied back into the tensor for the in-place forms when the
// operation completes). Outputs whose size is known only after negotiation
// (allgather, alltoall, reducescatter) are allocated with at::empty on the
// input's device, on the coordinator thread.
//
// CUDA tensors (one GPU per rank). The producer is the current CUDA stream
// of the tensor's device when the collective is called: accord reads the
// tensor after the work queued there so far, without blocking the host, so
// call the collective with the stream that wrote the tensor current (as a
// torch op would be). The adapter's own copies and outputs are made on that
// stream too, and the outputs accord allocates are allocated with it current,
// so LibTorch's caching allocator ties them to it. (Leave options.stream
// null: the adapter sets it; another stream than the current one is refused.)
// wait() blocks the host until the GPU has finished; wait_on_stream() only
// makes the current stream wait. An accord_torch built against a LibTorch
// without CUDA refuses CUDA tensors with kUnimplemented, saying so.
//
// The collectives are not differentiable: they work on the tensors' data and
// record nothing for autograd.
//
// Lifetimes: a TensorHandle keeps every tensor of its operation alive until
// the operation completes, also when the handle is destroyed first (the
// operation then completes in the background and its tensors are released
// by a later enqueue or by shutdown()). The caller must not change the
// tensors of an operation in flight.
//
// Thread safety: the functions may be called from any thread. A TensorHandle
// is used by one thread at a time (like std::future); move it to hand it on.
#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "accord/accord.h"
#include "accord/tensor.h"
#include "accord/torch/basics.h"

namespace accord {
namespace torch {

// --------------------------------------------------------- dtypes and views

// at::ScalarType <-> accord::DataType; Error(kInvalidArgument) for a type the
// core does not have (complex, quantized, ...).
DataType to_data_type(c10::ScalarType type);
c10::ScalarType to_scalar_type(DataType dtype);

// The core's view of `tensor`, for code that calls the core directly. The
// tensor must be defined, dense and contiguous (Error(kInvalidArgument)
// otherwise); the view does not keep it alive.
TensorView to_tensor_view(const at::Tensor& tensor);

// ------------------------------------------------------------- TensorHandle

class TensorHandle {
 public:
  TensorHandle();
  TensorHandle(TensorHandle&& other) noexcept;
  TensorHandle& operator=(TensorHandle&& other) noexcept;
  TensorHandle(const TensorHandle&) = delete;
  TensorHandle& operator=(const TensorHandle&) = delete;
  // Never blocks: an operation still in flight is left to finish in the
  // background (see Lifetimes above).
  ~TensorHandle();

  bool valid() const { return operation_ != nullptr; }
  // True once the operation has finished, successfully or not.
  bool poll() const;

  // Waits for the operation and returns its output: the reduced tensor (the
  // caller's own tensor for the in-place forms), the gathered, received or
  // scattered tensor. Throws Error if the operation failed, and
  // Error(kInvalidArgument) for an operation with several outputs (a grouped
  // one: use wait_all()). May be called again; returns the same tensor.
  at::Tensor wait();
  // Like wait(), but throws Error(kTimeout) if the operation has not finished
  // within `timeout`; it then stays in flight and may be waited for again.
  at::Tensor wait(std::chrono::milliseconds timeout);
  // Every output, in the order of the inputs (one for a single operation).
  std::vector<at::Tensor> wait_all();
  std::vector<at::Tensor> wait_all(std::chrono::milliseconds timeout);

  // CUDA tensors: like wait(), without blocking the host until the GPU has
  // finished (as torch.distributed's Work.wait() for NCCL). Blocks only until
  // the operation is queued on the device, then makes the current CUDA stream
  // of its device wait for it there and returns the output: work queued on
  // that stream afterwards sees the result. Throws Error if the operation has
  // already failed; a failure on the device after this returns is thrown by
  // a later wait(). The operation's tensors stay held until the device has
  // finished with them (poll() is then true), also when the handle is
  // destroyed first. May be called again, on any stream. For CPU tensors it
  // is wait().
  at::Tensor wait_on_stream();
  std::vector<at::Tensor> wait_all_on_stream();

  // alltoall: rows (dim 0) received from each rank of the process set.
  // Valid after a successful wait().
  std::vector<int64_t> received_splits() const;

  // The core's handle, for code that mixes both APIs.
  const Handle& core_handle() const;

  struct Operation;  // the operation's tensors; defined in src/
  explicit TensorHandle(std::unique_ptr<Operation> operation);

 private:
  std::unique_ptr<Operation> operation_;
};

// --------------------------------------------------------------- allreduce

// Reduces across the process set. Average (the default) divides by the set's
// size; integer results of a division or scaling are rounded toward zero.
at::Tensor allreduce(const at::Tensor& tensor, const AllreduceOptions& options = {});
// In place: `tensor` receives the result and is returned.
at::Tensor allreduce_(const at::Tensor& tensor, const AllreduceOptions& options = {});
TensorHandle allreduce_async(const at::Tensor& tensor, const AllreduceOptions& options = {});
TensorHandle allreduce_async_(const at::Tensor& tensor, const AllreduceOptions& options = {});

// The tensors are negotiated as one group and reduced in one round;
// options.name names the group (members are "<name>.<i>").
std::vector<at::Tensor> grouped_allreduce(const std::vector<at::Tensor>& tensors, const AllreduceOptions& options = {});
std::vector<at::Tensor> grouped_allreduce_(const std::vector<at::Tensor>& tensors,
                                           const AllreduceOptions& options = {});
TensorHandle grouped_allreduce_async(const std::vector<at::Tensor>& tensors, const AllreduceOptions& options = {});
TensorHandle grouped_allreduce_async_(const std::vector<at::Tensor>& tensors, const AllreduceOptions& options = {});

// ---------------------------------------------------- gather, bcast, scatter

// Concatenates every rank's tensor along dim 0 (which may differ per rank).
at::Tensor allgather(const at::Tensor& tensor, const CollectiveOptions& options = {});
TensorHandle allgather_async(const at::Tensor& tensor, const CollectiveOptions& options = {});

// Every rank receives root_rank's tensor (root_rank is a rank of the process
// set). The out-of-place form leaves `tensor` unchanged and returns a new one.
at::Tensor broadcast(const at::Tensor& tensor, int root_rank, const CollectiveOptions& options = {});
at::Tensor broadcast_(const at::Tensor& tensor, int root_rank, const CollectiveOptions& options = {});
TensorHandle broadcast_async(const at::Tensor& tensor, int root_rank, const CollectiveOptions& options = {});
TensorHandle broadcast_async_(const at::Tensor& tensor, int root_rank, const CollectiveOptions& options = {});

// Sends splits[j] rows of `tensor` to rank j (empty `splits`: dim 0 split
// evenly) and returns what every rank sent here, in rank order. The async
// form's handle also says how many rows came from each rank.
at::Tensor alltoall(const at::Tensor& tensor, const std::vector<int64_t>& splits = {},
                    const CollectiveOptions& options = {});
TensorHandle alltoall_async(const at::Tensor& tensor, const std::vector<int64_t>& splits = {},
                            const CollectiveOptions& options = {});

// Reduces (Sum or Average) and keeps this rank's block of dim 0; the first
// (rows % size) ranks get one row more.
at::Tensor reducescatter(const at::Tensor& tensor, const ReducescatterOptions& options = {});
TensorHandle reducescatter_async(const at::Tensor& tensor, const ReducescatterOptions& options = {});

// Returns once every rank of the process set has called barrier().
void barrier(ProcessSetId process_set = kGlobalProcessSet);

}  // namespace torch
}  // namespace accord
