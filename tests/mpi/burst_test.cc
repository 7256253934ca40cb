// A small tensor followed a moment later by a large one, with no thread
// waiting in between (a layer's bias, then its weight, as backward gives
// them), goes through one negotiation round and one collective: the round
// does not start for the small tensor alone (coordinator.cc, LetBurstFinish).
//
// Registered with --bind-to none, so that every rank may use more than one
// core (with one core the coordinator waits for a thread to wait in any
// case). Each trial's tensors are checked against the reference.
#include <catch2/catch.hpp>

#include <mpi.h>

#include <chrono>
#include <string>
#include <thread>

#include "test_util.h"

namespace {

using accord::DataType;
using namespace accord_test;

constexpr int kTrials = 10;
constexpr int64_t kBiasElements = 1024;         // 4 KiB: under the small-burst bound (64 KiB)
constexpr int64_t kWeightElements = 64 * 1024;  // 256 KiB
// Well inside the 1 ms a small burst may pause; a single trial whose gap
// the scheduler stretches past it is allowed for below.
constexpr std::chrono::microseconds kGap{300};

}  // namespace

TEST_CASE("a small tensor and a large one enqueued a moment later share one collective", "[burst]") {
  INFO("rank " << Rank() << " of " << Size());
  REQUIRE(accord::IsInitialized());
  int fused = 0;
  for (int trial = 0; trial < kTrials; ++trial) {
    const std::string bias = "burst.bias." + std::to_string(trial);
    const std::string weight = "burst.weight." + std::to_string(trial);
    TestTensor b(DataType::kFloat32, accord::Shape{kBiasElements},
                 RankValues(bias, Rank(), DataType::kFloat32, kBiasElements));
    TestTensor w(DataType::kFloat32, accord::Shape{kWeightElements},
                 RankValues(weight, Rank(), DataType::kFloat32, kWeightElements));
    MPI_Barrier(MPI_COMM_WORLD);
    const uint64_t before = accord::GetMetrics().collectives;
    accord::Handle hb = Enqueued(accord::Allreduce(b.view(), b.view(), SumOptions(bias)), bias);
    std::this_thread::sleep_for(kGap);
    accord::Handle hw = Enqueued(accord::Allreduce(w.view(), w.view(), SumOptions(weight)), weight);
    REQUIRE(WaitOk(hb, bias));
    REQUIRE(WaitOk(hw, weight));
    const uint64_t collectives = accord::GetMetrics().collectives - before;
    CHECK(collectives >= 1);
    CHECK(collectives <= 2);
    if (collectives == 1) ++fused;
    ExpectValues(bias, b.view(), DataType::kFloat32, {kBiasElements},
                 ReferenceAllreduce(bias, AllRanks(), DataType::kFloat32, kBiasElements, ValueKind::kSmall,
                                    ReduceSpec{accord::ReduceOp::kSum}));
    ExpectValues(weight, w.view(), DataType::kFloat32, {kWeightElements},
                 ReferenceAllreduce(weight, AllRanks(), DataType::kFloat32, kWeightElements, ValueKind::kSmall,
                                    ReduceSpec{accord::ReduceOp::kSum}));
  }
  // Each round begins for the bias alone after 50 µs without an enqueue
  // unless a small burst may pause longer: then no trial fuses.
  INFO(fused << " of " << kTrials << " trials went in one collective");
  CHECK(fused >= kTrials - 3);
}
