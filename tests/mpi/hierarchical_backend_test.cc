// HierarchicalBackend (core/src/backends/mpi/hierarchical_backend.h) called
// directly, below the runtime, on every host layout this job has or can
// emulate: the real hosts (one on a plain machine, several on the test bed,
// tests/multihost/), and ranks grouped into pretend hosts by a colour (one
// host per rank, halves, an uneven split, interleaved ranks). The algorithm
// does not care whether a "host" shares memory, so one machine covers the
// layouts a cluster would have.
//
// Every (dtype, op) the backend reduces, at counts around the shard sizes (0,
// fewer elements than ranks on a host, remainders), with one MPI call per
// collective and with calls of at most 7 elements, and a few just over 1 MiB
// (where the host steps are the ring's halves on even hosts and polled
// Open MPI collectives on uneven ones, and the cross step takes the ring);
// allgathers of uneven blocks (empty ones too) under the same two limits.
// Results are checked against a reference every rank computes from every
// rank's seeded input.
//
// ACCORD_TEST_HOSTS, when set, is the number of real hosts the job is
// expected to span (the bed's registrations set it).
#include <catch2/catch.hpp>

#include <mpi.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backends/mpi/hierarchical_backend.h"
#include "backends/mpi/mpi_types.h"
#include "test_util.h"

namespace {

using accord::DataType;
using accord::ReduceOp;
using namespace accord_test;

[[maybe_unused]] const bool kNoRuntime = RunWithoutRuntime();

// A way of grouping the ranks into hosts: `color(rank, size)` names the
// host, or nullptr for the real hosts.
struct LayoutCase {
  const char* name;
  int (*color)(int rank, int size);
};

const LayoutCase kLayouts[] = {
    {"real hosts", nullptr},
    {"one host per rank", [](int rank, int) { return rank; }},
    {"halves (2+2, 2+1, 1+1)", [](int rank, int size) { return rank < (size + 1) / 2 ? 0 : 1; }},
    {"first rank alone (1+3, 1+2)", [](int rank, int) { return rank == 0 ? 0 : 1; }},
    {"interleaved (0,2 | 1,3)", [](int rank, int) { return rank % 2; }},
    {"last rank alone, the others interleaved", [](int rank, int size) { return rank == size - 1 ? 2 : rank % 2; }},
};

accord::MpiComm DupWorld() {
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  return accord::MpiComm(comm);
}

accord::HostLayout MakeLayout(MPI_Comm comm, const LayoutCase& layout) {
  auto made =
      layout.color ? accord::HostLayout::Emulated(comm, layout.color(Rank(), Size())) : accord::HostLayout::Of(comm);
  INFO("rank " << Rank() << ": layout " << layout.name << ": " << made.status().ToString());
  REQUIRE(made.ok());  // collective failures are the same on every rank
  return std::move(made).value();
}

std::unique_ptr<accord::HierarchicalBackend> MakeBackend(const accord::MpiTypes* types, const LayoutCase& layout,
                                                         int64_t max_count) {
  accord::MpiComm comm = DupWorld();
  accord::HostLayout hosts = MakeLayout(comm.get(), layout);
  auto made = accord::HierarchicalBackend::Create(std::move(comm), std::move(hosts), types, max_count,
                                                  accord::HierarchicalOptions{true, true});
  INFO("rank " << Rank() << ": " << made.status().ToString());
  REQUIRE(made.ok());
  return std::move(made).value();
}

std::unique_ptr<accord::MpiTypes> MakeTypes() {
  auto types = accord::MpiTypes::Create();
  INFO(types.status().ToString());
  REQUIRE(types.ok());
  return std::move(types).value();
}

ValueKind KindFor(ReduceOp op) { return op == ReduceOp::kProduct ? ValueKind::kProduct : ValueKind::kSmall; }

const int64_t kCounts[] = {0, 1, 2, 3, 5, 7, 8, 31, 1000, 4099};
const ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct};

TEST_CASE("host layouts: hosts, members and the fewest ranks per host") {
  for (const LayoutCase& layout : kLayouts) {
    accord::MpiComm comm = DupWorld();
    const accord::HostLayout hosts = MakeLayout(comm.get(), layout);
    INFO("rank " << Rank() << ": layout " << layout.name << ": " << hosts.Describe());
    std::vector<int> per_host(static_cast<size_t>(hosts.hosts), 0);
    int highest = -1;
    for (int r = 0; r < Size(); ++r) {
      CHECK(hosts.host_of[r] >= 0);
      CHECK(hosts.host_of[r] < hosts.hosts);
      if (hosts.host_of[r] >= 0 && hosts.host_of[r] < hosts.hosts) ++per_host[hosts.host_of[r]];
      // Hosts are numbered in the order their first rank appears.
      CHECK(hosts.host_of[r] <= highest + 1);
      highest = std::max(highest, hosts.host_of[r]);
    }
    CHECK(hosts.host == hosts.host_of[Rank()]);
    CHECK(static_cast<int>(hosts.members.size()) == hosts.local_size);
    CHECK(per_host[hosts.host] == hosts.local_size);
    CHECK(hosts.fewest_per_host == *std::min_element(per_host.begin(), per_host.end()));
    if (layout.color) {
      for (int r = 0; r < Size(); ++r) {
        const bool same = layout.color(r, Size()) == layout.color(Rank(), Size());
        CHECK(same == (hosts.host_of[r] == hosts.host));
      }
    } else if (const char* expected = std::getenv("ACCORD_TEST_HOSTS")) {
      CHECK(hosts.hosts == std::atoi(expected));
    }
  }
}

