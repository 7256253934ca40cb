#include <algorithm>
#include <cstring>

#include "common/dtype_kernels.h"
#include "ops/collective_ops.h"

namespace accord {
namespace {

// One tensor of the batch: where its input is (nullptr on a joined rank,
// which contributes zeros) and where its result goes (nullptr: nowhere).
struct Part {
  const char* in;
  char* out;
  int64_t count;  // elements
};

// Moves elements between the parts and the staging buffer, applying the
// scale factors in the same pass. Scale factors of 1 (the common case) make
// both directions plain copies.
struct Mover {
  DataType dtype;
  size_t element;
  double prescale;
  double postscale;
  int divisor;

  void In(const Part& part, int64_t at, int64_t n, char* dst) const {
    if (!part.in) {
      FillZero(dst, n, dtype);
    } else if (prescale == 1.0) {
      std::memcpy(dst, part.in + at * element, n * element);
    } else {
      ScaleCopy(part.in + at * element, dst, n, dtype, prescale);
    }
  }
  void Out(const Part& part, int64_t at, int64_t n, const char* src) const {
    if (!part.out) return;
    if (postscale == 1.0 && divisor == 1) {
      std::memcpy(part.out + at * element, src, n * element);
    } else {
      ScaleDivideCopy(src, part.out + at * element, n, dtype, postscale, divisor);
    }
  }
};

// Walks the concatenation of the parts a window at a time: Next(n, fn)
// calls fn(part, first element in the part, elements, offset in the window)
// for each piece of the next n elements.
class Cursor {
 public:
  explicit Cursor(const std::vector<Part>& parts) : parts_(parts) {}

  template <typename Fn>
  void Next(int64_t n, Fn&& fn) {
    for (int64_t done = 0; done < n;) {
      const Part& part = parts_[index_];
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
  const std::vector<Part>& parts_;
  size_t index_ = 0;
  int64_t at_ = 0;
};

}  // namespace

// With ctx.allreduce_chunk_bytes > 0 (the default) every allreduce, of one
// tensor or of a fused batch, goes through the fusion buffer one window of
// that many bytes at a time: copy the window's inputs in, reduce it, copy
// the results out. The buffer lies on transparent huge pages and stays in
// the cache, so the transport's single-copy path pins a page or two per
// window instead of every 4 KiB page of the tensor (docs/decisions.md,
// "Allreduces are staged"). With 0, a lone tensor is reduced in place and a
// fused batch is packed whole and reduced in one call.
Status RunAllreduce(const OpContext& ctx, const std::vector<OpItem>& items) {
  const Response& r = *items.front().response;
  const ReduceOp op = BackendOp(r.op);
  const Mover mover{r.dtype, DataTypeSize(r.dtype), r.prescale_factor, r.postscale_factor,
                    AverageDivisor(r.op, ctx.size)};
  TensorEntry* only = items.size() == 1 ? items.front().entry : nullptr;

  if (only && ctx.allreduce_chunk_bytes == 0) {
    // One tensor in place: scaling costs a pass only when a factor is not 1
    // (the copy into the output is needed anyway).
    const TensorView& in = only->input;
    void* out = only->output_is_input ? in.data : only->output.data;
    const int64_t n = in.num_elements();  // the output has the same layout (checked at enqueue)
    if (in.data != out || r.prescale_factor != 1.0) ScaleCopy(in.data, out, n, r.dtype, r.prescale_factor);
    ACCORD_RETURN_IF_ERROR(ctx.backend->Allreduce(out, n, r.dtype, op));
    if (r.postscale_factor != 1.0 || mover.divisor != 1) {
      ScaleDivideCopy(out, out, n, r.dtype, r.postscale_factor, mover.divisor);
    }
    return Status::OK();
  }

  std::vector<Part> parts;
  parts.reserve(items.size());
  int64_t total = 0;
  for (const OpItem& item : items) {
    const TensorEntry* e = item.entry;
    const int64_t count = NumElements(item.response->shape);
    parts.push_back({e ? static_cast<const char*>(e->input.data) : nullptr,
                     e ? static_cast<char*>(e->output_is_input ? e->input.data : e->output.data) : nullptr, count});
    total += count;
  }
  const int64_t window = ctx.allreduce_chunk_bytes == 0
                             ? total
                             : std::max<int64_t>(1, ctx.allreduce_chunk_bytes / static_cast<int64_t>(mover.element));
  ACCORD_ASSIGN_OR_RETURN(char* buffer, BufferFor(ctx, static_cast<size_t>(std::min(total, window)) * mover.element));
  // A fused batch's timeline shows PACK (the first window's inputs copied
  // in), COLLECTIVE (up to the last window's reduction) and UNPACK.
  const bool fused = items.size() > 1;
  Cursor packing(parts);
  Cursor unpacking(parts);
  int64_t done = 0;
  do {  // at least once: a batch of empty tensors still makes its (empty) call on every rank
    const int64_t n = std::min(window, total - done);
    packing.Next(n, [&](const Part& part, int64_t at, int64_t count, int64_t offset) {
      mover.In(part, at, count, buffer + offset * mover.element);
    });
    if (fused && done == 0) MarkPacked(ctx);
    ACCORD_RETURN_IF_ERROR(ctx.backend->Allreduce(buffer, n, r.dtype, op));
    if (fused) MarkExchanged(ctx);
    unpacking.Next(n, [&](const Part& part, int64_t at, int64_t count, int64_t offset) {
      mover.Out(part, at, count, buffer + offset * mover.element);
    });
    done += n;
  } while (done < total);
  return Status::OK();
}

}  // namespace accord
