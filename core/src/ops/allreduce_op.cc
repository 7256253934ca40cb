#include <algorithm>
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
// Every call the backend can run over parts (in place or in the fusion
// buffer) goes through AllreduceParts with the postscale and division as
// its finish, on every rank alike, so the ring applies them to each chunk
// as it completes instead of in one more pass over the result.
//
// A lone tensor that fits in one staging window is reduced in its own
// memory even with staging on: staged, it would be one window (copy in, one
// collective, copy out), so staging adds two copies and the fusion buffer's
// bookkeeping and keeps nothing more in cache. Raw MPI_Allreduce in place
// beat the same call on a staged copy at 1 MiB on both machines measured
// (docs/benchmarks.md, "Current figures"). Below kInPlaceBytes it is in place
// whatever the window: MPI copies messages that small through its own
// buffers anyway (Open MPI's shared-memory eager limit is 4 KiB).
namespace {
constexpr uint64_t kInPlaceBytes = 4096;
}  // namespace

Status RunAllreduce(const OpContext& ctx, const std::vector<OpItem>& items) {
  const Response& r = *items.front().response;
  const ReduceOp op = BackendOp(r.op);
  const int divisor = AverageDivisor(r.op, ctx.size);
  const size_t element = DataTypeSize(r.dtype);
  const uint64_t in_place_limit = std::max<uint64_t>(kInPlaceBytes, static_cast<uint64_t>(ctx.staging_window_bytes));
  const bool small_lone = items.size() == 1 && static_cast<uint64_t>(NumElements(r.shape)) * element <= in_place_limit;
  // The postscale and the division of an Average, where there are any.
  AllreduceFinish finish;
  if (r.postscale_factor != 1.0 || divisor != 1) {
    finish = [&r, divisor](void* data, int64_t count) {
      ScaleDivideCopy(data, data, count, r.dtype, r.postscale_factor, divisor);
    };
  }

  if (ctx.staging_window_bytes == 0 || small_lone) {
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
    const bool by_parts = complete && ctx.backend->AllreducesPartsInPlace(total, r.dtype);
    if (by_parts || (complete && items.size() == 1)) {
      // Scaling costs a pass only when a factor is not 1 (the copy into a
      // separate output is needed anyway).
      for (size_t i = 0; i < items.size(); ++i) {
        const TensorView& in = items[i].entry->input;
        if (in.data != in_place[i].data || r.prescale_factor != 1.0) {
          ScaleCopy(in.data, in_place[i].data, in_place[i].count, r.dtype, r.prescale_factor);
        }
      }
      // Where the backend takes parts it applies the scaling itself, each
      // piece as its reduction completes (the ring: while the piece is in
      // cache); else it is one more pass here.
      if (by_parts) return ctx.backend->AllreduceParts(in_place, r.dtype, op, finish);
      ACCORD_RETURN_IF_ERROR(ctx.backend->Allreduce(in_place[0].data, in_place[0].count, r.dtype, op));
      if (finish) finish(in_place[0].data, in_place[0].count);
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
  // A call the backend could run over parts gets the finish inside, as it
  // does on a rank that reduces in place (above): the ring sends finished
  // values on, so every rank of it must finish there.
  bool finished_inside = false;
  auto copy_out = [&](const StagedPart& part, int64_t at, int64_t n, const char* src) {
    if (!part.out) return;
    if (plain_out || finished_inside) {
      std::memcpy(part.out + at * element, src, n * element);
    } else {
      ScaleDivideCopy(src, part.out + at * element, n, r.dtype, r.postscale_factor, divisor);
    }
  };
  return RunStaged(ctx, parts, element, copy_in, copy_out, [&](char* buffer, int64_t n) {
    finished_inside = finish && ctx.backend->AllreducesPartsInPlace(n, r.dtype);
    return finished_inside ? ctx.backend->AllreduceParts({{buffer, n}}, r.dtype, op, finish)
                           : ctx.backend->Allreduce(buffer, n, r.dtype, op);
  });
}

}  // namespace accord
