// Binding each rank to a core, decided on the host where the rank runs.
//
// accordrun sees only its own host's cores, and Open MPI's --bind-to core
// ends the job (the host's daemon fails) on a host with more ranks than
// cores. So unless the user chooses a binding, accordrun runs mpirun with
// --bind-to none and sets ACCORDRUN_BIND=core for every rank (plan.h), and
// each rank agent, on its own host:
//   1. reads its local rank and the number of ranks on the host
//      (OMPI_COMM_WORLD_LOCAL_RANK / _LOCAL_SIZE) and the host's usable cores;
//   2. when the host has a core for every local rank, binds itself to the
//      core of its local rank (all its hardware threads), before it starts the
//      program, which inherits the binding;
//   3. otherwise leaves the ranks of that host unbound (the scheduler shares
//      the cores among them), and local rank 0 says so in a note.
// CoreForLocalRank is pure; BindToLocalCore runs in the agent's process.
#pragma once

#include <string>
#include <vector>

namespace accord::launcher {

// The CPUs of the `local_rank`-th of `cores` (each the CPUs of one physical
// core), or none when the `local_size` ranks of the host outnumber its cores
// or local_rank is out of range.
std::vector<int> CoreForLocalRank(const std::vector<std::vector<int>>& cores, int local_rank, int local_size);

// Steps 2-3 above for this process, local rank `local_rank` of the
// `local_size` ranks on this host. Returns an error message, or empty.
std::string BindToLocalCore(int local_rank, int local_size);

}  // namespace accord::launcher
