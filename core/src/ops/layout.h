// Where each tensor's elements go in a fused allgather, reducescatter or
// alltoall: the per-rank counts a backend call takes and the pieces that
// packing and unpacking copy. The CPU ops (collective_ops.h) and the device
// ops (device_ops.h) both lay a batch out through these functions, so the
// two paths agree element for element. Pure functions of the agreed
// responses; any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "accord/tensor.h"
#include "ops/collective_ops.h"

namespace accord {

// `shape` with dim 0 replaced by `rows`.
Shape WithRows(Shape shape, int64_t rows);

// Reducescatter: the rows of dim 0 (of n) that `rank` keeps, an even split
// with the first (n % size) ranks getting one more, and the first of them.
int64_t ReducescatterRows(int64_t n, int rank, int size);
int64_t ReducescatterFirstRow(int64_t n, int rank, int size);

// One contiguous run of a fused layout: `count` elements of rank `rank`'s
// share of the batch's tensor `item`, `offset` elements into that tensor's
// memory (the output for an allgather, the input for a reducescatter).
struct LayoutPiece {
  size_t item = 0;
  int rank = 0;
  int64_t offset = 0;
  int64_t count = 0;
};

// Allgather, rank-major: rank 0's rows of every tensor in batch order, then
// rank 1's, and so on. `pieces` follow that order.
struct AllgatherLayout {
  std::vector<Shape> output_shapes;  // per tensor: every rank's rows
  std::vector<int64_t> counts;       // elements each rank contributes, all tensors
  std::vector<LayoutPiece> pieces;   // offsets into the tensors' outputs
  int64_t total = 0;                 // sum of counts
  // Where rank `rank`'s block starts, in elements.
  int64_t Start(int rank) const;
};
AllgatherLayout LayOutAllgather(const std::vector<OpItem>& items, int size);

// Reducescatter. The send area is rank-major, rank 0's rows of every tensor
// then rank 1's, as `send` lists them; this rank receives its own rows of
// every tensor, in batch order.
struct ReducescatterLayout {
  std::vector<Shape> output_shapes;  // per tensor: this rank's rows
  std::vector<int64_t> counts;       // elements each rank keeps, all tensors
  std::vector<LayoutPiece> send;     // offsets into the tensors' inputs
  int64_t total = 0;                 // elements of all the inputs
};
ReducescatterLayout LayOutReducescatter(const std::vector<OpItem>& items, int rank, int size);

// Alltoall: what this rank sends to and receives from each rank (elements),
// how many rows came from each, and the most elements any rank of the set
// sends or receives in all (from the agreed splits, so the same everywhere).
struct AlltoallCounts {
  std::vector<int64_t> send, recv, received_rows;
  int64_t rows = 0;  // rows this rank receives in all
  int64_t largest_total = 0;
};
AlltoallCounts CountAlltoall(const Response& r, int rank, int size);

}  // namespace accord
