// MpiWorld: accord's view of the MPI job, and the communicators it creates.
//
// Create() (called by Init on the user's thread, before the coordinator
// starts) duplicates MPI_COMM_WORLD so accord's traffic never mixes with the
// application's, and computes the local (same host) and cross (same local
// rank across hosts) ranks. CreateSetComms() builds the communicators of one
// process set; it is collective over the whole world, so every rank calls it
// for every set in the same order (at Init, or in the same negotiation round
// on the coordinator thread).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "accord/status.h"
#include "backends/backend.h"
#include "backends/mpi/hierarchical_backend.h"
#include "backends/mpi/mpi_comm.h"
#include "backends/mpi/mpi_control_transport.h"
#include "backends/mpi/mpi_types.h"
#include "negotiation/control_transport.h"

namespace accord {

struct SetComms {
  int set_rank = -1;
  std::unique_ptr<ControlTransport> transport;  // negotiation
  std::unique_ptr<Backend> backend;             // data
  int hosts = 1;                                // hosts the set's ranks are on
  std::string layout;                           // "2 hosts with 2 and 2 ranks", for logs
  HierarchicalOptions two_level;                // what the backend runs in two levels
};

struct SetCommOptions {
  PollPolicy policy;      // of the negotiation transport
  int64_t max_count = 0;  // elements per MPI call of the backend
  // Which collectives run in two levels when the set spans hosts
  // (backends/mpi/hierarchical_backend.h), given the set's host layout;
  // none when empty.
  std::function<HierarchicalOptions(const HostLayout&)> hierarchical;
};

class MpiWorld {
 public:
  static Result<std::unique_ptr<MpiWorld>> Create();

  int rank() const { return rank_; }
  int size() const { return size_; }
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }
  int cross_rank() const { return cross_rank_; }
  int cross_size() const { return cross_size_; }
  const MpiTypes* types() const { return types_.get(); }

  // The communicators of the set of `ranks` (sorted global ranks); nullptr
  // in SetComms::transport when this rank is not a member. The backend is a
  // HierarchicalBackend when the set spans hosts and options.hierarchical
  // asks for one of its collectives, else an MpiBackend.
  Result<SetComms> CreateSetComms(const std::vector<int>& ranks, const SetCommOptions& options) const;
  // Fails with kInvalidArgument naming `what` if `value` differs across ranks.
  Status CheckSameEverywhere(const std::string& what, int64_t value) const;
  // Ends every process of the job (MPI_Abort) with exit status `code`. The
  // last resort of a rank whose coordinator failed and could not tell the
  // others (runtime/failure_protocol.h); any thread.
  [[noreturn]] void Abort(int code) const;

 private:
  MpiWorld() = default;
  MpiComm world_;
  std::unique_ptr<MpiTypes> types_;
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1, cross_rank_ = 0, cross_size_ = 1;
};

}  // namespace accord
