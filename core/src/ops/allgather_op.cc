#include <cstring>

#include "ops/collective_ops.h"

namespace accord {

namespace {

Shape WithRows(Shape shape, int64_t rows) {
  shape[0] = rows;
  return shape;
}

}  // namespace

Status RunAllgather(const OpContext& ctx, const std::vector<OpItem>& items) {
  const Response& r0 = *items.front().response;
  const size_t element = DataTypeSize(r0.dtype);
  const size_t k_count = items.size();
  std::vector<TensorView> outputs(k_count);
  for (size_t k = 0; k < k_count; ++k) {
    const Response& r = *items[k].response;
    int64_t rows = 0;
    for (int64_t n : r.rank_rows) rows += n;
    outputs[k] = AllocateOutput(items[k], WithRows(r.shape, rows));
  }
  // Rank-major layout: rank 0's tensors in order, then rank 1's, ...
  std::vector<int64_t> counts(ctx.size, 0);
  for (int rank = 0; rank < ctx.size; ++rank) {
    for (const auto& item : items) counts[rank] += item.response->rank_rows[rank] * item.response->RowElements();
  }
  int64_t total = 0, mine = 0;
  for (int rank = 0; rank < ctx.size; ++rank) {
    if (rank == ctx.rank) mine = total;
    total += counts[rank];
  }
  char* buffer;
  if (k_count == 1) {
    buffer = static_cast<char*>(outputs[0].data);  // gather straight into the output
  } else {
    ACCORD_ASSIGN_OR_RETURN(buffer, BufferFor(ctx, total * element));
  }
  int64_t offset = mine;
  for (const auto& item : items) {
    const TensorView& in = item.entry->input;
    if (in.size_bytes()) std::memmove(buffer + offset * element, in.data, in.size_bytes());
    offset += in.num_elements();
  }
  if (k_count > 1) MarkPacked(ctx);
  ACCORD_RETURN_IF_ERROR(ctx.backend->Allgatherv(buffer, counts, r0.dtype));
  if (k_count > 1) {
    MarkExchanged(ctx);
    std::vector<int64_t> out_offset(k_count, 0);
    offset = 0;
    for (int rank = 0; rank < ctx.size; ++rank) {
      for (size_t k = 0; k < k_count; ++k) {
        const int64_t n = items[k].response->rank_rows[rank] * items[k].response->RowElements();
        if (n) std::memcpy(static_cast<char*>(outputs[k].data) + out_offset[k] * element, buffer + offset * element, n * element);
        out_offset[k] += n;
        offset += n;
      }
    }
  }
  for (size_t k = 0; k < k_count; ++k) items[k].entry->handle->SetOutput(items[k].entry->part, outputs[k]);
  return Status::OK();
}

Status RunAlltoall(const OpContext& ctx, const OpItem& item) {
  const Response& r = *item.response;
  TensorEntry* e = item.entry;
  const int64_t row = r.RowElements();
  std::vector<int64_t> send(ctx.size), recv(ctx.size), received(ctx.size);
  int64_t rows = 0;
  for (int j = 0; j < ctx.size; ++j) {
    send[j] = r.splits[static_cast<size_t>(ctx.rank) * ctx.size + j] * row;
    received[j] = r.splits[static_cast<size_t>(j) * ctx.size + ctx.rank];
    recv[j] = received[j] * row;
    rows += received[j];
  }
  TensorView out = AllocateOutput(item, WithRows(e->input.shape, rows));
  ACCORD_RETURN_IF_ERROR(ctx.backend->Alltoallv(e->input.data, send, out.data, recv, r.dtype));
  e->handle->SetOutput(e->part, out);
  e->handle->SetReceivedSplits(std::move(received));
  return Status::OK();
}

}  // namespace accord
