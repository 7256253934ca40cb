#include "ops/collective_ops.h"
#include "ops/layout.h"

namespace accord {

// One tensor per batch (alltoall is never fused): the backend sends from
// the input and receives straight into the output, sized by the agreed
// splits.
Status RunAlltoall(const OpContext& ctx, const OpItem& item) {
  TensorEntry* e = item.entry;
  AlltoallCounts counts = CountAlltoall(*item.response, ctx.rank, ctx.size);
  TensorView out = AllocateOutput(item, WithRows(e->input.shape, counts.rows));
  ACCORD_RETURN_IF_ERROR(ctx.backend->Alltoallv(e->input.data, counts.send, out.data, counts.recv, counts.largest_total,
                                                item.response->dtype));
  e->handle->SetOutput(e->part, out);
  e->handle->SetReceivedSplits(std::move(counts.received_rows));
  return Status::OK();
}

}  // namespace accord
