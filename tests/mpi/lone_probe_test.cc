// The probe that decides how a lone allreduce larger than the staging
// window runs (ops/lone_allreduce.h): real timings on every rank, one
// answer on all of them.
#include <mpi.h>
#include <catch2/catch.hpp>

#include <cmath>
#include <memory>

#include "backends/mpi/mpi_backend.h"
#include "backends/mpi/mpi_types.h"
#include "fusion/fusion_buffer.h"
#include "ops/lone_allreduce.h"
#include "test_util.h"

namespace {

using accord_test::Rank;

// The backend is made here, on MPI_COMM_WORLD, without accord's runtime.
[[maybe_unused]] const bool kNoRuntime = accord_test::RunWithoutRuntime();

std::unique_ptr<accord::MpiTypes> MakeTypes() {
  auto types = accord::MpiTypes::Create();
  INFO(types.status().ToString());
  REQUIRE(types.ok());
  return std::move(*types);
}

// Whether `value` is the same on every rank.
bool SameEverywhere(double value) {
  double low = value, high = value;
  MPI_Allreduce(MPI_IN_PLACE, &low, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &high, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return low == high;
}

void CheckProbe(int64_t window_bytes) {
  auto types = MakeTypes();
  accord::MpiBackend backend(accord::MpiComm(MPI_COMM_WORLD), types.get(), 2147483647, /*across_hosts=*/false);
  accord::FusionBuffer buffer;
  const accord::Result<accord::LoneProbe> probe = accord::ProbeLoneAllreduce(backend, buffer, window_bytes);
  INFO("rank " << Rank() << ", window " << window_bytes << " bytes");
  REQUIRE(probe.ok());
  CHECK(probe->in_place_seconds > 0);
  CHECK(probe->staged_seconds > 0);
  CHECK(std::isfinite(probe->in_place_seconds));
  CHECK(std::isfinite(probe->staged_seconds));
  CHECK(probe->in_place() == (probe->in_place_seconds <= probe->staged_seconds));
  // The slowest rank's figures, so every rank takes the same way.
  CHECK(SameEverywhere(probe->in_place_seconds));
  CHECK(SameEverywhere(probe->staged_seconds));
  CHECK(SameEverywhere(probe->in_place() ? 1 : 0));
  // The staged way went through the fusion buffer.
  CHECK(buffer.capacity() > 0);
}

TEST_CASE("lone allreduce probe: the default window, one answer on every rank") { CheckProbe(int64_t{1} << 20); }

TEST_CASE("lone allreduce probe: windows of odd sizes and smaller than one float") {
  CheckProbe(1000);
  CheckProbe(4099);
  CheckProbe(1);
}

TEST_CASE("lone allreduce probe: no window is a clear error") {
  auto types = MakeTypes();
  accord::MpiBackend backend(accord::MpiComm(MPI_COMM_WORLD), types.get(), 2147483647, /*across_hosts=*/false);
  accord::FusionBuffer buffer;
  const accord::Result<accord::LoneProbe> probe = accord::ProbeLoneAllreduce(backend, buffer, 0);
  REQUIRE_FALSE(probe.ok());
  CHECK(probe.status().code() == accord::StatusCode::kInvalidArgument);
  CHECK(probe.status().message().find("staging window") != std::string::npos);
}

}  // namespace
