#include "common/dtype_kernels.h"
#include "ops/collective_ops.h"

namespace accord {

Status RunAllreduce(const OpContext& ctx, const std::vector<OpItem>& items) {
  const Response& r = *items.front().response;
  const ReduceOp op = BackendOp(r.op);
  const int divisor = AverageDivisor(r.op, ctx.size);
  const size_t element = DataTypeSize(r.dtype);
  TensorEntry* only = items.size() == 1 ? items.front().entry : nullptr;

  if (only) {
    // One tensor: reduce in the output itself; scaling costs a pass only
    // when a factor is not 1 (the copy into the output is needed anyway).
    const TensorView& in = only->input;
    const TensorView& out = only->output;
    const int64_t n = out.num_elements();
    if (in.data != out.data || r.prescale_factor != 1.0) {
      ScaleCopy(in.data, out.data, n, r.dtype, r.prescale_factor);
    }
    ACCORD_RETURN_IF_ERROR(ctx.backend->Allreduce(out.data, n, r.dtype, op));
    if (r.postscale_factor != 1.0 || divisor != 1) {
      ScaleDivideCopy(out.data, out.data, n, r.dtype, r.postscale_factor, divisor);
    }
    return Status::OK();
  }

  int64_t total = 0;
  for (const auto& item : items) total += NumElements(item.response->shape);
  ACCORD_ASSIGN_OR_RETURN(char* buffer, BufferFor(ctx, total * element));
  int64_t offset = 0;
  for (const auto& item : items) {
    const int64_t n = NumElements(item.response->shape);
    if (item.entry) {
      ScaleCopy(item.entry->input.data, buffer + offset * element, n, r.dtype, r.prescale_factor);
    } else {
      FillZero(buffer + offset * element, n, r.dtype);
    }
    offset += n;
  }
  ACCORD_RETURN_IF_ERROR(ctx.backend->Allreduce(buffer, total, r.dtype, op));
  offset = 0;
  for (const auto& item : items) {
    const int64_t n = NumElements(item.response->shape);
    if (item.entry) {
      ScaleDivideCopy(buffer + offset * element, item.entry->output.data, n, r.dtype, r.postscale_factor, divisor);
    }
    offset += n;
  }
  return Status::OK();
}

}  // namespace accord
