// RingAllreduce (core/src/backends/mpi/ring_allreduce.h) called directly,
// below the runtime: every dtype x op the MPI backend reduces, at counts
// around the segment sizes (0, fewer elements than ranks, remainders), with
// chunks of 1, 3 and 1000 elements and windows of 1 and every chunk (and a
// different window on every rank), checked against a reference every rank
// computes from every rank's seeded input; every rank must end with the same
// bits. The same over a buffer given as parts, cut differently on every rank
// (rank 0 passes one buffer): the messages must match whatever the cut; and
// with a finish (an Average's division), applied to each element once. The
// ring's halves (RingReduceScatter, RingAllgather) likewise. And MpiBackend
// across hosts (its across_hosts flag) takes the ring for a buffer of
// kRingMinBytes and more, and reduces several buffers in place then only;
// its allreduces in a row (timed, each pacing the next one's window) stay
// right.
#include <catch2/catch.hpp>

#include <mpi.h>

#include <cstring>
#include <string>
#include <vector>

#include "backends/mpi/mpi_backend.h"
#include "backends/mpi/mpi_types.h"
#include "backends/mpi/ring_allreduce.h"
#include "ops/collective_ops.h"
#include "test_util.h"

namespace {

using accord::DataType;
using accord::ReduceOp;
using namespace accord_test;

[[maybe_unused]] const bool kNoRuntime = RunWithoutRuntime();

// A window no ring here has as many chunks as: every chunk of the first
// step in flight at once.
constexpr int kEveryChunk = 1 << 30;
constexpr int64_t kRingChunkFloats = accord::kRingChunkBytes / 4;

// An MpiBackend on a duplicate of MPI_COMM_WORLD that errors return from,
// as for ranks on several hosts (large allreduces take the ring).
accord::MpiBackend BackendAcrossHosts(const accord::MpiTypes* types) {
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  return accord::MpiBackend(accord::MpiComm(comm), types, 2147483647, /*across_hosts=*/true);
}

ValueKind KindFor(ReduceOp op) { return op == ReduceOp::kProduct ? ValueKind::kProduct : ValueKind::kSmall; }

std::unique_ptr<accord::MpiTypes> MakeTypes() {
  auto types = accord::MpiTypes::Create();
  INFO(types.status().ToString());
  REQUIRE(types.ok());
  return std::move(types).value();
}

// The bytes of `data` are the same on every rank.
void CheckSameBitsEverywhere(const std::string& key, const void* data, size_t bytes) {
  std::vector<unsigned char> root(static_cast<const unsigned char*>(data),
                                  static_cast<const unsigned char*>(data) + bytes);
  MPI_Bcast(root.data(), static_cast<int>(bytes), MPI_BYTE, 0, MPI_COMM_WORLD);
  INFO("rank " << Rank() << ": " << key);
  // An empty tensor's data may be null, which memcmp must not be given even
  // for 0 bytes.
  CHECK((bytes == 0 || std::memcmp(root.data(), data, bytes) == 0));
}

TEST_CASE("ring allreduce: every dtype x op x count x chunk size") {
  auto types = MakeTypes();
  std::vector<char> scratch;
  for (DataType dtype : AllDataTypes()) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct}) {
      for (int64_t n : {0, 1, 2, 3, 5, 8, 31, 1000, 4099}) {
        for (int64_t chunk : {1, 3, 1000}) {
          if (chunk == 1 && n > 100) continue;  // enough messages already
          // Window 0 stands for 1 + rank: a different window on every rank.
          for (int window : {1, 0, kEveryChunk}) {
            // One chunk per segment at most, or enough chunks already.
            if ((chunk == 1000 || n > 1000) && window != kEveryChunk) continue;
            const std::string key = std::string("ring.") + accord::DataTypeName(dtype) + "." +
                                    accord::ReduceOpName(op) + "." + std::to_string(n) + "." + std::to_string(chunk) +
                                    ".w" + std::to_string(window);
            TestTensor t(dtype, {n}, RankValues(key, Rank(), dtype, n, KindFor(op)));
            const accord::Status status =
                accord::RingAllreduce(MPI_COMM_WORLD, t.view().data, n, types->Datatype(dtype), types->Op(op, dtype),
                                      accord::DataTypeSize(dtype), chunk, window == 0 ? 1 + Rank() : window, scratch);
            INFO("rank " << Rank() << ": " << key << ": " << status.ToString());
            CHECK(status.ok());
            ExpectValues(key, t.view(), dtype, {n},
                         ReferenceAllreduce(key, AllRanks(), dtype, n, KindFor(op), ReduceSpec{op}));
            CheckSameBitsEverywhere(key, t.view().data, static_cast<size_t>(n) * accord::DataTypeSize(dtype));
          }
        }
      }
    }
  }
}

