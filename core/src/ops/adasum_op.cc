#include <string>

#include "common/dtype_kernels.h"
#include "ops/adasum.h"
#include "ops/collective_ops.h"

namespace accord {

// An Adasum allreduce of a batch of CPU tensors (ops/adasum.h) through the
// backend's SendRecv. Not staged in windows: the coefficients need whole
// tensors. A lone tensor is reduced in its output's memory, with the fusion
// buffer holding the halves received from peers; a fused batch is packed
// into the fusion buffer, followed by that room. The prescale factor is
// applied while packing (or copying into the output), the postscale factor
// while unpacking, as for the other ops.
Status RunAdasum(const OpContext& ctx, const std::vector<OpItem>& items) {
  const Response& r = *items.front().response;
  if (!IsFloatingPoint(r.dtype)) {  // refused at enqueue
    return Status::Internal(std::string("Adasum cannot reduce ") + DataTypeName(r.dtype));
  }
  const size_t element = DataTypeSize(r.dtype);
  std::vector<int64_t> counts;
  counts.reserve(items.size());
  int64_t total = 0;
  for (const OpItem& item : items) {
    counts.push_back(NumElements(item.response->shape));
    total += counts.back();
  }
  const int64_t room = (total + 1) / 2;  // the most any step receives
  const AdasumExchange exchange = [&](const void* send, int64_t send_count, void* recv, int64_t recv_count,
                                      DataType dtype, int peer) {
    return ctx.backend->SendRecv(send, send_count, recv, recv_count, dtype, peer);
  };

  TensorEntry* only = items.size() == 1 ? items.front().entry : nullptr;
  if (only) {
    void* out = only->output_is_input ? only->input.data : only->output.data;
    ACCORD_ASSIGN_OR_RETURN(char* scratch, BufferFor(ctx, static_cast<size_t>(room) * element));
    ScaleCopy(only->input.data, out, total, r.dtype, r.prescale_factor);
    ACCORD_RETURN_IF_ERROR(AdasumAllreduce(out, scratch, counts, r.dtype, ctx.rank, ctx.size, exchange));
    ScaleCopy(out, out, total, r.dtype, r.postscale_factor);
    return Status::OK();
  }

  ACCORD_ASSIGN_OR_RETURN(char* buffer, BufferFor(ctx, static_cast<size_t>(total + room) * element));
  int64_t at = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    // A rank that has joined contributes zeros (negotiation refuses Adasum
    // while one has, but zeros keep the ranks' calls matched regardless).
    const TensorEntry* e = items[i].entry;
    if (e) {
      ScaleCopy(e->input.data, buffer + at * element, counts[i], r.dtype, r.prescale_factor);
    } else {
      FillZero(buffer + at * element, counts[i], r.dtype);
    }
    at += counts[i];
  }
  MarkPacked(ctx.phases);
  ACCORD_RETURN_IF_ERROR(
      AdasumAllreduce(buffer, buffer + total * element, counts, r.dtype, ctx.rank, ctx.size, exchange));
  MarkExchanged(ctx.phases);
  at = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    const TensorEntry* e = items[i].entry;
    if (e) {
      void* out = e->output_is_input ? e->input.data : e->output.data;
      ScaleCopy(buffer + at * element, out, counts[i], r.dtype, r.postscale_factor);
    }
    at += counts[i];
  }
  return Status::OK();
}

}  // namespace accord
