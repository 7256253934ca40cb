#include "ops/collective_ops.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "common/dtype_kernels.h"

namespace accord {

namespace {

template <typename T>
void DivideIntegers(const T* src, T* dst, int64_t n, double factor, int divisor) {
  constexpr double lo = static_cast<double>(std::numeric_limits<T>::lowest());
  constexpr double hi = static_cast<double>(std::numeric_limits<T>::max());
  for (int64_t i = 0; i < n; ++i) {
    const double v = std::trunc(static_cast<double>(src[i]) * factor / divisor);
    dst[i] = v <= lo ? std::numeric_limits<T>::lowest() : v >= hi ? std::numeric_limits<T>::max() : static_cast<T>(v);
  }
}

}  // namespace

void ScaleDivideCopy(const void* src, void* dst, int64_t n, DataType dtype, double factor, int divisor) {
  if (divisor == 1 || IsFloatingPoint(dtype) || dtype == DataType::kBool) {
    ScaleCopy(src, dst, n, dtype, factor / divisor);
    return;
  }
  switch (dtype) {
    case DataType::kUInt8:
      return DivideIntegers(static_cast<const uint8_t*>(src), static_cast<uint8_t*>(dst), n, factor, divisor);
    case DataType::kInt8:
      return DivideIntegers(static_cast<const int8_t*>(src), static_cast<int8_t*>(dst), n, factor, divisor);
    case DataType::kInt16:
      return DivideIntegers(static_cast<const int16_t*>(src), static_cast<int16_t*>(dst), n, factor, divisor);
    case DataType::kInt32:
      return DivideIntegers(static_cast<const int32_t*>(src), static_cast<int32_t*>(dst), n, factor, divisor);
    case DataType::kInt64:
      return DivideIntegers(static_cast<const int64_t*>(src), static_cast<int64_t*>(dst), n, factor, divisor);
    default: return;
  }
}

ReduceOp BackendOp(ReduceOp op) { return op == ReduceOp::kAverage ? ReduceOp::kSum : op; }

int AverageDivisor(ReduceOp op, int size) { return op == ReduceOp::kAverage ? size : 1; }

Result<char*> BufferFor(const OpContext& ctx, size_t bytes) {
  void* p = ctx.buffer->Get(bytes);
  if (!p && bytes > 0) return Status::Internal("cannot grow the fusion buffer to " + std::to_string(bytes) + " bytes");
  return static_cast<char*>(p);
}

// Allocates the output of an allgather/alltoall/reducescatter through the
// entry's allocator and checks what came back.
TensorView AllocateOutput(const OpItem& item, const Shape& shape, DeviceApi* device_api) {
  TensorEntry* e = item.entry;
  Result<TensorView> out = e->allocator(e->input.dtype, shape, e->input.device);
  Status problem = out.status();
  if (out.ok() && (out->dtype != e->input.dtype || out->shape != shape || out->device != e->input.device ||
                   (!out->data && out->num_elements() > 0))) {
    problem = Status::InvalidArgument("the allocator for '" + item.response->name + "' returned a " +
                                      DataTypeName(out->dtype) + " tensor of shape " + ShapeToString(out->shape) +
                                      " on " + out->device.ToString() + ", not " + DataTypeName(e->input.dtype) + " " +
                                      ShapeToString(shape) + " on " + e->input.device.ToString());
  }
  if (problem.ok()) return *out;
  // The collective must still run on this rank, or the others would wait
  // forever: use scratch memory and fail only this handle.
  e->error = problem;
  Result<TensorView> scratch =
      device_api ? DeviceMemoryAllocator(e->handle->keep_alive(), device_api)(e->input.dtype, shape, e->input.device)
                 : HeapAllocator(e->handle->keep_alive())(e->input.dtype, shape, Device::CPU());
  return scratch.value();
}

Status ExecuteBatch(const OpContext& ctx, const std::vector<OpItem>& items) {
  const Response& first = *items.front().response;
  if (first.device_type != DeviceType::kCPU && !ctx.backend->Supports(first.device_type)) {
    return Status::Unimplemented(std::string("no backend in this build runs ") + OpTypeName(first.type) +
                                 " on CUDA tensors");
  }
  switch (first.type) {
    case OpType::kAllreduce: return first.op == ReduceOp::kAdasum ? RunAdasum(ctx, items) : RunAllreduce(ctx, items);
    case OpType::kAllgather: return RunAllgather(ctx, items);
    case OpType::kBroadcast: return RunBroadcast(ctx, items);
    case OpType::kAlltoall: return RunAlltoall(ctx, items.front());
    case OpType::kReducescatter: return RunReducescatter(ctx, items);
    default: return Status::Internal(std::string("ExecuteBatch cannot run ") + OpTypeName(first.type));
  }
}

}  // namespace accord