// The ring's two halves on their own (the hierarchical allreduce's host
// steps): after RingReduceScatter the rank's segment (RingOwnedSegment) holds
// the whole reduction, the segments of all ranks tile the buffer, and
// RingAllgather then leaves every rank with the allreduce, the same bits
// everywhere. The other segments hold partial reductions in between, so an
// allgather that took any segment from a rank other than its owner would
// show in the sums.
TEST_CASE("ring reduce-scatter, then allgather: every dtype x op x count x chunk size") {
  auto types = MakeTypes();
  std::vector<char> scratch;
  for (DataType dtype : {DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16, DataType::kInt64}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kProduct}) {
      for (int64_t n : {0, 1, 2, 3, 5, 31, 1000, 4099}) {
        for (int64_t chunk : {1, 3, 1000}) {
          if ((chunk == 1 && n > 31) || (chunk == 3 && n > 1000)) continue;
          for (int window : {1, 0}) {  // 0: a different window on every rank
            const std::string key = std::string("ring_halves.") + accord::DataTypeName(dtype) + "." +
                                    accord::ReduceOpName(op) + "." + std::to_string(n) + "." + std::to_string(chunk) +
                                    ".w" + std::to_string(window);
            const size_t element = accord::DataTypeSize(dtype);
            TestTensor t(dtype, {n}, RankValues(key, Rank(), dtype, n, KindFor(op)));
            const std::vector<double> expected =
                ReferenceAllreduce(key, AllRanks(), dtype, n, KindFor(op), ReduceSpec{op});
            const int w = window == 0 ? 1 + Rank() : window;
            accord::Status status = accord::RingReduceScatter(MPI_COMM_WORLD, t.view().data, n, types->Datatype(dtype),
                                                              types->Op(op, dtype), element, chunk, w, scratch);
            INFO("rank " << Rank() << ": " << key << ": " << status.ToString());
            REQUIRE(status.ok());
            const accord::RingSegment mine = accord::RingOwnedSegment(n, Rank(), Size());
            // The segments of all ranks, in rank order, tile [0, n).
            int64_t at = 0;
            for (int r = 0; r < Size(); ++r) {
              const int owner = (r + Size() - 1) % Size();  // owns segment r
              const accord::RingSegment s = accord::RingOwnedSegment(n, owner, Size());
              CHECK(s.first == at);
              at += s.count;
            }
            CHECK(at == n);
            accord::TensorView segment = t.view();
            segment.data = static_cast<char*>(segment.data) + mine.first * static_cast<int64_t>(element);
            segment.shape = {mine.count};
            ExpectValuesFn(key + ".segment", segment, dtype, {mine.count},
                           [&](int64_t i) { return expected[static_cast<size_t>(mine.first + i)]; });
            status = accord::RingAllgather(MPI_COMM_WORLD, t.view().data, n, types->Datatype(dtype), element, chunk, w);
            INFO(status.ToString());
            REQUIRE(status.ok());
            ExpectValues(key, t.view(), dtype, {n}, expected);
            CheckSameBitsEverywhere(key, t.view().data, static_cast<size_t>(n) * element);
          }
        }
      }
    }
  }
}

