#include <algorithm>
#include <cstring>
#include <limits>

#include "common/dtype_kernels.h"
#include "ops/collective_ops.h"
#include "ops/lone_allreduce.h"
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
// A lone tensor larger than the window is reduced in its own memory too
// where ctx.lone_in_place (ACCORD_LONE_ALLREDUCE, or Init's probe:
// ops/lone_allreduce.h), in chunks of kLoneChunkWindows windows (8 MiB with
// the default window): no copies in and out, and calls small enough that
// MPI's own reduction stays in cache. Else it is staged like a batch. A
// rank that has joined stages zeros through windows of the chunk's size,
// so every rank makes the same calls.
//
// A lone tensor that fits in one staging window is reduced in its own
// memory either way: staged, it would be one window (copy in, one
// collective, copy out), so staging adds two copies and the fusion
// buffer's bookkeeping and keeps nothing more in cache. Raw MPI_Allreduce
// in place beat the same call on a staged copy at 1 MiB on both machines
// measured (docs/benchmarks.md). Below kInPlaceBytes it is in place
// whatever the window: MPI copies messages that small through its own
// buffers anyway (Open MPI's shared-memory eager limit is 4 KiB).
namespace {
constexpr int64_t kInPlaceBytes = 4096;

// One call over `n` elements at `data`: where the backend reduces parts in
// place (the ring), with `finish` applied inside, else a plain Allreduce
// that leaves the finish to the caller. *finished says which. A rank that
// reduces in place and one that has joined make their calls here, so they
// choose alike.
Status ReduceWindow(const OpContext& ctx, char* data, int64_t n, DataType dtype, ReduceOp op,
                    const AllreduceFinish& finish, bool* finished) {
  *finished = finish && ctx.backend->AllreducesPartsInPlace(n, dtype);
  return *finished ? ctx.backend->AllreduceParts({{data, n}}, dtype, op, finish)
                   : ctx.backend->Allreduce(data, n, dtype, op);
}
}  // namespace

Status RunAllreduce(const OpContext& ctx, const std::vector<OpItem>& items) {
  const Response& r = *items.front().response;
  const ReduceOp op = BackendOp(r.op);
  const int divisor = AverageDivisor(r.op, ctx.size);
  const size_t element = DataTypeSize(r.dtype);
  const int64_t window_bytes = ctx.staging_window_bytes;
  const bool lone = items.size() == 1;
  // A lone tensor's chunk, in elements: the whole tensor where there is no
  // window or it is not to be reduced in place beyond one.
  const int64_t lone_chunk =
      window_bytes == 0 || !ctx.lone_in_place
          ? std::numeric_limits<int64_t>::max()
          : std::max<int64_t>(1, kLoneChunkWindows * window_bytes / static_cast<int64_t>(element));
  const int64_t lone_bytes = lone ? NumElements(r.shape) * static_cast<int64_t>(element) : 0;
  const bool lone_in_place = lone && (ctx.lone_in_place || lone_bytes <= std::max(kInPlaceBytes, window_bytes));
  // The postscale and the division of an Average, where there are any.
  AllreduceFinish finish;
  if (r.postscale_factor != 1.0 || divisor != 1) {
    finish = [&r, divisor](void* data, int64_t count) {
      ScaleDivideCopy(data, data, count, r.dtype, r.postscale_factor, divisor);
    };
  }

  if (window_bytes == 0 || lone_in_place) {
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
    if (complete && lone) {
      // Chunk by chunk: the input copied or scaled into the output where
      // needed, reduced, then finished while still in cache. Each chunk is
      // what a joined rank's staged window is (below), with the same
      // choice of call, and an empty tensor still makes one (empty) call.
      const TensorView& in = items[0].entry->input;
      char* const out = static_cast<char*>(in_place[0].data);
      const bool copy_in = in.data != in_place[0].data || r.prescale_factor != 1.0;
      int64_t at = 0;
      do {
        const int64_t n = std::min(lone_chunk, total - at);
        char* const piece = out + at * static_cast<int64_t>(element);
        if (copy_in) {
          ScaleCopy(static_cast<const char*>(in.data) + at * static_cast<int64_t>(element), piece, n, r.dtype,
                    r.prescale_factor);
        }
        bool finished = false;
        ACCORD_RETURN_IF_ERROR(ReduceWindow(ctx, piece, n, r.dtype, op, finish, &finished));
        if (finish && !finished) finish(piece, n);
        at += n;
      } while (at < total);
      return Status::OK();
    }
    if (complete && ctx.backend->AllreducesPartsInPlace(total, r.dtype)) {
      // Scaling costs a pass only when a factor is not 1 (the copy into a
      // separate output is needed anyway). The backend applies the finish
      // itself, each piece as its reduction completes (the ring: while the
      // piece is in cache).
      for (size_t i = 0; i < items.size(); ++i) {
        const TensorView& in = items[i].entry->input;
        if (in.data != in_place[i].data || r.prescale_factor != 1.0) {
          ScaleCopy(in.data, in_place[i].data, in_place[i].count, r.dtype, r.prescale_factor);
        }
      }
      return ctx.backend->AllreduceParts(in_place, r.dtype, op, finish);
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
  // A lone tensor (here: on a rank that has joined) goes in windows of its
  // chunk, as the other ranks reduce it in place.
  OpContext windows = ctx;
  if (lone && window_bytes != 0 && ctx.lone_in_place) {
    windows.staging_window_bytes = lone_chunk * static_cast<int64_t>(element);
  }
  return RunStaged(windows, parts, element, copy_in, copy_out, [&](char* buffer, int64_t n) {
    return ReduceWindow(ctx, buffer, n, r.dtype, op, finish, &finished_inside);
  });
}

}  // namespace accord
