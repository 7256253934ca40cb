#include "backends/mpi/mpi_world.h"

#include <cstdlib>

#include "backends/mpi/mpi_backend.h"
#include "backends/mpi/mpi_check.h"

namespace accord {

namespace {

Result<MpiComm> Dup(MPI_Comm comm) {
  MPI_Comm out;
  ACCORD_RETURN_IF_ERROR(ACCORD_MPI_CHECK(MPI_Comm_dup(comm, &out)));
  // Errors come back as codes (and so as Status values), not as aborts.
  MPI_Comm_set_errhandler(out, MPI_ERRORS_RETURN);
  return MpiComm(out);
}

}  // namespace

Result<std::unique_ptr<MpiWorld>> MpiWorld::Create() {
  std::unique_ptr<MpiWorld> w(new MpiWorld());
  ACCORD_ASSIGN_OR_RETURN(w->world_, Dup(MPI_COMM_WORLD));
  MPI_Comm world = w->world_.get();
  MPI_Comm_rank(world, &w->rank_);
  MPI_Comm_size(world, &w->size_);

  MPI_Comm local;
  ACCORD_RETURN_IF_ERROR(
      ACCORD_MPI_CHECK(MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, w->rank_, MPI_INFO_NULL, &local)));
  MpiComm local_owner(local);
  MPI_Comm_rank(local, &w->local_rank_);
  MPI_Comm_size(local, &w->local_size_);
  MPI_Comm cross;
  ACCORD_RETURN_IF_ERROR(ACCORD_MPI_CHECK(MPI_Comm_split(world, w->local_rank_, w->rank_, &cross)));
  MpiComm cross_owner(cross);
  MPI_Comm_rank(cross, &w->cross_rank_);
  MPI_Comm_size(cross, &w->cross_size_);

  ACCORD_ASSIGN_OR_RETURN(w->types_, MpiTypes::Create());
  return w;
}

Result<SetComms> MpiWorld::CreateSetComms(const std::vector<int>& ranks, const SetCommOptions& options) const {
  bool member = false;
  int key = 0;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] == rank_) {
      member = true;
      key = static_cast<int>(i);
    }
  }
  MPI_Comm split;
  ACCORD_RETURN_IF_ERROR(ACCORD_MPI_CHECK(MPI_Comm_split(world_.get(), member ? 0 : MPI_UNDEFINED, key, &split)));
  SetComms comms;
  if (!member) return comms;
  MpiComm control(split);
  MPI_Comm_set_errhandler(split, MPI_ERRORS_RETURN);
  ACCORD_ASSIGN_OR_RETURN(MpiComm data, Dup(split));
  MPI_Comm_rank(split, &comms.set_rank);
  comms.transport = std::make_unique<MpiControlTransport>(std::move(control), options.policy);
  ACCORD_ASSIGN_OR_RETURN(HostLayout layout, HostLayout::Of(data.get()));
  comms.hosts = layout.hosts;
  comms.layout = layout.Describe();
  const HierarchicalOptions two_level = options.hierarchical ? options.hierarchical(layout) : HierarchicalOptions{};
  if (layout.hosts > 1 && (two_level.allreduce || two_level.allgather)) {
    comms.two_level = two_level;
    ACCORD_ASSIGN_OR_RETURN(comms.backend, HierarchicalBackend::Create(std::move(data), std::move(layout), types_.get(),
                                                                       options.max_count, two_level));
  } else {
    comms.backend = std::make_unique<MpiBackend>(std::move(data), types_.get(), options.max_count, layout.hosts > 1);
  }
  return comms;
}

Status MpiWorld::CheckSameEverywhere(const std::string& what, int64_t value) const {
  int64_t bounds[2] = {value, -value};
  ACCORD_RETURN_IF_ERROR(ACCORD_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, bounds, 2, MPI_INT64_T, MPI_MAX, world_.get())));
  if (bounds[0] != -bounds[1]) {
    return Status::InvalidArgument(what + " differs across ranks (from " + std::to_string(-bounds[1]) + " to " +
                                   std::to_string(bounds[0]) + "; this rank has " + std::to_string(value) +
                                   "): every rank must use the same value");
  }
  return Status::OK();
}

void MpiWorld::Abort(int code) const {
  // MPI_COMM_WORLD rather than accord's duplicate: Open MPI names the
  // communicator in its report, and this one is the one users know.
  MPI_Abort(MPI_COMM_WORLD, code);
  std::abort();  // MPI_Abort does not return; if it did, the process must still end
}

}  // namespace accord
