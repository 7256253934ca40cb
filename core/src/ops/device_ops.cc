#include "ops/device_ops.h"

#include <algorithm>

#include "ops/layout.h"

namespace accord {

namespace {

// `n` elements rounded up to a multiple of 16 bytes: fused allreduce
// segments start 16-byte aligned, so the kernel copies them 16 bytes at a
// time (the padding is reduced with the rest and never unpacked).
int64_t Padded(int64_t n, size_t element) {
  const int64_t per16 = std::max<int64_t>(1, 16 / static_cast<int64_t>(element));
  return (n + per16 - 1) / per16 * per16;
}

CopyPlan Plan(DataType dtype, double factor = 1.0, int divisor = 1) {
  CopyPlan plan;
  plan.dtype = dtype;
  plan.factor = factor;
  plan.divisor = divisor;
  return plan;
}

// dst = src * factor / divisor on the stream; nothing when that would copy
// a tensor onto itself.
Status Scale(const DeviceOpContext& ctx, const void* src, void* dst, int64_t n, DataType dtype, double factor,
             int divisor) {
  if (src == dst && IsPlainScale(dtype, factor, divisor)) return Status::OK();
  CopyPlan plan = Plan(dtype, factor, divisor);
  plan.Add(src, dst, n);
  return ctx.stream->Launch(plan);
}

void* OutputOf(const TensorEntry& e) { return e.output_is_input ? e.input.data : e.output.data; }

Status RunDeviceAllreduce(const DeviceOpContext& ctx, const std::vector<OpItem>& items) {
  const Response& r = *items.front().response;
  // NCCL averages floating types itself (ncclAvg, as Horovod's GPU path
  // does); elsewhere a Sum is divided while unpacking, as on the CPU path.
  const bool averaged = r.op == ReduceOp::kAverage && ctx.collectives->AveragesInCollective(r.dtype);
  const ReduceOp op = averaged ? ReduceOp::kAverage : BackendOp(r.op);
  const int divisor = averaged ? 1 : AverageDivisor(r.op, ctx.size);
  const size_t element = DataTypeSize(r.dtype);
  if (items.size() == 1) {
    // One tensor: reduced from its input into its output, scaled there. A
    // rank that has joined reduces zeros of the same count and keeps nothing.
    const int64_t n = NumElements(r.shape);
    if (!items.front().entry) {
      ACCORD_ASSIGN_OR_RETURN(char* zeros, ctx.buffer->Get(static_cast<size_t>(n) * element));
      CopyPlan fill = Plan(r.dtype);
      fill.Add(nullptr, zeros, n);
      ACCORD_RETURN_IF_ERROR(ctx.stream->Launch(fill));
      return ctx.collectives->Allreduce(zeros, zeros, n, r.dtype, op, *ctx.stream);
    }
    const TensorEntry& e = *items.front().entry;
    void* out = OutputOf(e);
    const void* in = e.input.data;
    if (!IsPlainScale(r.dtype, r.prescale_factor, 1)) {
      ACCORD_RETURN_IF_ERROR(Scale(ctx, in, out, n, r.dtype, r.prescale_factor, 1));
      in = out;
    }
    ACCORD_RETURN_IF_ERROR(ctx.collectives->Allreduce(in, out, n, r.dtype, op, *ctx.stream));
    return Scale(ctx, out, out, n, r.dtype, r.postscale_factor, divisor);
  }
  // A fused batch (a rank that has joined adds zeros): pack, reduce the
  // buffer in place, unpack.
  std::vector<int64_t> offsets;
  int64_t total = 0;
  for (const OpItem& item : items) {
    offsets.push_back(total);
    total += Padded(NumElements(item.response->shape), element);
  }
  ACCORD_ASSIGN_OR_RETURN(char* buffer, ctx.buffer->Get(static_cast<size_t>(total) * element));
  CopyPlan pack = Plan(r.dtype, r.prescale_factor);
  CopyPlan unpack = Plan(r.dtype, r.postscale_factor, divisor);
  for (size_t i = 0; i < items.size(); ++i) {
    const TensorEntry* e = items[i].entry;
    const int64_t n = NumElements(items[i].response->shape);
    char* slot = buffer + offsets[i] * element;
    pack.Add(e ? e->input.data : nullptr, slot, n);
    if (e) unpack.Add(slot, OutputOf(*e), n);
  }
  ACCORD_RETURN_IF_ERROR(ctx.stream->Launch(pack));
  MarkPacked(ctx.phases);
  ACCORD_RETURN_IF_ERROR(ctx.collectives->Allreduce(buffer, buffer, total, r.dtype, op, *ctx.stream));
  MarkExchanged(ctx.phases);
  return ctx.stream->Launch(unpack);
}

Status RunDeviceBroadcast(const DeviceOpContext& ctx, const std::vector<OpItem>& items) {
  const Response& r = *items.front().response;
  if (items.size() == 1) {
    TensorEntry* e = items.front().entry;
    return ctx.collectives->Broadcast(e->output.data, e->output.num_elements(), r.dtype, r.root_rank, *ctx.stream);
  }
  const size_t element = DataTypeSize(r.dtype);
  const bool root = ctx.rank == r.root_rank;
  int64_t total = 0;
  for (const OpItem& item : items) total += NumElements(item.response->shape);
  ACCORD_ASSIGN_OR_RETURN(char* buffer, ctx.buffer->Get(static_cast<size_t>(total) * element));
  CopyPlan moves = Plan(r.dtype);  // the root packs, the others unpack
  int64_t at = 0;
  for (const OpItem& item : items) {
    const int64_t n = NumElements(item.response->shape);
    if (root) {
      moves.Add(item.entry->input.data, buffer + at * element, n);
    } else {
      moves.Add(buffer + at * element, item.entry->output.data, n);
    }
    at += n;
  }
  if (root) ACCORD_RETURN_IF_ERROR(ctx.stream->Launch(moves));
  MarkPacked(ctx.phases);
  ACCORD_RETURN_IF_ERROR(ctx.collectives->Broadcast(buffer, total, r.dtype, r.root_rank, *ctx.stream));
  MarkExchanged(ctx.phases);
  return root ? Status::OK() : ctx.stream->Launch(moves);
}

// Allocates each item's output (`shapes[k]`) and tells the context.
Result<std::vector<TensorView>> AllocateOutputs(const DeviceOpContext& ctx, const std::vector<OpItem>& items,
                                                const std::vector<Shape>& shapes) {
  std::vector<TensorView> outputs;
  outputs.reserve(items.size());
  for (size_t k = 0; k < items.size(); ++k) outputs.push_back(AllocateOutput(items[k], shapes[k], ctx.api));
  if (ctx.outputs_allocated) ACCORD_RETURN_IF_ERROR(ctx.outputs_allocated(items));
  return outputs;
}

Status RunDeviceAllgather(const DeviceOpContext& ctx, const std::vector<OpItem>& items) {
  const Response& r0 = *items.front().response;
  const size_t element = DataTypeSize(r0.dtype);
  const AllgatherLayout layout = LayOutAllgather(items, ctx.size);
  ACCORD_ASSIGN_OR_RETURN(std::vector<TensorView> outputs, AllocateOutputs(ctx, items, layout.output_shapes));
  if (items.size() == 1) {
    // Gathered straight into the output: this rank's rows go to their place first.
    char* out = static_cast<char*>(outputs[0].data);
    const TensorView& in = items[0].entry->input;
    ACCORD_RETURN_IF_ERROR(ctx.stream->Copy(out + layout.Start(ctx.rank) * element, in.data, in.size_bytes()));
    ACCORD_RETURN_IF_ERROR(ctx.collectives->Allgatherv(out, layout.counts, r0.dtype, *ctx.stream));
  } else {
    ACCORD_ASSIGN_OR_RETURN(char* buffer, ctx.buffer->Get(static_cast<size_t>(layout.total) * element));
    CopyPlan pack = Plan(r0.dtype);
    CopyPlan unpack = Plan(r0.dtype);
    int64_t at = 0;
    for (const LayoutPiece& piece : layout.pieces) {
      if (piece.rank == ctx.rank) pack.Add(items[piece.item].entry->input.data, buffer + at * element, piece.count);
      unpack.Add(buffer + at * element, static_cast<char*>(outputs[piece.item].data) + piece.offset * element,
                 piece.count);
      at += piece.count;
    }
    ACCORD_RETURN_IF_ERROR(ctx.stream->Launch(pack));
    MarkPacked(ctx.phases);
    ACCORD_RETURN_IF_ERROR(ctx.collectives->Allgatherv(buffer, layout.counts, r0.dtype, *ctx.stream));
    MarkExchanged(ctx.phases);
    ACCORD_RETURN_IF_ERROR(ctx.stream->Launch(unpack));
  }
  for (size_t k = 0; k < items.size(); ++k) items[k].entry->handle->SetOutput(items[k].entry->part, outputs[k]);
  return Status::OK();
}

Status RunDeviceAlltoall(const DeviceOpContext& ctx, const OpItem& item) {
  TensorEntry* e = item.entry;
  AlltoallCounts counts = CountAlltoall(*item.response, ctx.rank, ctx.size);
  ACCORD_ASSIGN_OR_RETURN(std::vector<TensorView> outputs,
                          AllocateOutputs(ctx, {item}, {WithRows(e->input.shape, counts.rows)}));
  ACCORD_RETURN_IF_ERROR(ctx.collectives->Alltoallv(e->input.data, counts.send, outputs[0].data, counts.recv,
                                                    counts.largest_total, item.response->dtype, *ctx.stream));
  e->handle->SetOutput(e->part, outputs[0]);
  e->handle->SetReceivedSplits(std::move(counts.received_rows));
  return Status::OK();
}

Status RunDeviceReducescatter(const DeviceOpContext& ctx, const std::vector<OpItem>& items) {
  const Response& r0 = *items.front().response;
  const size_t element = DataTypeSize(r0.dtype);
  const ReduceOp op = BackendOp(r0.op);
  const int divisor = AverageDivisor(r0.op, ctx.size);
  const ReducescatterLayout layout = LayOutReducescatter(items, ctx.rank, ctx.size);
  const std::vector<int64_t>& counts = layout.counts;
  const int64_t total = layout.total;
  ACCORD_ASSIGN_OR_RETURN(std::vector<TensorView> outputs, AllocateOutputs(ctx, items, layout.output_shapes));
  if (items.size() == 1 && IsPlainScale(r0.dtype, r0.prescale_factor, 1)) {
    // One tensor: reduced from its input straight into its output.
    const int64_t n = outputs[0].num_elements();
    ACCORD_RETURN_IF_ERROR(
        ctx.collectives->ReduceScatter(items[0].entry->input.data, outputs[0].data, counts, r0.dtype, op, *ctx.stream));
    ACCORD_RETURN_IF_ERROR(Scale(ctx, outputs[0].data, outputs[0].data, n, r0.dtype, r0.postscale_factor, divisor));
  } else {
    // Send layout: rank 0's rows of every tensor, then rank 1's, ...; this
    // rank's reduced block follows the send area in the buffer.
    ACCORD_ASSIGN_OR_RETURN(char* buffer, ctx.buffer->Get(static_cast<size_t>(total + counts[ctx.rank]) * element));
    char* recv = buffer + total * element;
    CopyPlan pack = Plan(r0.dtype, r0.prescale_factor);
    int64_t at = 0;
    for (const LayoutPiece& piece : layout.send) {
      const char* src = static_cast<const char*>(items[piece.item].entry->input.data) + piece.offset * element;
      pack.Add(src, buffer + at * element, piece.count);
      at += piece.count;
    }
    CopyPlan unpack = Plan(r0.dtype, r0.postscale_factor, divisor);
    at = 0;
    for (const TensorView& out : outputs) {
      unpack.Add(recv + at * element, out.data, out.num_elements());
      at += out.num_elements();
    }
    ACCORD_RETURN_IF_ERROR(ctx.stream->Launch(pack));
    MarkPacked(ctx.phases);
    ACCORD_RETURN_IF_ERROR(ctx.collectives->ReduceScatter(buffer, recv, counts, r0.dtype, op, *ctx.stream));
    MarkExchanged(ctx.phases);
    ACCORD_RETURN_IF_ERROR(ctx.stream->Launch(unpack));
  }
  for (size_t k = 0; k < items.size(); ++k) items[k].entry->handle->SetOutput(items[k].entry->part, outputs[k]);
  return Status::OK();
}

}  // namespace

Status ExecuteDeviceBatch(const DeviceOpContext& ctx, const std::vector<OpItem>& items) {
  switch (items.front().response->type) {
    case OpType::kAllreduce: return RunDeviceAllreduce(ctx, items);
    case OpType::kAllgather: return RunDeviceAllgather(ctx, items);
    case OpType::kBroadcast: return RunDeviceBroadcast(ctx, items);
    case OpType::kAlltoall: return RunDeviceAlltoall(ctx, items.front());
    case OpType::kReducescatter: return RunDeviceReducescatter(ctx, items);
    default:
      return Status::Internal(std::string("ExecuteDeviceBatch cannot run ") + OpTypeName(items.front().response->type));
  }
}

}  // namespace accord