// Cuts [0, n) into parts at rank-dependent places: empty parts, parts of one
// element, parts shorter and longer than a chunk. Rank 0 keeps one part.
std::vector<int64_t> CutFor(int rank, int64_t n) {
  std::vector<int64_t> sizes;
  if (rank == 0) return {n};
  int64_t left = n;
  for (int64_t i = 0; left > 0; ++i) {
    const int64_t pattern[] = {0, 1, 2 + rank, 0, 7 * rank + 3, 1, 1000 + 17 * rank};
    const int64_t take = std::min(left, pattern[(i + rank) % 7]);
    sizes.push_back(take);
    left -= take;
  }
  sizes.push_back(0);
  return sizes;
}

// A copy of the start of `whole` (elements of `element` bytes) in parts of
// `sizes` elements, each its own allocation, and the way back.
struct CutCopy {
  std::vector<std::vector<char>> memory;
  std::vector<accord::BufferPart> parts;

  CutCopy(const void* whole, const std::vector<int64_t>& sizes, size_t element) : element_(element) {
    for (int64_t size : sizes) {
      memory.emplace_back(static_cast<size_t>(size) * element + 1);
      std::memcpy(memory.back().data(), static_cast<const char*>(whole) + total_ * element, size * element);
      parts.push_back({memory.back().data(), size});
      total_ += size;
    }
  }
  // Elements in all the parts.
  int64_t total() const { return total_; }
  // The parts, concatenated, into `whole`.
  void CopyBack(void* whole) const {
    int64_t at = 0;
    for (const accord::BufferPart& part : parts) {
      std::memcpy(static_cast<char*>(whole) + at * element_, part.data, part.count * element_);
      at += part.count;
    }
  }

 private:
  size_t element_;
  int64_t total_ = 0;
};

// Thousands of chunks through small windows: a rank receives chunk k of
// the first step and sends chunk k + window of it while chunk k goes on as
// the second step's, so messages of two steps with the same chunk index
// cross; they must never be taken for each other (their segments differ in
// length by an element, which a mix-up would show as a truncation or a
// wrong sum).
TEST_CASE("ring allreduce: many chunks through small windows") {
  auto types = MakeTypes();
  std::vector<char> scratch;
  // Small chunks, and chunks of the ring's own size (several fragments
  // each in Open MPI's transports, so they may complete out of order).
  for (auto [n, chunk] : {std::pair<int64_t, int64_t>{20011, 3}, {(int64_t{6} << 20) + 7, kRingChunkFloats}}) {
    for (int window : {2, 0}) {  // 0: a different window on every rank
      const std::string key = "ring_window." + std::to_string(n) + ".w" + std::to_string(window);
      TestTensor t(DataType::kFloat32, {n}, RankValues(key, Rank(), DataType::kFloat32, n, ValueKind::kSmall));
      const accord::Status status = accord::RingAllreduce(
          MPI_COMM_WORLD, t.view().data, n, types->Datatype(DataType::kFloat32),
          types->Op(ReduceOp::kSum, DataType::kFloat32), 4, chunk, window == 0 ? 1 + 2 * Rank() : window, scratch);
      INFO("rank " << Rank() << ": " << key << ": " << status.ToString());
      REQUIRE(status.ok());
      ExpectValues(
          key, t.view(), DataType::kFloat32, {n},
          ReferenceAllreduce(key, AllRanks(), DataType::kFloat32, n, ValueKind::kSmall, ReduceSpec{ReduceOp::kSum}));
      CheckSameBitsEverywhere(key, t.view().data, static_cast<size_t>(n) * 4);
    }
  }
}

