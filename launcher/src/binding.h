// Binding each rank to its share of its host's cores, decided on the host
// where the rank runs (docs/launcher.md, "Binding").
//
// accordrun sees only its own host, and Open MPI's --bind-to core ends the
// job (the host's daemon fails) on a host with more ranks than cores. So
// unless the user chooses a binding, accordrun runs mpirun with --bind-to
// none and sets ACCORDRUN_BIND=share for every rank (plan.h), and each rank
// agent, on its own host:
//   1. reads its local rank and the number of ranks on the host
//      (OMPI_COMM_WORLD_LOCAL_RANK / _LOCAL_SIZE) and the host's topology
//      (topology.h): usable cores with their NUMA nodes, the GPUs;
//   2. plans the host (PlanHostBinding): with k = cores / ranks (at least
//      one core each), every local rank gets k cores of its own, whole
//      cores with all their hardware threads; the share of local rank i lies
//      on the NUMA node of GPU i when the host has GPUs and that node has k
//      cores left, and otherwise on the first NUMA node with k consecutive
//      cores left, so shares straddle nodes only when they must;
//   3. binds itself to its share before it starts the program, which
//      inherits the binding, and sets OMP_NUM_THREADS=k for the program
//      unless it is set;
//   4. with more ranks than cores, leaves every rank of the host unbound
//      with OMP_NUM_THREADS=1, and local rank 0 says so in a note.
// When the user binds (ACCORDRUN_BIND=user), the agent only chooses
// OMP_NUM_THREADS (ThreadsUnderUserBinding).
//
// PlanHostBinding and the formatting are pure, and tests give them any
// topology; BindRankAgent runs in the agent's own process.
#pragma once

#include <string>
#include <vector>

#include "topology.h"

namespace accord::launcher {

struct RankShare {
  std::vector<int> cores;  // indices into HostTopology::cores, ascending; empty: unbound
  std::vector<int> cpus;   // their hardware threads, ascending: the affinity to set
  int numa_node = -1;      // the node all its cores lie on, or -1 (unknown or several)
  int gpu = -1;            // the local GPU it uses (index into HostTopology::gpus), or -1
};

struct HostBinding {
  bool bound = false;            // false: more ranks than cores (or none), nobody bound
  int cores_per_rank = 0;        // k; 0 when not bound
  int threads = 1;               // the OMP_NUM_THREADS every rank of the host gets by default
  std::vector<RankShare> ranks;  // one per local rank
};

// Steps 2 and 4 above for `local_size` ranks on a host of `topology`.
HostBinding PlanHostBinding(const HostTopology& topology, int local_size);

// OMP_NUM_THREADS for a rank that the user bound to `own_cores` cores on a
// host of `host_cores` cores with `local_size` ranks: its cores, but no more
// than an equal share of the host (a rank the user left unbound sees every
// core), and at least 1.
int ThreadsUnderUserBinding(int own_cores, int host_cores, int local_size);

// One line for local rank `local_rank` of `binding`, e.g.
// "local rank 1: cores 12-23 (CPUs 12-23,108-119) on NUMA node 0, GPU 1 (0000:2a:00.0, NUMA node 0),
// OMP_NUM_THREADS=12". Cores are numbered by their first CPU. `threads`, when given, replaces the plan's
// "OMP_NUM_THREADS=k" at the end (e.g. a value the user set).
std::string DescribeRankShare(const HostTopology& topology, const HostBinding& binding, int local_rank,
                              const std::string& threads = "");

// A one-line summary of the host's plan, e.g. "2 ranks on the 2 cores of
// node0: 1 core each" or "3 ranks on the 2 cores of h1: not bound".
std::string SummarizeHostBinding(const HostTopology& topology, const HostBinding& binding, const std::string& host);

// In the rank agent: binds this process as `mode` says ("share" or "user",
// above) as local rank `local_rank` of `local_size` on host `host`, and sets
// OMP_NUM_THREADS in its environment (for the program it starts) unless it
// is set. Returns what to print, one line each: errors, notes ("note: ...")
// and, with `report`, the binding that resulted ("binding: ...", from the
// process's own affinity).
std::vector<std::string> BindRankAgent(const std::string& mode, int local_rank, int local_size, const std::string& host,
                                       bool report);

}  // namespace accord::launcher
