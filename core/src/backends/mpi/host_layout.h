// HostLayout: how the ranks of one process set are spread over hosts.
//
// A host is what MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) groups: the
// ranks that share memory. Hosts are numbered by their lowest set rank, so
// every rank numbers them alike, whatever the rank -> host mapping (the ranks
// of a host need not be consecutive). Of() is collective over the set's
// communicator; the rest is plain data. Coordinator thread (or Init) only.
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

#include "accord/status.h"
#include "backends/mpi/mpi_comm.h"

namespace accord {

struct HostLayout {
  // The set's ranks on this host, ordered by set rank (local rank 0 is the
  // lowest), with errors returned as codes.
  MpiComm local;
  int local_rank = 0;
  int local_size = 1;
  int hosts = 1;
  int host = 0;              // this rank's host
  int fewest_per_host = 1;   // the smallest local size of any host
  std::vector<int> host_of;  // set rank -> host
  std::vector<int> members;  // this host's set ranks, ascending (members[local_rank] is this rank)

  // Computes the layout of the set whose communicator is `set` (set ranks
  // are the ranks in `set`).
  static Result<HostLayout> Of(MPI_Comm set);
  // The same with the ranks that pass the same `host_color` taken as one
  // host: for tests, which emulate layouts of several hosts on one.
  static Result<HostLayout> Emulated(MPI_Comm set, int host_color);

  // True if each host's set ranks are consecutive (hosts then hold
  // consecutive blocks of an allgather).
  bool HostsContiguous() const;
  // True if every host holds as many of the set's ranks.
  bool EvenHosts() const { return fewest_per_host * hosts == static_cast<int>(host_of.size()); }
  // "2 hosts with 2 and 1 ranks" for messages.
  std::string Describe() const;

 private:
  // The rest of the layout once `local` (ranked by set rank) is known.
  static Result<HostLayout> WithLocal(MPI_Comm set, MPI_Comm local);
};

}  // namespace accord