TEST_CASE("ring allreduce over parts cut differently on every rank") {
  auto types = MakeTypes();
  std::vector<char> scratch;
  for (DataType dtype : {DataType::kFloat32, DataType::kFloat16, DataType::kInt64, DataType::kUInt8}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
      for (int64_t n : {1, 5, 31, 4099}) {
        for (int64_t chunk : {3, 64, 1000}) {
          const std::string key = std::string("ring_parts.") + accord::DataTypeName(dtype) + "." +
                                  accord::ReduceOpName(op) + "." + std::to_string(n) + "." + std::to_string(chunk);
          const std::vector<double> values = RankValues(key, Rank(), dtype, n, KindFor(op));
          TestTensor whole(dtype, {n}, values);
          const size_t element = accord::DataTypeSize(dtype);
          CutCopy cut(whole.view().data, CutFor(Rank(), n), element);
          REQUIRE(cut.total() == n);
          const accord::Status status =
              accord::RingAllreduce(MPI_COMM_WORLD, cut.parts, types->Datatype(dtype), types->Op(op, dtype), element,
                                    chunk, /*window_chunks=*/1 + Rank(), scratch);
          INFO("rank " << Rank() << ": " << key << ": " << status.ToString());
          CHECK(status.ok());
          cut.CopyBack(whole.view().data);
          ExpectValues(key, whole.view(), dtype, {n},
                       ReferenceAllreduce(key, AllRanks(), dtype, n, KindFor(op), ReduceSpec{op}));
          CheckSameBitsEverywhere(key, whole.view().data, static_cast<size_t>(n) * element);
        }
      }
    }
  }
}

