// Tests for PlanHostBinding on described hosts: which cores, which GPU and
// how many OpenMP threads each local rank gets, from this 2-core machine to
// a node of 2 sockets x 48 cores with 8 GPUs; and the lines that --dry-run
// prints.
#include "binding.h"

#include <catch2/catch.hpp>

#include <set>

namespace accord::launcher {
namespace {

// `sockets` x `cores_per_socket` cores, one NUMA node per socket (or none
// known), `threads` hardware threads per core numbered the way Linux does
// (CPU c + t * total cores is thread t of core c).
HostTopology Host(int sockets, int cores_per_socket, int threads = 1, bool numa_known = true) {
  HostTopology topology;
  int total = sockets * cores_per_socket;
  for (int c = 0; c < total; ++c) {
    CpuCore core;
    for (int t = 0; t < threads; ++t) core.cpus.push_back(c + t * total);
    core.package = c / cores_per_socket;
    core.numa_node = numa_known ? core.package : -1;
    topology.cores.push_back(core);
  }
  return topology;
}

void AddGpus(HostTopology* topology, const std::vector<int>& nodes) {
  for (size_t i = 0; i < nodes.size(); ++i) {
    topology->gpus.push_back({"0000:" + std::to_string(10 + i) + ":00.0", nodes[i]});
  }
}

std::vector<int> Range(int first, int count) {
  std::vector<int> out;
  for (int i = 0; i < count; ++i) out.push_back(first + i);
  return out;
}

// Every bound rank has k whole cores of its own, and no core is shared.
void CheckShares(const HostBinding& binding, int k) {
  REQUIRE(binding.bound);
  CHECK(binding.cores_per_rank == k);
  CHECK(binding.threads == k);
  std::set<int> used;
  for (size_t i = 0; i < binding.ranks.size(); ++i) {
    INFO("local rank " << i);
    CHECK(static_cast<int>(binding.ranks[i].cores.size()) == k);
    for (int core : binding.ranks[i].cores) CHECK(used.insert(core).second);
  }
}

TEST_CASE("This machine, 2 cores: one rank gets both, two ranks one each") {
  HostTopology host = Host(1, 2);
  HostBinding one = PlanHostBinding(host, 1);
  CheckShares(one, 2);
  CHECK(one.ranks[0].cpus == std::vector<int>{0, 1});
  CHECK(one.ranks[0].gpu == -1);

  HostBinding two = PlanHostBinding(host, 2);
  CheckShares(two, 1);
  CHECK(two.ranks[0].cpus == std::vector<int>{0});
  CHECK(two.ranks[1].cpus == std::vector<int>{1});
}

TEST_CASE("More ranks than cores: nobody is bound, one OpenMP thread each") {
  HostBinding three = PlanHostBinding(Host(1, 2), 3);
  CHECK_FALSE(three.bound);
  CHECK(three.cores_per_rank == 0);
  CHECK(three.threads == 1);
  REQUIRE(three.ranks.size() == 3);
  for (const RankShare& share : three.ranks) CHECK(share.cpus.empty());
  CHECK(PlanHostBinding(Host(1, 2), 0).ranks.empty());
}

TEST_CASE("1 socket x 16 cores, 4 ranks: 4 consecutive cores each, with their hyperthreads") {
  HostBinding binding = PlanHostBinding(Host(1, 16, 2), 4);
  CheckShares(binding, 4);
  for (int i = 0; i < 4; ++i) {
    INFO("local rank " << i);
    CHECK(binding.ranks[static_cast<size_t>(i)].cores == Range(4 * i, 4));
    std::vector<int> cpus = Range(4 * i, 4);
    std::vector<int> siblings = Range(16 + 4 * i, 4);
    cpus.insert(cpus.end(), siblings.begin(), siblings.end());
    CHECK(binding.ranks[static_cast<size_t>(i)].cpus == cpus);
    CHECK(binding.ranks[static_cast<size_t>(i)].numa_node == 0);
  }
  // 3 ranks on 16 cores: 5 each, the 16th core idle.
  HostBinding three = PlanHostBinding(Host(1, 16), 3);
  CheckShares(three, 5);
  CHECK(three.ranks[2].cores == Range(10, 5));
}

TEST_CASE("2 sockets x 48 cores, 8 GPUs on 2 NUMA nodes: 12 cores each, on the node of the rank's GPU") {
  HostTopology host = Host(2, 48, 2);
  AddGpus(&host, {0, 0, 0, 0, 1, 1, 1, 1});
  HostBinding binding = PlanHostBinding(host, 8);
  CheckShares(binding, 12);
  for (int i = 0; i < 8; ++i) {
    INFO("local rank " << i);
    const RankShare& share = binding.ranks[static_cast<size_t>(i)];
    CHECK(share.gpu == i);
    CHECK(share.numa_node == i / 4);
    CHECK(share.cores == Range(12 * i, 12));
  }
  CHECK(DescribeRankShare(host, binding, 5) ==
        "local rank 5: cores 60-71 (CPUs 60-71,156-167) on NUMA node 1, GPU 5 (0000:15:00.0 on NUMA node 1), "
        "OMP_NUM_THREADS=12");
  CHECK(SummarizeHostBinding(host, binding, "gpu7") ==
        "8 ranks on the 96 cores of gpu7: 12 cores each, local rank i near GPU i");
}

TEST_CASE("GPUs whose NUMA nodes interleave: each rank still lands on its GPU's node") {
  HostTopology host = Host(2, 8);
  AddGpus(&host, {1, 0, 1, 0});
  HostBinding binding = PlanHostBinding(host, 4);
  CheckShares(binding, 4);
  CHECK(binding.ranks[0].cores == Range(8, 4));
  CHECK(binding.ranks[1].cores == Range(0, 4));
  CHECK(binding.ranks[2].cores == Range(12, 4));
  CHECK(binding.ranks[3].cores == Range(4, 4));
  for (int i = 0; i < 4; ++i) CHECK(binding.ranks[static_cast<size_t>(i)].numa_node == (i % 2 == 0 ? 1 : 0));
}

TEST_CASE("All GPUs on one node: the equal share first, NUMA-local where it fits") {
  HostTopology host = Host(2, 8);
  AddGpus(&host, {0, 0, 0, 0});
  HostBinding binding = PlanHostBinding(host, 4);
  CheckShares(binding, 4);
  // Node 0 holds two shares of 4; ranks 2 and 3 go to node 1.
  CHECK(binding.ranks[0].numa_node == 0);
  CHECK(binding.ranks[1].numa_node == 0);
  CHECK(binding.ranks[2].cores == Range(8, 4));
  CHECK(binding.ranks[3].cores == Range(12, 4));
}

TEST_CASE("More ranks than GPUs, and GPUs with an unknown node") {
  HostTopology host = Host(1, 8);
  AddGpus(&host, {-1, -1});
  HostBinding binding = PlanHostBinding(host, 4);
  CheckShares(binding, 2);
  CHECK(binding.ranks[0].gpu == 0);
  CHECK(binding.ranks[1].gpu == 1);
  CHECK(binding.ranks[2].gpu == -1);
  CHECK(binding.ranks[3].cores == Range(6, 2));
  CHECK(DescribeRankShare(host, binding, 3) ==
        "local rank 3: cores 6-7 on NUMA node 0, no GPU of its own, "
        "OMP_NUM_THREADS=2");
  CHECK(DescribeRankShare(host, binding, 1) ==
        "local rank 1: cores 2-3 on NUMA node 0, GPU 1 (0000:11:00.0), "
        "OMP_NUM_THREADS=2");
}

TEST_CASE("Shares straddle sockets only when the ranks do not divide among them") {
  // 3 ranks on 2 x 4: 2 cores each, none straddles.
  HostBinding three = PlanHostBinding(Host(2, 4), 3);
  CheckShares(three, 2);
  CHECK(three.ranks[0].cores == Range(0, 2));
  CHECK(three.ranks[1].cores == Range(2, 2));
  CHECK(three.ranks[2].cores == Range(4, 2));
  for (const RankShare& share : three.ranks) CHECK(share.numa_node >= 0);
  // 3 ranks on 2 x 3: 2 cores each, and the last share must straddle.
  HostBinding odd = PlanHostBinding(Host(2, 3), 3);
  CheckShares(odd, 2);
  CHECK(odd.ranks[0].cores == Range(0, 2));
  CHECK(odd.ranks[1].cores == Range(3, 2));
  CHECK(odd.ranks[2].cores == std::vector<int>{2, 5});
  CHECK(odd.ranks[2].numa_node == -1);
  // No NUMA information: plain consecutive shares.
  HostBinding unknown = PlanHostBinding(Host(2, 4, 1, false), 2);
  CheckShares(unknown, 4);
  CHECK(unknown.ranks[1].cores == Range(4, 4));
  CHECK(DescribeRankShare(Host(2, 4, 1, false), unknown, 1) == "local rank 1: cores 4-7, OMP_NUM_THREADS=4");
}

TEST_CASE("Under the user's binding, OpenMP threads are the rank's cores, at most an equal share") {
  CHECK(ThreadsUnderUserBinding(1, 16, 4) == 1);   // --bind-to core
  CHECK(ThreadsUnderUserBinding(16, 16, 4) == 4);  // --bind-to none: every core visible
  CHECK(ThreadsUnderUserBinding(4, 96, 8) == 4);   // --map-by slot:PE=4
  CHECK(ThreadsUnderUserBinding(2, 2, 3) == 1);    // oversubscribed
  CHECK(ThreadsUnderUserBinding(0, 0, 1) == 1);
}

TEST_CASE("Summaries for one rank and for ranks left unbound") {
  HostTopology host = Host(1, 2);
  CHECK(SummarizeHostBinding(host, PlanHostBinding(host, 1), "node0") ==
        "1 rank on the 2 cores of node0: bound to "
        "2 cores");
  CHECK(SummarizeHostBinding(host, PlanHostBinding(host, 3), "h1") == "3 ranks on the 2 cores of h1: not bound");
  CHECK(DescribeRankShare(host, PlanHostBinding(host, 3), 2) == "local rank 2: not bound, OMP_NUM_THREADS=1");
  CHECK(DescribeRankShare(host, PlanHostBinding(host, 2), 1) ==
        "local rank 1: core 1 on NUMA node 0, "
        "OMP_NUM_THREADS=1");
}

}  // namespace
}  // namespace accord::launcher
