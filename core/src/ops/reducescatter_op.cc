#include <cstring>

#include "common/dtype_kernels.h"
#include "ops/collective_ops.h"
#include "ops/layout.h"

namespace accord {

Status RunReducescatter(const OpContext& ctx, const std::vector<OpItem>& items) {
  const Response& r0 = *items.front().response;
  const size_t element = DataTypeSize(r0.dtype);
  const ReduceOp op = BackendOp(r0.op);
  const int divisor = AverageDivisor(r0.op, ctx.size);
  const ReducescatterLayout layout = LayOutReducescatter(items, ctx.rank, ctx.size);
  const std::vector<int64_t>& counts = layout.counts;
  const int64_t total = layout.total;
  std::vector<TensorView> outputs(items.size());
  for (size_t k = 0; k < items.size(); ++k) outputs[k] = AllocateOutput(items[k], layout.output_shapes[k]);
  // Send layout: rank 0's blocks of every tensor, then rank 1's, ...; the
  // received block follows the send area in the fusion buffer.
  const bool direct = items.size() == 1 && r0.prescale_factor == 1.0;
  ACCORD_ASSIGN_OR_RETURN(char* buffer, BufferFor(ctx, (direct ? 0 : total * element) +
                                                           (items.size() == 1 ? 0 : counts[ctx.rank] * element)));
  const char* send = direct ? static_cast<const char*>(items.front().entry->input.data) : buffer;
  if (!direct) {
    int64_t offset = 0;
    for (const LayoutPiece& piece : layout.send) {
      const char* src = static_cast<const char*>(items[piece.item].entry->input.data) + piece.offset * element;
      ScaleCopy(src, buffer + offset * element, piece.count, r0.dtype, r0.prescale_factor);
      offset += piece.count;
    }
  }
  char* recv = items.size() == 1 ? static_cast<char*>(outputs[0].data) : buffer + (direct ? 0 : total * element);
  const bool fused = items.size() > 1;
  if (fused) MarkPacked(ctx.phases);
  ACCORD_RETURN_IF_ERROR(ctx.backend->ReduceScatter(send, recv, counts, r0.dtype, op));
  if (fused) MarkExchanged(ctx.phases);
  int64_t offset = 0;
  for (size_t k = 0; k < items.size(); ++k) {
    const int64_t n = outputs[k].num_elements();
    if (items.size() > 1 || r0.postscale_factor != 1.0 || divisor != 1) {
      ScaleDivideCopy(recv + offset * element, outputs[k].data, n, r0.dtype, r0.postscale_factor, divisor);
    }
    offset += n;
    items[k].entry->handle->SetOutput(items[k].entry->part, outputs[k]);
  }
  return Status::OK();
}

}  // namespace accord