// The finish (an Average's division and a postscale, as the allreduce op
// passes it) is applied to every element once, on the rank that owns its
// segment, before the allgather: every rank ends with the finished values,
// the same bits everywhere. Counts around the segment sizes, parts cut
// differently on every rank, a different window on every rank.
TEST_CASE("ring allreduce over parts finishes each element once, before the allgather") {
  auto types = MakeTypes();
  std::vector<char> scratch;
  constexpr double kPostscale = 2.5;  // not a multiple of any size run
  for (DataType dtype : {DataType::kFloat32, DataType::kFloat16, DataType::kInt64}) {
    for (int64_t n : {0, 1, 5, 31, 4099}) {
      for (int64_t chunk : {3, 1000}) {
        const std::string key = std::string("ring_finish.") + accord::DataTypeName(dtype) + "." + std::to_string(n) +
                                "." + std::to_string(chunk);
        const size_t element = accord::DataTypeSize(dtype);
        TestTensor whole(dtype, {n}, RankValues(key, Rank(), dtype, n));
        CutCopy cut(whole.view().data, CutFor(Rank(), n), element);
        REQUIRE(cut.total() == n);
        int64_t finished = 0;
        const accord::AllreduceFinish finish = [&](void* data, int64_t count) {
          finished += count;
          accord::ScaleDivideCopy(data, data, count, dtype, kPostscale, Size());
        };
        const accord::Status status =
            accord::RingAllreduce(MPI_COMM_WORLD, cut.parts, types->Datatype(dtype), types->Op(ReduceOp::kSum, dtype),
                                  element, chunk, /*window_chunks=*/1 + Rank(), scratch, finish);
        INFO("rank " << Rank() << ": " << key << ": " << status.ToString());
        CHECK(status.ok());
        // The ranks' segments tile the buffer.
        int64_t everywhere = 0;
        MPI_Allreduce(&finished, &everywhere, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
        CHECK(everywhere == n);
        cut.CopyBack(whole.view().data);
        ExpectValues(key, whole.view(), dtype, {n},
                     ReferenceAllreduce(key, AllRanks(), dtype, n, ValueKind::kSmall,
                                        ReduceSpec{ReduceOp::kAverage, 1.0, kPostscale}),
                     Tolerance(dtype));
        CheckSameBitsEverywhere(key, whole.view().data, static_cast<size_t>(n) * element);
      }
    }
  }
}

TEST_CASE("MpiBackend: several buffers in place only across hosts, for an allreduce that takes the ring") {
  auto types = MakeTypes();
  const int64_t floats = accord::kRingMinBytes / 4;
  accord::MpiBackend flat(accord::MpiComm(MPI_COMM_WORLD), types.get(), 2147483647, /*across_hosts=*/false);
  CHECK_FALSE(flat.FusesLargeInPlace());
  CHECK_FALSE(flat.AllreducesPartsInPlace(floats * 100, DataType::kFloat32));
  accord::MpiBackend small_calls(accord::MpiComm(MPI_COMM_WORLD), types.get(), floats, /*across_hosts=*/true);
  CHECK(small_calls.AllreducesPartsInPlace(floats, DataType::kFloat32));
  CHECK_FALSE(small_calls.AllreducesPartsInPlace(floats + 1, DataType::kFloat32));  // two MPI calls
  accord::MpiBackend backend = BackendAcrossHosts(types.get());
  CHECK(backend.FusesLargeInPlace());
  CHECK(backend.AllreducesPartsInPlace(floats, DataType::kFloat32));
  CHECK_FALSE(backend.AllreducesPartsInPlace(floats - 1, DataType::kFloat32));
  CHECK(backend.AllreducesPartsInPlace(floats * 2, DataType::kFloat16));
  std::vector<float> a(10), b(10);
  const accord::Status refused =
      backend.AllreduceParts({{a.data(), 10}, {b.data(), 10}}, DataType::kFloat32, ReduceOp::kSum, {});
  CHECK(refused.code() == accord::StatusCode::kInternal);
  CHECK_THAT(refused.message(), Catch::Contains("not one the MPI backend runs in place"));

  // Three tensors of a fused batch, each in its own memory: rank 0 passes
  // them as one buffer (as a rank that packs), the others as parts.
  const int64_t n = floats + 4097;
  const std::string key = "backend_parts";
  const std::vector<double> values = RankValues(key, Rank(), DataType::kFloat32, n);
  TestTensor whole(DataType::kFloat32, {n}, values);
  CutCopy cut(whole.view().data, {1000, n - 1000 - 3, 3}, sizeof(float));
  const accord::Status status = Rank() == 0
                                    ? backend.Allreduce(whole.view().data, n, DataType::kFloat32, ReduceOp::kSum)
                                    : backend.AllreduceParts(cut.parts, DataType::kFloat32, ReduceOp::kSum, {});
  INFO("rank " << Rank() << ": " << status.ToString());
  REQUIRE(status.ok());
  if (Rank() != 0) cut.CopyBack(whole.view().data);
  ExpectValues(key, whole.view(), DataType::kFloat32, {n},
               ReferenceAllreduce(key, AllRanks(), DataType::kFloat32, n, ValueKind::kSmall, ReduceSpec{}));
  CheckSameBitsEverywhere(key, whole.view().data, static_cast<size_t>(n) * 4);
}

// `backend`'s sum of every rank's seeded values for `key`, `n` elements of
// `dtype`: right, and the same bits on every rank.
void CheckBackendSum(accord::MpiBackend& backend, const std::string& key, DataType dtype, int64_t n) {
  TestTensor t(dtype, {n}, RankValues(key, Rank(), dtype, n));
  const accord::Status status = backend.Allreduce(t.view().data, n, dtype, ReduceOp::kSum);
  INFO("rank " << Rank() << ": " << key << ": " << status.ToString());
  CHECK(status.ok());
  ExpectValues(key, t.view(), dtype, {n},
               ReferenceAllreduce(key, AllRanks(), dtype, n, ValueKind::kSmall, ReduceSpec{}));
  CheckSameBitsEverywhere(key, t.view().data, static_cast<size_t>(n) * accord::DataTypeSize(dtype));
}

TEST_CASE("MpiBackend across hosts: a large allreduce goes round the ring, right") {
  auto types = MakeTypes();
  accord::MpiBackend backend = BackendAcrossHosts(types.get());
  // Just over the threshold, an odd count: uneven segments, several chunks.
  const int64_t n = accord::kRingMinBytes / 4 + 12345;
  for (DataType dtype : {DataType::kFloat32, DataType::kFloat16, DataType::kInt64}) {
    CheckBackendSum(backend, std::string("backend_ring.") + accord::DataTypeName(dtype), dtype, n);
  }
}

TEST_CASE("MpiBackend across hosts: allreduces in a row, each with the window the ones before paced") {
  auto types = MakeTypes();
  accord::MpiBackend backend = BackendAcrossHosts(types.get());
  // Large enough that every rank sends kRingPacedBytes or more at 2 ranks
  // and up, so each allreduce is timed and sets the next one's window.
  const int64_t n = accord::kRingPacedBytes / 4 * 2 + 777;
  for (int i = 0; i < 4; ++i) {
    CheckBackendSum(backend, "backend_ring_paced." + std::to_string(i), DataType::kFloat32, n);
  }
}

}  // namespace
