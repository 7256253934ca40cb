// The last resort after a coordinator failure (docs/troubleshooting.md, "A
// rank's coordinator failed"). Rank 1's coordinator fails just before a
// data collective that the other ranks enter; they wait inside that MPI call,
// where no negotiation round can reach them. Rank 1 waits for them a bounded
// time (ACCORD_STALL_SHUTDOWN_TIME_SECONDS, set small by the test), logs why
// and ends the job with MPI_Abort.
//
// Not a Catch2 program: the job is meant to die. tests/mpi/expect_abort.cmake
// runs it and checks that it ended with a non-zero status within its time
// limit and that rank 1's log names the cause. If the collective ever
// completed instead, every rank prints "UNEXPECTED" and exits 0, which that
// script rejects. Rank 1's own collective fails at once with the injected
// error (a batch that fails fatally fails its own handles).
//
// `fault_abort_main freeze`: rank 1 instead stops itself (SIGSTOP) inside
// the collective, under its collective watchdog, as a peer that froze. The
// other ranks wait inside the MPI call until their watchdog
// (ACCORD_COLLECTIVE_TIMEOUT_SECONDS, set small by the test) names the
// collective and its tensor and ends the job with MPI_Abort; mpirun then
// kills the frozen rank too.
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "accord/accord.h"
#include "runtime/fault_injection.h"

namespace {

accord::AllreduceOptions Sum(const char* name) {
  accord::AllreduceOptions opts;
  opts.name = name;
  opts.op = accord::ReduceOp::kSum;
  return opts;
}

accord::Status Allreduce(std::vector<float>* data, const char* name) {
  accord::TensorView view;
  view.data = data->data();
  view.dtype = accord::DataType::kFloat32;
  view.shape = {static_cast<int64_t>(data->size())};
  accord::Result<accord::Handle> handle = accord::Allreduce(view, view, Sum(name));
  if (!handle.ok()) return handle.status();
  return handle.value().Wait(std::chrono::seconds(60));
}

}  // namespace

int main(int argc, char** argv) {
  const bool freeze = argc > 1 && std::string(argv[1]) == "freeze";
  const accord::Status init = accord::Init();
  if (!init.ok()) {
    std::fprintf(stderr, "accord::Init() failed: %s\n", init.ToString().c_str());
    return 1;
  }
  const int rank = accord::Rank();
  const int size = accord::Size();
  std::vector<float> warmup(8, static_cast<float>(rank + 1));
  const accord::Status first = Allreduce(&warmup, "abort.warmup");
  const float want = static_cast<float>(size * (size + 1) / 2);
  if (!first.ok() || warmup[0] != want) {
    std::fprintf(stderr, "[rank %d] warm-up allreduce: %s, got %g, expected %g\n", rank, first.ToString().c_str(),
                 warmup[0], want);
    return 1;
  }
  if (rank == 1 && freeze) {
    accord::testing::InjectCoordinatorFault(accord::testing::FaultPoint::kFreezeInCollective, "");
  } else if (rank == 1) {
    accord::testing::InjectCoordinatorFault(accord::testing::FaultPoint::kCollective,
                                            "injected by fault_abort_main (before a collective)");
  }
  std::vector<float> data(1024, 1.0f);
  const accord::Status status = Allreduce(&data, freeze ? "abort.frozen" : "abort.blocked");
  if (rank == 1 && status.message().find("injected by fault_abort_main") != std::string::npos) {
    // The failing rank's own operation fails with its error at once; its
    // Shutdown() then waits for the coordinator, which ends the job.
    std::fprintf(stderr, "[rank 1] the collective failed with the injected error, as it should\n");
    (void)accord::Shutdown();
    std::printf("[rank 1] UNEXPECTED: Shutdown() returned instead of the job ending\n");
    return 0;
  }
  if (freeze && status.ok()) {
    // The frozen rank runs again only when the job is being ended: after the
    // watchdog's MPI_Abort, Open MPI sends it SIGCONT before SIGTERM and
    // SIGKILL, and in that window it and a peer may finish the collective.
    // Wait to be killed. A collective that completed with no job ending
    // still fails: the wait outlasts the test's time limit, and it prints below.
    std::this_thread::sleep_for(std::chrono::seconds(20));
  }
  std::printf("[rank %d] UNEXPECTED: the collective returned %s instead of the job ending\n", rank,
              status.ToString().c_str());
  std::fflush(stdout);
  (void)accord::Shutdown();
  return 0;
}
