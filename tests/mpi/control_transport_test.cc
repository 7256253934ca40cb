// MpiControlTransport (core/src/backends/mpi/mpi_control_transport.h) called
// directly, below the runtime: the negotiation rounds' bitwise AND, both as
// the one-step exchange of small sets and through MPI_Iallreduce, over many
// rounds back to back with ranks arriving at different times (a rank's next
// round may send before a slower rank has posted its receive for it), and
// a Gather and Broadcast between rounds on the same communicator.
#include <catch2/catch.hpp>

#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "backends/mpi/mpi_control_transport.h"
#include "test_util.h"

namespace {

using namespace accord_test;

[[maybe_unused]] const bool kNoRuntime = RunWithoutRuntime();

// Rank r's word w in round k: every bit set but a few that depend on r, w and k.
uint64_t Word(int rank, size_t w, int round) {
  const uint64_t a = uint64_t{1} << ((rank * 7 + w * 3 + round) % 64);
  const uint64_t b = uint64_t{1} << ((rank + round * 5 + 11) % 64);
  return ~(a | (rank % 2 == 0 ? b : 0));
}

void CheckRounds(int direct_and_ranks) {
  MPI_Comm comm = MPI_COMM_NULL;
  REQUIRE(MPI_Comm_dup(MPI_COMM_WORLD, &comm) == MPI_SUCCESS);
  accord::MpiControlTransport transport{accord::MpiComm(comm), accord::PollPolicy{}, direct_and_ranks};
  const int rank = Rank();
  const int size = Size();
  for (int round = 0; round < 40; ++round) {
    const size_t n = std::vector<size_t>{1, 3, 65}[round % 3];
    std::vector<uint64_t> bits(n);
    std::vector<uint64_t> expected(n, ~uint64_t{0});
    for (size_t w = 0; w < n; ++w) {
      bits[w] = Word(rank, w, round);
      for (int r = 0; r < size; ++r) expected[w] &= Word(r, w, round);
    }
    // Ranks come late by turns, so the others run a round ahead of them.
    if ((round + rank) % 4 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    const accord::Status status = transport.AllreduceBitAnd(&bits);
    INFO("rank " << rank << " round " << round << ": " << status.ToString());
    REQUIRE(status.ok());
    CHECK(bits == expected);
    if (round % 10 == 9) {
      // The rounds with messages: rank 0 gathers and broadcasts.
      std::vector<std::string> gathered;
      REQUIRE(transport.Gather("rank " + std::to_string(rank) + " round " + std::to_string(round), &gathered).ok());
      std::string reply = rank == 0 ? "reply " + std::to_string(round) : "";
      if (rank == 0) {
        REQUIRE(gathered.size() == static_cast<size_t>(size));
        for (int r = 0; r < size; ++r) {
          CHECK(gathered[r] == "rank " + std::to_string(r) + " round " + std::to_string(round));
        }
      }
      REQUIRE(transport.Broadcast(&reply).ok());
      CHECK(reply == "reply " + std::to_string(round));
    }
  }
}

TEST_CASE("control transport: the AND of a small set, one step") {
  CheckRounds(accord::MpiControlTransport::kDirectAndRanks);
}

TEST_CASE("control transport: the AND through MPI_Iallreduce, as in larger sets") { CheckRounds(0); }

}  // namespace
