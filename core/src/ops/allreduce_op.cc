#include "common/dtype_kernels.h"
#include "ops/collective_ops.h"
#include <cstring>

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
    void* out = only->output_is_input ? in.data : only->output.data;
    const int64_t n = in.num_elements();  // the output has the same layout (checked at enqueue)
    if (in.data != out || r.prescale_factor != 1.0) ScaleCopy(in.data, out, n, r.dtype, r.prescale_factor);
    ACCORD_RETURN_IF_ERROR(ctx.backend->Allreduce(out, n, r.dtype, op));
    if (r.postscale_factor != 1.0 || divisor != 1) ScaleDivideCopy(out, out, n, r.dtype, r.postscale_factor, divisor);
    return Status::OK();
  }

  // Scale factors of 1 (the common case) make the pack and unpack plain copies.
  const bool plain_in = r.prescale_factor == 1.0;
  const bool plain_out = r.postscale_factor == 1.0 && divisor == 1;
  std::vector<size_t> bytes(items.size());
  size_t total = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    bytes[i] = static_cast<size_t>(NumElements(items[i].response->shape)) * element;
    total += bytes[i];
  }
  ACCORD_ASSIGN_OR_RETURN(char* buffer, BufferFor(ctx, total));
  size_t offset = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    const TensorEntry* e = items[i].entry;
    if (!e) {
      FillZero(buffer + offset, static_cast<int64_t>(bytes[i] / element), r.dtype);  // a joined rank contributes zeros
    } else if (plain_in) {
      std::memcpy(buffer + offset, e->input.data, bytes[i]);
    } else {
      ScaleCopy(e->input.data, buffer + offset, static_cast<int64_t>(bytes[i] / element), r.dtype, r.prescale_factor);
    }
    offset += bytes[i];
  }
  MarkPacked(ctx);
  ACCORD_RETURN_IF_ERROR(ctx.backend->Allreduce(buffer, static_cast<int64_t>(total / element), r.dtype, op));
  MarkExchanged(ctx);
  offset = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    const TensorEntry* e = items[i].entry;
    void* out = e ? (e->output_is_input ? e->input.data : e->output.data) : nullptr;
    if (e && plain_out) {
      std::memcpy(out, buffer + offset, bytes[i]);
    } else if (e) {
      ScaleDivideCopy(buffer + offset, out, static_cast<int64_t>(bytes[i] / element), r.dtype, r.postscale_factor,
                      divisor);
    }
    offset += bytes[i];
  }
  return Status::OK();
}

}  // namespace accord