// Calls test(backend, key prefix, max_count) with a backend on every
// layout, making one MPI call per collective and calls of at most 7 elements.
template <typename Test>
void ForEveryBackend(const char* what, Test&& test) {
  auto types = MakeTypes();
  for (const LayoutCase& layout : kLayouts) {
    for (int64_t max_count : {int64_t{2147483647}, int64_t{7}}) {
      auto backend = MakeBackend(types.get(), layout, max_count);
      test(*backend, std::string(what) + "." + layout.name + "." + std::to_string(max_count), max_count);
    }
  }
}

// Allreduces n elements of the rank's seeded input through `backend` and
// checks the result against the reference.
void CheckAllreduce(accord::Backend& backend, const std::string& key, DataType dtype, ReduceOp op, int64_t n) {
  TestTensor t(dtype, {n}, RankValues(key, Rank(), dtype, n, KindFor(op)));
  const accord::Status status = backend.Allreduce(t.view().data, n, dtype, op);
  INFO("rank " << Rank() << ": " << key << ": " << status.ToString());
  CHECK(status.ok());
  ExpectValues(key, t.view(), dtype, {n}, ReferenceAllreduce(key, AllRanks(), dtype, n, KindFor(op), ReduceSpec{op}));
}

TEST_CASE("hierarchical allreduce: every dtype x op x count on every layout") {
  ForEveryBackend("allreduce", [](accord::Backend& backend, const std::string& prefix, int64_t max_count) {
    for (DataType dtype : AllDataTypes()) {
      for (ReduceOp op : kOps) {
        for (int64_t n : kCounts) {
          if (max_count < n / 4) continue;  // a few pieces per call are enough
          CheckAllreduce(
              backend,
              prefix + "." + accord::DataTypeName(dtype) + "." + accord::ReduceOpName(op) + "." + std::to_string(n),
              dtype, op, n);
        }
      }
    }
  });
}

// From 1 MiB (kRingMinBytes) the cross step takes the ring, and the host's
// steps are the ring's two halves where every host has as many ranks (2+2,
// interleaved 0,2 | 1,3, one host per rank) and polled non-blocking Open MPI
// collectives where not (2+1, 1+3): a few dtypes and ops at sizes just over
// it, on every layout, in one MPI call.
TEST_CASE("hierarchical allreduce: buffers of 1 MiB and more on every layout") {
  ForEveryBackend("allreduce_large", [](accord::Backend& backend, const std::string& prefix, int64_t max_count) {
    if (max_count < 2147483647) return;
    for (DataType dtype : {DataType::kFloat32, DataType::kFloat16, DataType::kInt64}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
        const int64_t n = accord::kRingMinBytes / static_cast<int64_t>(accord::DataTypeSize(dtype)) + 5;
        CheckAllreduce(backend, prefix + "." + accord::DataTypeName(dtype) + "." + accord::ReduceOpName(op), dtype, op,
                       n);
      }
    }
  });
}

// Elements rank r contributes to an allgather, for a few patterns of
// uneven blocks: empty ones among them, all empty, one rank only.
int64_t BlockCount(int pattern, int rank, int size) {
  switch (pattern) {
    case 0: return 1 + (rank * 3) % 5;
    case 1: return rank % 2 == 0 ? 0 : 2 * rank + 1;
    case 2: return 0;
    case 3: return rank == size - 1 ? 1001 : 0;
    default: return 257 + rank;
  }
}

TEST_CASE("hierarchical allgather: uneven blocks, every dtype, on every layout") {
  ForEveryBackend("allgather", [](accord::Backend& backend, const std::string& prefix, int64_t) {
    for (DataType dtype : AllDataTypes()) {
      for (int pattern = 0; pattern < 5; ++pattern) {
        const std::string key = prefix + "." + accord::DataTypeName(dtype) + "." + std::to_string(pattern);
        std::vector<int64_t> counts;
        std::vector<double> expected;
        int64_t mine = 0;
        for (int r = 0; r < Size(); ++r) {
          counts.push_back(BlockCount(pattern, r, Size()));
          if (r == Rank()) mine = static_cast<int64_t>(expected.size());
          for (double v : RankValues(key, r, dtype, counts.back())) expected.push_back(RoundToDataType(dtype, v));
        }
        const int64_t total = static_cast<int64_t>(expected.size());
        // Only this rank's block is filled in; the rest must arrive.
        std::vector<double> initial(static_cast<size_t>(total), 0.0);
        const std::vector<double> own = RankValues(key, Rank(), dtype, counts[Rank()]);
        std::copy(own.begin(), own.end(), initial.begin() + mine);
        TestTensor t(dtype, {total}, initial);
        const accord::Status status = backend.Allgatherv(t.view().data, counts, dtype);
        INFO("rank " << Rank() << ": " << key << ": " << status.ToString());
        CHECK(status.ok());
        ExpectValues(key, t.view(), dtype, {total}, expected);
      }
    }
  });
}

TEST_CASE("hierarchical backend: a collective not switched on runs flat") {
  auto types = MakeTypes();
  for (const LayoutCase& layout : kLayouts) {
    accord::MpiComm comm = DupWorld();
    accord::HostLayout hosts = MakeLayout(comm.get(), layout);
    auto made = accord::HierarchicalBackend::Create(std::move(comm), std::move(hosts), types.get(), 2147483647,
                                                    accord::HierarchicalOptions{false, false});
    REQUIRE(made.ok());
    const std::string key = std::string("flat.") + layout.name;
    TestTensor t(DataType::kInt32, {13}, RankValues(key, Rank(), DataType::kInt32, 13));
    CHECK((*made)->Allreduce(t.view().data, 13, DataType::kInt32, ReduceOp::kSum).ok());
    ExpectValues(key, t.view(), DataType::kInt32, {13},
                 ReferenceAllreduce(key, AllRanks(), DataType::kInt32, 13, ValueKind::kSmall, ReduceSpec{}));
  }
}

}  // namespace
