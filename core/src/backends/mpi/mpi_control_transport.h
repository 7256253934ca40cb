// ControlTransport over MPI, for the negotiation rounds of one process set.
//
// Uses nonblocking collectives on its own communicator and waits for them
// politely (PollWait): a short busy-test window that yields the core, then
// sleeps that double up to a cap, and beyond it in proportion to the wait.
// While another rank is late to a round this thread therefore leaves the
// core to the training computation instead of spinning inside MPI.
// Coordinator thread only.
#pragma once

#include <mpi.h>

#include <chrono>
#include <functional>
#include <vector>

#include "backends/mpi/mpi_comm.h"
#include "negotiation/control_transport.h"

namespace accord {

struct PollPolicy {
  std::chrono::microseconds spin{20};
  std::chrono::microseconds max_sleep{500};
  // A long wait may sleep up to 1/16 of the time waited so far, up to this.
  std::chrono::microseconds max_backoff{10000};
  // While `waited_on` says a user thread is blocked waiting for a result,
  // keep busy-testing (yielding) up to this long from the start of the
  // wait or the last wake-up by an enqueue: the core is otherwise idle, and
  // the others are usually close.
  std::chrono::microseconds waited_spin{0};
  std::function<bool()> waited_on;
  // While `owner_waits` says the calling thread itself waits for the result
  // (it drives the round: runtime/fast_path.h), the first `spin` tests
  // follow each other without yielding: nothing else of this process wants
  // the core, and a yield costs a system call each time.
  std::function<bool()> owner_waits;
  // If set, called once per wait, at its first test that finds it
  // unfinished: a wait that ends at its first test costs nothing more.
  std::function<void()> on_wait;
  // When > 0, once the wait has lasted `unwaited_after` and while no user
  // thread waits (`waited_on` false), each sleep lasts this long at once (a
  // process on one core: the training thread owns the core, the others are
  // late, and an enqueue or a thread starting to wait ends the sleep early).
  std::chrono::microseconds unwaited_sleep{0};
  std::chrono::microseconds unwaited_after{1000};
  // If set, unwaited_sleep applies only while it returns true (the runtime:
  // while this rank holds nothing up in the round).
  std::function<bool()> unwaited_if;
  // How to sleep between tests; nanosleep when empty. The runtime passes a
  // sleep that ends early when a user thread enqueues (and then returns
  // true), so a coordinator waiting in a round notices the others arriving
  // without delay. After such a wake-up the wait spins (yielding) again
  // instead of sleeping: a burst of enqueues on this core then costs no
  // wake-up per tensor.
  std::function<bool(std::chrono::microseconds)> sleep;
  // If set, a wait still unfinished at *deadline gives up with kTimeout and
  // leaves the request outstanding (MPI cannot cancel a collective): the
  // caller must then end the process without touching the buffers again.
  // The runtime sets it only when this rank's coordinator has failed and
  // must end the job if the others do not answer (runtime/failure_protocol.h).
  const std::chrono::steady_clock::time_point* deadline = nullptr;
};

// Waits for `request`, or for all `count` of `requests`, according to `policy`.
Status PollWait(MPI_Request* request, const PollPolicy& policy);
Status PollWaitAll(int count, MPI_Request* requests, const PollPolicy& policy);

class MpiControlTransport : public ControlTransport {
 public:
  // Sets of up to `direct_and_ranks` ranks AND their bits directly
  // (ExchangeBitAnd), larger ones through MPI_Iallreduce.
  MpiControlTransport(MpiComm comm, PollPolicy policy, int direct_and_ranks = kDirectAndRanks);
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Status AllreduceBitAnd(std::vector<uint64_t>* bits) override;
  // Carries `mine` where the set ANDs directly (ExchangeBitAnd): the bytes
  // ride in the same messages as the bits.
  Status AllreduceBitAndCarrying(std::vector<uint64_t>* bits, const std::string& mine,
                                 std::vector<std::string>* carried) override;
  Status Gather(const std::string& mine, std::vector<std::string>* gathered) override;
  Status Broadcast(std::string* bytes) override;

  // The default for direct_and_ranks.
  static constexpr int kDirectAndRanks = 8;

 private:
  // Every rank sends its words to every other and ANDs what it receives: one
  // step, in which each rank waits only for the others' words to arrive.
  // Open MPI's MPI_Iallreduce of a few words (libnbc) reduces to rank 0 and
  // broadcasts back, two hops each of which waits for the receiving rank to
  // poll: with coordinators that sleep between polls on cores busy with
  // training, a round of 2 ranks took 1-2 ms instead of a round trip.
  // Each message is [the bits | the carried byte count | the carried bytes,
  // padded to whole words]; a rank receives into room for kCarryBytes, so
  // ranks that carry different amounts (or nothing) still match. `carried`
  // null: nothing is handed back.
  Status ExchangeBitAnd(std::vector<uint64_t>* bits, const std::string& mine, std::vector<std::string>* carried);
  static constexpr int kBitsTag = 1;

  MpiComm comm_;
  PollPolicy policy_;
  int direct_and_ranks_;
  int rank_ = 0;
  int size_ = 1;
  // ExchangeBitAnd's buffers; members so that a wait abandoned at the
  // failure deadline (PollPolicy::deadline) leaves MPI writing into memory
  // that is still allocated.
  std::vector<uint64_t> sent_;
  std::vector<uint64_t> received_;
  std::vector<MPI_Request> requests_;
};

}  // namespace accord
