#include <algorithm>
#include <cstring>

#include "ops/collective_ops.h"
#include "ops/layout.h"
#include "ops/staging.h"

namespace accord {

namespace {

// Allgather through the fusion buffer a window at a time (ops/staging.h).
// Rank q's block is its rows of each tensor, in tensor order; each call
// gathers the next piece of at most `per_rank` elements of every rank's
// block (the window divided among the ranks; ranks whose block is used up
// send nothing), and every piece is copied to its place in the outputs.
// With staging off (window 0) the pieces are the whole blocks: one call.
Status RunAllgatherStaged(const OpContext& ctx, const std::vector<OpItem>& items,
                          const std::vector<TensorView>& outputs, const AllgatherLayout& layout, DataType dtype) {
  const std::vector<int64_t>& counts = layout.counts;
  const size_t element = DataTypeSize(dtype);
  const int64_t longest = *std::max_element(counts.begin(), counts.end());
  const int64_t per_rank = std::max<int64_t>(
      1, ctx.staging_window_bytes == 0 ? longest : ctx.staging_window_bytes / static_cast<int64_t>(element) / ctx.size);
  // blocks[q]: where rank q's rows come from (this rank's inputs only) and
  // where they go in each output (after the rows of the ranks before q).
  std::vector<std::vector<StagedPart>> blocks(ctx.size);
  for (const LayoutPiece& piece : layout.pieces) {
    const char* in = piece.rank == ctx.rank ? static_cast<const char*>(items[piece.item].entry->input.data) : nullptr;
    blocks[piece.rank].push_back(
        {in, static_cast<char*>(outputs[piece.item].data) + piece.offset * element, piece.count});
  }
  int64_t window = 0;
  for (const int64_t count : counts) window += std::min(count, per_rank);
  ACCORD_ASSIGN_OR_RETURN(char* buffer, BufferFor(ctx, static_cast<size_t>(window) * element));
  StagingCursor packing(blocks[ctx.rank]);
  std::vector<StagingCursor> unpacking;
  unpacking.reserve(ctx.size);
  for (const auto& block : blocks) unpacking.emplace_back(block);
  const bool fused = items.size() > 1;
  std::vector<int64_t> pieces(ctx.size);
  int64_t done = 0;
  do {  // at least once: a batch of empty tensors still makes its (empty) call on every rank
    int64_t mine = 0, at = 0;
    for (int q = 0; q < ctx.size; ++q) {
      pieces[q] = std::clamp<int64_t>(counts[q] - done, 0, per_rank);
      if (q == ctx.rank) mine = at;
      at += pieces[q];
    }
    packing.Next(pieces[ctx.rank], [&](const StagedPart& part, int64_t from, int64_t n, int64_t offset) {
      std::memcpy(buffer + (mine + offset) * element, part.in + from * element, n * element);
    });
    if (fused && done == 0) MarkPacked(ctx.phases);
    ACCORD_RETURN_IF_ERROR(ctx.backend->Allgatherv(buffer, pieces, dtype));
    if (fused) MarkExchanged(ctx.phases);
    at = 0;
    for (int q = 0; q < ctx.size; ++q) {
      unpacking[q].Next(pieces[q], [&](const StagedPart& part, int64_t from, int64_t n, int64_t offset) {
        std::memcpy(part.out + from * element, buffer + (at + offset) * element, n * element);
      });
      at += pieces[q];
    }
    done += per_rank;
  } while (done < longest);
  return Status::OK();
}

}  // namespace

Status RunAllgather(const OpContext& ctx, const std::vector<OpItem>& items) {
  const Response& r0 = *items.front().response;
  const size_t element = DataTypeSize(r0.dtype);
  const size_t k_count = items.size();
  const AllgatherLayout layout = LayOutAllgather(items, ctx.size);
  std::vector<TensorView> outputs(k_count);
  for (size_t k = 0; k < k_count; ++k) outputs[k] = AllocateOutput(items[k], layout.output_shapes[k]);
  if (k_count == 1 && ctx.staging_window_bytes == 0) {
    // One tensor, staging off: gather straight into the output.
    char* out = static_cast<char*>(outputs[0].data);
    const TensorView& in = items[0].entry->input;
    if (in.size_bytes()) std::memmove(out + layout.Start(ctx.rank) * element, in.data, in.size_bytes());
    ACCORD_RETURN_IF_ERROR(ctx.backend->Allgatherv(out, layout.counts, r0.dtype));
  } else {
    ACCORD_RETURN_IF_ERROR(RunAllgatherStaged(ctx, items, outputs, layout, r0.dtype));
  }
  for (size_t k = 0; k < k_count; ++k) items[k].entry->handle->SetOutput(items[k].entry->part, outputs[k]);
  return Status::OK();
}

}  // namespace accord
