#include <cstring>

#include "ops/collective_ops.h"

namespace accord {

Status RunBroadcast(const OpContext& ctx, const std::vector<OpItem>& items) {
  const Response& r = *items.front().response;
  const size_t element = DataTypeSize(r.dtype);
  if (items.size() == 1) {
    TensorEntry* e = items.front().entry;
    ACCORD_RETURN_IF_ERROR(ctx.backend->Broadcast(e->output.data, e->output.num_elements(), r.dtype, r.root_rank));
    return Status::OK();
  }
  int64_t total = 0;
  for (const auto& item : items) total += NumElements(item.response->shape);
  ACCORD_ASSIGN_OR_RETURN(char* buffer, BufferFor(ctx, total * element));
  const bool root = ctx.rank == r.root_rank;
  if (root) {
    int64_t offset = 0;
    for (const auto& item : items) {
      std::memcpy(buffer + offset, item.entry->input.data, item.entry->input.size_bytes());
      offset += item.entry->input.size_bytes();
    }
  }
  MarkPacked(ctx);  // on other ranks than the root, an empty PACK
  ACCORD_RETURN_IF_ERROR(ctx.backend->Broadcast(buffer, total, r.dtype, r.root_rank));
  MarkExchanged(ctx);
  int64_t offset = 0;
  for (const auto& item : items) {
    TensorEntry* e = item.entry;
    if (!root) std::memcpy(e->output.data, buffer + offset, e->output.size_bytes());
    offset += e->output.size_bytes();
  }
  return Status::OK();
}

}  // namespace accord
