#include "backends/mpi/host_layout.h"

#include <algorithm>
#include <map>
#include <string>

#include "backends/mpi/mpi_check.h"

namespace accord {

Result<HostLayout> HostLayout::Of(MPI_Comm set) {
  int set_rank = 0;
  MPI_Comm_rank(set, &set_rank);
  MPI_Comm local;
  ACCORD_RETURN_IF_ERROR(
      ACCORD_MPI_CHECK(MPI_Comm_split_type(set, MPI_COMM_TYPE_SHARED, set_rank, MPI_INFO_NULL, &local)));
  return WithLocal(set, local);
}

Result<HostLayout> HostLayout::Emulated(MPI_Comm set, int host_color) {
  int set_rank = 0;
  MPI_Comm_rank(set, &set_rank);
  MPI_Comm local;
  ACCORD_RETURN_IF_ERROR(ACCORD_MPI_CHECK(MPI_Comm_split(set, host_color, set_rank, &local)));
  return WithLocal(set, local);
}

Result<HostLayout> HostLayout::WithLocal(MPI_Comm set, MPI_Comm local) {
  int set_rank = 0, set_size = 1;
  MPI_Comm_rank(set, &set_rank);
  MPI_Comm_size(set, &set_size);
  HostLayout layout;
  layout.local = MpiComm(local);
  MPI_Comm_set_errhandler(local, MPI_ERRORS_RETURN);
  MPI_Comm_rank(local, &layout.local_rank);
  MPI_Comm_size(local, &layout.local_size);

  // A host is named by its lowest set rank, which is its local rank 0 (the
  // split's key is the set rank).
  int leader = set_rank;
  ACCORD_RETURN_IF_ERROR(ACCORD_MPI_CHECK(MPI_Bcast(&leader, 1, MPI_INT, 0, local)));
  std::vector<int> leader_of(static_cast<size_t>(set_size));
  ACCORD_RETURN_IF_ERROR(ACCORD_MPI_CHECK(MPI_Allgather(&leader, 1, MPI_INT, leader_of.data(), 1, MPI_INT, set)));

  std::map<int, int> index_of_leader;  // ordered: hosts numbered by their lowest set rank
  for (int l : leader_of) index_of_leader.emplace(l, 0);
  int next = 0;
  for (auto& [l, index] : index_of_leader) index = next++;
  layout.hosts = next;
  layout.host_of.resize(static_cast<size_t>(set_size));
  std::vector<int> per_host(static_cast<size_t>(layout.hosts), 0);
  for (int r = 0; r < set_size; ++r) {
    layout.host_of[r] = index_of_leader[leader_of[r]];
    ++per_host[layout.host_of[r]];
  }
  layout.host = layout.host_of[set_rank];
  layout.fewest_per_host = *std::min_element(per_host.begin(), per_host.end());
  for (int r = 0; r < set_size; ++r) {
    if (layout.host_of[r] == layout.host) layout.members.push_back(r);
  }
  if (static_cast<int>(layout.members.size()) != layout.local_size || layout.members[layout.local_rank] != set_rank) {
    return Status::Internal("host layout: this rank's shared-memory group disagrees with the ranks' hosts");
  }
  return layout;
}

bool HostLayout::HostsContiguous() const {
  // Hosts are numbered in the order their first rank appears, so a host
  // that comes back after another one began shows as a step down.
  for (size_t r = 1; r < host_of.size(); ++r) {
    if (host_of[r] < host_of[r - 1]) return false;
  }
  return true;
}

std::string HostLayout::Describe() const {
  std::vector<int> per_host(static_cast<size_t>(hosts), 0);
  for (int h : host_of) ++per_host[h];
  std::string text = std::to_string(hosts) + (hosts == 1 ? " host with " : " hosts with ");
  for (int h = 0; h < hosts; ++h) {
    if (h > 0) text += h + 1 == hosts ? " and " : ", ";
    text += std::to_string(per_host[h]);
  }
  return text + " ranks";
}

}  // namespace accord
