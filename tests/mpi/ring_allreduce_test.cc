// RingAllreduce (core/src/backends/mpi/ring_allreduce.h) called directly,
// below the runtime: every dtype x op the MPI backend reduces, at counts
// around the segment sizes (0, fewer elements than ranks, remainders), with
// chunks of 1, 3 and 1000 elements, checked against a reference every rank
// computes from every rank's seeded input; every rank must end with the same
// bits. And MpiBackend across hosts (its across_hosts flag) takes the ring for
// a buffer of kRingMinBytes and more.
#include <catch2/catch.hpp>

#include <mpi.h>

#include <cstring>
#include <string>
#include <vector>

#include "backends/mpi/mpi_backend.h"
#include "backends/mpi/mpi_types.h"
#include "backends/mpi/ring_allreduce.h"
#include "test_util.h"

namespace {

using accord::DataType;
using accord::ReduceOp;
using namespace accord_test;

[[maybe_unused]] const bool kNoRuntime = RunWithoutRuntime();

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
          const std::string key = std::string("ring.") + accord::DataTypeName(dtype) + "." +
                                  accord::ReduceOpName(op) + "." + std::to_string(n) + "." + std::to_string(chunk);
          TestTensor t(dtype, {n}, RankValues(key, Rank(), dtype, n, KindFor(op)));
          const accord::Status status =
              accord::RingAllreduce(MPI_COMM_WORLD, t.view().data, n, types->Datatype(dtype), types->Op(op, dtype),
                                    accord::DataTypeSize(dtype), chunk, scratch);
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

TEST_CASE("MpiBackend across hosts: a large allreduce goes round the ring, right") {
  auto types = MakeTypes();
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  accord::MpiBackend backend(accord::MpiComm(comm), types.get(), 2147483647, /*across_hosts=*/true);
  // Just over the threshold, an odd count: uneven segments, several chunks.
  const int64_t n = accord::kRingMinBytes / 4 + 12345;
  for (DataType dtype : {DataType::kFloat32, DataType::kFloat16, DataType::kInt64}) {
    const std::string key = std::string("backend_ring.") + accord::DataTypeName(dtype);
    TestTensor t(dtype, {n}, RankValues(key, Rank(), dtype, n));
    const accord::Status status = backend.Allreduce(t.view().data, n, dtype, ReduceOp::kSum);
    INFO("rank " << Rank() << ": " << key << ": " << status.ToString());
    CHECK(status.ok());
    ExpectValues(key, t.view(), dtype, {n},
                 ReferenceAllreduce(key, AllRanks(), dtype, n, ValueKind::kSmall, ReduceSpec{}));
    CheckSameBitsEverywhere(key, t.view().data, static_cast<size_t>(n) * accord::DataTypeSize(dtype));
  }
}

}  // namespace
