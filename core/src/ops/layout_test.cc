// Tests for the fused layouts (ops/layout.h) that the CPU and the device ops
// share: counts per rank, the order of the pieces and their offsets, worked
// out by hand for small uneven batches.
#include <catch2/catch.hpp>

#include <vector>

#include "ops/layout.h"

namespace accord {
namespace {

Response Gathered(Shape shape, std::vector<int64_t> rank_rows) {
  Response r;
  r.type = OpType::kAllgather;
  r.shape = std::move(shape);
  r.rank_rows = std::move(rank_rows);
  return r;
}

Response Scattered(Shape shape) {
  Response r;
  r.type = OpType::kReducescatter;
  r.shape = std::move(shape);
  return r;
}

void CheckPiece(const LayoutPiece& piece, size_t item, int rank, int64_t offset, int64_t count) {
  INFO("piece of item " << piece.item << ", rank " << piece.rank);
  CHECK(piece.item == item);
  CHECK(piece.rank == rank);
  CHECK(piece.offset == offset);
  CHECK(piece.count == count);
}

TEST_CASE("LayOutAllgather is rank-major with each rank's rows placed after the ranks before it") {
  // Tensor 0: rows of 2 elements, ranks hold 1, 0, 3 rows. Tensor 1: rows
  // of 3 elements, ranks hold 2, 1, 0 rows.
  const Response a = Gathered({1, 2}, {1, 0, 3});
  const Response b = Gathered({2, 3}, {2, 1, 0});
  const std::vector<OpItem> items{{&a, nullptr}, {&b, nullptr}};
  const AllgatherLayout layout = LayOutAllgather(items, 3);
  CHECK(layout.output_shapes == std::vector<Shape>{{4, 2}, {3, 3}});
  CHECK(layout.counts == std::vector<int64_t>{2 + 6, 0 + 3, 6 + 0});
  CHECK(layout.total == 17);
  CHECK(layout.Start(0) == 0);
  CHECK(layout.Start(1) == 8);
  CHECK(layout.Start(2) == 11);
  REQUIRE(layout.pieces.size() == 6);
  CheckPiece(layout.pieces[0], 0, 0, 0, 2);
  CheckPiece(layout.pieces[1], 1, 0, 0, 6);
  CheckPiece(layout.pieces[2], 0, 1, 2, 0);
  CheckPiece(layout.pieces[3], 1, 1, 6, 3);
  CheckPiece(layout.pieces[4], 0, 2, 2, 6);
  CheckPiece(layout.pieces[5], 1, 2, 9, 0);
}

TEST_CASE("Reducescatter splits rows evenly, the first n % size ranks getting one more") {
  CHECK(ReducescatterRows(7, 0, 3) == 3);
  CHECK(ReducescatterRows(7, 1, 3) == 2);
  CHECK(ReducescatterRows(7, 2, 3) == 2);
  CHECK(ReducescatterFirstRow(7, 0, 3) == 0);
  CHECK(ReducescatterFirstRow(7, 1, 3) == 3);
  CHECK(ReducescatterFirstRow(7, 2, 3) == 5);
  CHECK(ReducescatterRows(2, 2, 3) == 0);
  CHECK(ReducescatterFirstRow(2, 2, 3) == 2);
}

TEST_CASE("LayOutReducescatter sends rank 0's rows of every tensor, then rank 1's") {
  // Tensor 0: 5 rows of 2 (ranks keep 3 and 2 rows). Tensor 1: 2 rows of 4.
  const Response a = Scattered({5, 2});
  const Response b = Scattered({2, 4});
  const std::vector<OpItem> items{{&a, nullptr}, {&b, nullptr}};
  const ReducescatterLayout on_rank1 = LayOutReducescatter(items, 1, 2);
  CHECK(on_rank1.output_shapes == std::vector<Shape>{{2, 2}, {1, 4}});
  CHECK(on_rank1.counts == std::vector<int64_t>{6 + 4, 4 + 4});
  CHECK(on_rank1.total == 18);
  REQUIRE(on_rank1.send.size() == 4);
  CheckPiece(on_rank1.send[0], 0, 0, 0, 6);
  CheckPiece(on_rank1.send[1], 1, 0, 0, 4);
  CheckPiece(on_rank1.send[2], 0, 1, 6, 4);
  CheckPiece(on_rank1.send[3], 1, 1, 4, 4);
  const ReducescatterLayout on_rank0 = LayOutReducescatter(items, 0, 2);
  CHECK(on_rank0.output_shapes == std::vector<Shape>{{3, 2}, {1, 4}});
  CHECK(on_rank0.counts == on_rank1.counts);
}

TEST_CASE("CountAlltoall reads this rank's row and column of the agreed splits") {
  // 2 ranks, rows of 3 elements: rank 0 sends 1 row to itself and 2 to
  // rank 1; rank 1 sends 4 to rank 0 and none to itself.
  Response r;
  r.type = OpType::kAlltoall;
  r.shape = {3, 3};
  r.splits = {1, 2, 4, 0};
  const AlltoallCounts c = CountAlltoall(r, 0, 2);
  CHECK(c.send == std::vector<int64_t>{3, 6});
  CHECK(c.received_rows == std::vector<int64_t>{1, 4});
  CHECK(c.recv == std::vector<int64_t>{3, 12});
  CHECK(c.rows == 5);
  CHECK(c.largest_total == 5 * 3);  // rank 0 receives 5 rows, the most of any
}

}  // namespace
}  // namespace accord
