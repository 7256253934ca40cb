#include "ops/layout.h"

#include <algorithm>

namespace accord {

Shape WithRows(Shape shape, int64_t rows) {
  shape[0] = rows;
  return shape;
}

int64_t ReducescatterRows(int64_t n, int rank, int size) { return n / size + (rank < n % size ? 1 : 0); }

int64_t ReducescatterFirstRow(int64_t n, int rank, int size) {
  return rank * (n / size) + std::min<int64_t>(rank, n % size);
}

int64_t AllgatherLayout::Start(int rank) const {
  int64_t start = 0;
  for (int q = 0; q < rank; ++q) start += counts[q];
  return start;
}

AllgatherLayout LayOutAllgather(const std::vector<OpItem>& items, int size) {
  AllgatherLayout layout;
  for (const OpItem& item : items) {
    int64_t rows = 0;
    for (const int64_t n : item.response->rank_rows) rows += n;
    layout.output_shapes.push_back(WithRows(item.response->shape, rows));
  }
  layout.counts.assign(size, 0);
  std::vector<int64_t> placed(items.size(), 0);  // elements of output k already assigned
  for (int q = 0; q < size; ++q) {
    for (size_t k = 0; k < items.size(); ++k) {
      const Response& r = *items[k].response;
      const int64_t n = r.rank_rows[q] * r.RowElements();
      layout.pieces.push_back({k, q, placed[k], n});
      placed[k] += n;
      layout.counts[q] += n;
      layout.total += n;
    }
  }
  return layout;
}

ReducescatterLayout LayOutReducescatter(const std::vector<OpItem>& items, int rank, int size) {
  ReducescatterLayout layout;
  layout.counts.assign(size, 0);
  for (const OpItem& item : items) {
    const Response& r = *item.response;
    layout.output_shapes.push_back(WithRows(r.shape, ReducescatterRows(r.shape[0], rank, size)));
    layout.total += NumElements(r.shape);
  }
  for (int q = 0; q < size; ++q) {
    for (size_t k = 0; k < items.size(); ++k) {
      const Response& r = *items[k].response;
      const int64_t row = r.RowElements();
      const int64_t n = ReducescatterRows(r.shape[0], q, size) * row;
      layout.send.push_back({k, q, ReducescatterFirstRow(r.shape[0], q, size) * row, n});
      layout.counts[q] += n;
    }
  }
  return layout;
}

AlltoallCounts CountAlltoall(const Response& r, int rank, int size) {
  const int64_t row = r.RowElements();
  AlltoallCounts c;
  c.send.resize(size);
  c.recv.resize(size);
  c.received_rows.resize(size);
  for (int j = 0; j < size; ++j) {
    c.send[j] = r.splits[static_cast<size_t>(rank) * size + j] * row;
    c.received_rows[j] = r.splits[static_cast<size_t>(j) * size + rank];
    c.recv[j] = c.received_rows[j] * row;
    c.rows += c.received_rows[j];
  }
  int64_t largest_rows = 0;
  for (int i = 0; i < size; ++i) {
    int64_t sent_by_i = 0, received_by_i = 0;
    for (int j = 0; j < size; ++j) {
      sent_by_i += r.splits[static_cast<size_t>(i) * size + j];
      received_by_i += r.splits[static_cast<size_t>(j) * size + i];
    }
    largest_rows = std::max({largest_rows, sent_by_i, received_by_i});
  }
  c.largest_total = largest_rows * row;
  return c;
}

}  // namespace accord
