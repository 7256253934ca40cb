// Staging: running a collective over a batch of tensors through the fusion
// buffer one window at a time.
//
// The batch is seen as the concatenation of its tensors. For each window of
// at most ctx.staging_window_bytes (whole elements, at least one), the
// window's pieces of the inputs are copied into the buffer, the collective
// runs on the buffer, and the pieces are copied out. A window may end inside
// a tensor. Every rank cuts the same windows (the window size is checked
// equal at Init, the shapes are agreed), so the ranks' calls match. With
// staging_window_bytes 0 the whole batch is one window. See
// docs/decisions.md, "Allreduces, broadcasts and allgathers are staged".
// Allgather cuts its windows per rank with the same cursor
// (ops/allgather_op.cc).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "ops/collective_ops.h"

namespace accord {

// One tensor of a staged batch: where its input is and where its result
// goes. Either may be nullptr (no input: the copy-in callback decides what
// the window holds; no output: nothing is written back).
struct StagedPart {
  const char* in;
  char* out;
  int64_t count;  // elements
};

// Walks the concatenation of the parts: Next(n, fn) calls
// fn(part, first element in the part, elements, offset in the window) for
// each piece of the next n elements.
class StagingCursor {
 public:
  explicit StagingCursor(const std::vector<StagedPart>& parts) : parts_(parts) {}

  template <typename Fn>
  void Next(int64_t n, Fn&& fn) {
    for (int64_t done = 0; done < n;) {
      const StagedPart& part = parts_[index_];
      const int64_t take = std::min(part.count - at_, n - done);
      if (take > 0) fn(part, at_, take, done);
      done += take;
      at_ += take;
      if (at_ == part.count) {
        ++index_;
        at_ = 0;
      }
    }
  }

 private:
  const std::vector<StagedPart>& parts_;
  size_t index_ = 0;
  int64_t at_ = 0;
};

// Runs `collective(buffer, n)` window by window. `in(part, at, n, dst)`
// copies a piece into the buffer, `out(part, at, n, src)` copies it back.
// A batch of more than one tensor marks the timeline's phases: PACK is the
// first window's copy in, COLLECTIVE lasts to the end of the last window's
// call, UNPACK is the last window's copy out. A batch of empty tensors
// still makes one (empty) call on every rank.
template <typename In, typename Out, typename Collective>
Status RunStaged(const OpContext& ctx, const std::vector<StagedPart>& parts, size_t element, In&& in, Out&& out,
                 Collective&& collective) {
  int64_t total = 0;
  for (const StagedPart& part : parts) total += part.count;
  const int64_t window = ctx.staging_window_bytes == 0
                             ? total
                             : std::max<int64_t>(1, ctx.staging_window_bytes / static_cast<int64_t>(element));
  ACCORD_ASSIGN_OR_RETURN(char* buffer, BufferFor(ctx, static_cast<size_t>(std::min(total, window)) * element));
  const bool fused = parts.size() > 1;
  StagingCursor packing(parts);
  StagingCursor unpacking(parts);
  int64_t done = 0;
  do {
    const int64_t n = std::min(window, total - done);
    packing.Next(n, [&](const StagedPart& part, int64_t at, int64_t count, int64_t offset) {
      in(part, at, count, buffer + offset * element);
    });
    if (fused && done == 0) MarkPacked(ctx.phases);
    ACCORD_RETURN_IF_ERROR(collective(buffer, n));
    if (fused) MarkExchanged(ctx.phases);
    unpacking.Next(n, [&](const StagedPart& part, int64_t at, int64_t count, int64_t offset) {
      out(part, at, count, buffer + offset * element);
    });
    done += n;
  } while (done < total);
  return Status::OK();
}

}  // namespace accord
