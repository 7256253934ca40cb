#include <cstring>

#include "ops/collective_ops.h"
#include "ops/staging.h"

namespace accord {

// Broadcast is in place: the root's tensors hold the data, the others'
// receive it. With ctx.staging_window_bytes > 0 (the default on one host) it runs
// through the fusion buffer a window at a time (ops/staging.h): the root
// copies in, the others copy out. With 0, a lone tensor is broadcast in its
// own memory and a fused batch is packed whole.
Status RunBroadcast(const OpContext& ctx, const std::vector<OpItem>& items) {
  const Response& r = *items.front().response;
  const size_t element = DataTypeSize(r.dtype);
  if (items.size() == 1 && ctx.staging_window_bytes == 0) {
    TensorEntry* e = items.front().entry;
    return ctx.backend->Broadcast(e->output.data, e->output.num_elements(), r.dtype, r.root_rank);
  }
  const bool root = ctx.rank == r.root_rank;
  std::vector<StagedPart> parts;
  parts.reserve(items.size());
  for (const OpItem& item : items) {
    TensorEntry* e = item.entry;
    parts.push_back({root ? static_cast<const char*>(e->input.data) : nullptr,
                     root ? nullptr : static_cast<char*>(e->output.data), NumElements(item.response->shape)});
  }
  // On ranks other than the root the copy in does nothing (an empty PACK).
  auto copy_in = [&](const StagedPart& part, int64_t at, int64_t n, char* dst) {
    if (part.in) std::memcpy(dst, part.in + at * element, n * element);
  };
  auto copy_out = [&](const StagedPart& part, int64_t at, int64_t n, const char* src) {
    if (part.out) std::memcpy(part.out + at * element, src, n * element);
  };
  return RunStaged(ctx, parts, element, copy_in, copy_out,
                   [&](char* buffer, int64_t n) { return ctx.backend->Broadcast(buffer, n, r.dtype, r.root_rank); });
}

}  // namespace accord
