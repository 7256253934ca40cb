#include <cstring>

#include "common/dtype_kernels.h"
#include "ops/collective_ops.h"
#include "ops/staging.h"

namespace accord {

// With ctx.staging_window_bytes > 0 (the default on one host) every allreduce, of one
// tensor or of a fused batch, runs through the fusion buffer a window at a
// time (ops/staging.h), the scale factors applied while copying. With 0, a
// lone tensor is reduced in its own memory; so is a fused batch where the
// backend reduces several buffers in place (Backend::AllreducesPartsInPlace:
// across hosts, the ring), else it is packed whole and reduced in one call.
Status RunAllreduce(const OpContext& ctx, const std::vector<OpItem>& items) {
  const Response& r = *items.front().response;
  const ReduceOp op = BackendOp(r.op);
  const int divisor = AverageDivisor(r.op, ctx.size);
  const size_t element = DataTypeSize(r.dtype);

  if (ctx.staging_window_bytes == 0) {
    // Each tensor's result in its output's memory (the output has the same
    // layout as the input, checked at enqueue); none where a rank has joined.
    std::vector<BufferPart> in_place;
    int64_t total = 0;
    for (const OpItem& item : items) {
      if (!item.entry) break;  // joined: zeros, packed (the backend's messages are the same)
      const TensorEntry& e = *item.entry;
      in_place.push_back({e.output_is_input ? e.input.data : e.output.data, e.input.num_elements()});
      total += in_place.back().count;
    }
    const bool complete = in_place.size() == items.size();
    const bool one = complete && items.size() == 1;
    if (one || (complete && ctx.backend->AllreducesPartsInPlace(total, r.dtype))) {
      // Scaling costs a pass only when a factor is not 1 (the copy into a
      // separate output is needed anyway).
      for (size_t i = 0; i < items.size(); ++i) {
        const TensorView& in = items[i].entry->input;
        if (in.data != in_place[i].data || r.prescale_factor != 1.0) {
          ScaleCopy(in.data, in_place[i].data, in_place[i].count, r.dtype, r.prescale_factor);
        }
      }
      ACCORD_RETURN_IF_ERROR(one ? ctx.backend->Allreduce(in_place[0].data, in_place[0].count, r.dtype, op)
                                 : ctx.backend->AllreduceParts(in_place, r.dtype, op));
      if (r.postscale_factor != 1.0 || divisor != 1) {
        for (const BufferPart& part : in_place) {
          ScaleDivideCopy(part.data, part.data, part.count, r.dtype, r.postscale_factor, divisor);
        }
      }
      return Status::OK();
    }
  }

  // A rank that has joined (no entry) contributes zeros and keeps nothing.
  std::vector<StagedPart> parts;
  parts.reserve(items.size());
  for (const OpItem& item : items) {
    const TensorEntry* e = item.entry;
    parts.push_back({e ? static_cast<const char*>(e->input.data) : nullptr,
                     e ? static_cast<char*>(e->output_is_input ? e->input.data : e->output.data) : nullptr,
                     NumElements(item.response->shape)});
  }
  // Scale factors of 1 (the common case) make both copies plain.
  const bool plain_in = r.prescale_factor == 1.0;
  const bool plain_out = r.postscale_factor == 1.0 && divisor == 1;
  auto copy_in = [&](const StagedPart& part, int64_t at, int64_t n, char* dst) {
    if (!part.in) {
      FillZero(dst, n, r.dtype);
    } else if (plain_in) {
      std::memcpy(dst, part.in + at * element, n * element);
    } else {
      ScaleCopy(part.in + at * element, dst, n, r.dtype, r.prescale_factor);
    }
  };
  auto copy_out = [&](const StagedPart& part, int64_t at, int64_t n, const char* src) {
    if (!part.out) return;
    if (plain_out) {
      std::memcpy(part.out + at * element, src, n * element);
    } else {
      ScaleDivideCopy(src, part.out + at * element, n, r.dtype, r.postscale_factor, divisor);
    }
  };
  return RunStaged(ctx, parts, element, copy_in, copy_out,
                   [&](char* buffer, int64_t n) { return ctx.backend->Allreduce(buffer, n, r.dtype, op); });
}

}  // namespace accord
