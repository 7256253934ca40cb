#include "binding.h"

#include <sched.h>
#include <stdlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>

namespace accord::launcher {
namespace {

std::string Plural(int count, const char* one, const char* many) {
  return std::to_string(count) + " " + (count == 1 ? one : many);
}

// The first `k` free cores of `node`, or none when it has fewer.
std::vector<int> FreeOnNode(const HostTopology& topology, const std::vector<bool>& taken, int node, int k) {
  std::vector<int> picked;
  for (size_t i = 0; i < topology.cores.size() && static_cast<int>(picked.size()) < k; ++i) {
    if (!taken[i] && topology.cores[i].numa_node == node) picked.push_back(static_cast<int>(i));
  }
  if (static_cast<int>(picked.size()) < k) picked.clear();
  return picked;
}

void Give(const HostTopology& topology, const std::vector<int>& cores, std::vector<bool>* taken, RankShare* share) {
  share->cores = cores;
  std::set<int> nodes;
  for (int index : cores) {
    (*taken)[static_cast<size_t>(index)] = true;
    const CpuCore& core = topology.cores[static_cast<size_t>(index)];
    share->cpus.insert(share->cpus.end(), core.cpus.begin(), core.cpus.end());
    nodes.insert(core.numa_node);
  }
  std::sort(share->cpus.begin(), share->cpus.end());
  share->numa_node = nodes.size() == 1 ? *nodes.begin() : -1;
}

std::string NodeText(int node) { return node < 0 ? "" : " on NUMA node " + std::to_string(node); }

}  // namespace

HostBinding PlanHostBinding(const HostTopology& topology, int local_size) {
  HostBinding binding;
  if (local_size < 1) return binding;
  binding.ranks.resize(static_cast<size_t>(local_size));
  for (int i = 0; i < local_size && i < static_cast<int>(topology.gpus.size()); ++i) {
    binding.ranks[static_cast<size_t>(i)].gpu = i;
  }
  int cores = static_cast<int>(topology.cores.size());
  if (local_size > cores) return binding;  // unbound, one thread each
  int k = cores / local_size;
  binding.bound = true;
  binding.cores_per_rank = k;
  binding.threads = k;
  std::vector<bool> taken(topology.cores.size(), false);
  std::vector<bool> placed(binding.ranks.size(), false);
  // First the ranks with a GPU whose node is known, on that node if it has room.
  for (size_t i = 0; i < binding.ranks.size(); ++i) {
    RankShare& share = binding.ranks[i];
    if (share.gpu < 0) continue;
    int node = topology.gpus[static_cast<size_t>(share.gpu)].numa_node;
    if (node < 0) continue;
    std::vector<int> picked = FreeOnNode(topology, taken, node, k);
    if (picked.empty()) continue;
    Give(topology, picked, &taken, &share);
    placed[i] = true;
  }
  // The others, in order: the first node with room, else the first free cores.
  for (size_t i = 0; i < binding.ranks.size(); ++i) {
    if (placed[i]) continue;
    std::vector<int> picked;
    std::set<int> tried;
    for (size_t c = 0; c < topology.cores.size() && picked.empty(); ++c) {
      int node = topology.cores[c].numa_node;
      if (!taken[c] && tried.insert(node).second) picked = FreeOnNode(topology, taken, node, k);
    }
    if (picked.empty()) {  // no node has k free cores: the first k free ones
      for (size_t c = 0; c < topology.cores.size() && static_cast<int>(picked.size()) < k; ++c) {
        if (!taken[c]) picked.push_back(static_cast<int>(c));
      }
    }
    Give(topology, picked, &taken, &binding.ranks[i]);
  }
  return binding;
}

int ThreadsUnderUserBinding(int own_cores, int host_cores, int local_size) {
  int share = local_size > 0 ? host_cores / local_size : host_cores;
  return std::max(1, std::min(own_cores, share));
}

std::string DescribeRankShare(const HostTopology& topology, const HostBinding& binding, int local_rank,
                              const std::string& threads) {
  const RankShare& share = binding.ranks.at(static_cast<size_t>(local_rank));
  std::string line = "local rank " + std::to_string(local_rank) + ": ";
  if (share.cores.empty()) {
    line += "not bound";
  } else {
    std::vector<int> first_cpus;
    for (int index : share.cores) first_cpus.push_back(topology.cores[static_cast<size_t>(index)].cpus.front());
    std::sort(first_cpus.begin(), first_cpus.end());
    line += (share.cores.size() == 1 ? "core " : "cores ") + FormatCpuList(first_cpus);
    if (share.cpus.size() != share.cores.size()) line += " (CPUs " + FormatCpuList(share.cpus) + ")";
    line += NodeText(share.numa_node);
  }
  if (share.gpu >= 0) {
    const GpuDevice& gpu = topology.gpus[static_cast<size_t>(share.gpu)];
    line += ", GPU " + std::to_string(share.gpu) + " (" + gpu.pci_address + NodeText(gpu.numa_node) + ")";
  } else if (!topology.gpus.empty()) {
    line += ", no GPU of its own";
  }
  return line + ", " + (threads.empty() ? "OMP_NUM_THREADS=" + std::to_string(binding.threads) : threads);
}

std::string SummarizeHostBinding(const HostTopology& topology, const HostBinding& binding, const std::string& host) {
  int ranks = static_cast<int>(binding.ranks.size());
  std::string text = Plural(ranks, "rank", "ranks") + " on the " +
                     Plural(static_cast<int>(topology.cores.size()), "core", "cores") + " of " + host + ": ";
  if (!binding.bound) return text + "not bound";
  text += ranks == 1 ? "bound to " + Plural(binding.cores_per_rank, "core", "cores")
                     : Plural(binding.cores_per_rank, "core", "cores") + " each";
  if (!topology.gpus.empty()) text += ranks == 1 ? " near GPU 0" : ", local rank i near GPU i";
  return text;
}

std::vector<std::string> BindRankAgent(const std::string& mode, int local_rank, int local_size, const std::string& host,
                                       bool report) {
  std::vector<std::string> messages;
  int threads = 1;
  if (mode == "share") {
    HostTopology topology = ReadHostTopology(AffinityCpus(), "/sys", std::getenv("CUDA_VISIBLE_DEVICES"));
    HostBinding binding = PlanHostBinding(topology, local_size);
    threads = binding.threads;
    if (local_rank < 0 || local_rank >= local_size) {
      messages.push_back("local rank " + std::to_string(local_rank) + " of " + std::to_string(local_size) + " on " +
                         host + " is out of range; not bound");
    } else if (!binding.bound) {
      if (local_rank == 0) {
        messages.push_back("note: " + SummarizeHostBinding(topology, binding, host) +
                           ", OMP_NUM_THREADS=1 (more ranks than cores: the scheduler shares them)");
      }
    } else {
      const RankShare& share = binding.ranks[static_cast<size_t>(local_rank)];
      cpu_set_t set;
      CPU_ZERO(&set);
      for (int cpu : share.cpus) CPU_SET(cpu, &set);
      if (sched_setaffinity(0, sizeof(set), &set) != 0) {
        messages.push_back("local rank " + std::to_string(local_rank) + " on " + host + ": cannot bind to CPUs " +
                           FormatCpuList(share.cpus) + ": " + std::strerror(errno) + "; not bound");
      }
    }
  } else if (mode == "user") {
    int own = static_cast<int>(ReadHostTopology(AffinityCpus(), "/sys", nullptr).cores.size());
    int all = static_cast<int>(ReadHostTopology(OnlineCpus(), "/sys", nullptr).cores.size());
    threads = ThreadsUnderUserBinding(own, all, local_size);
  } else {
    messages.push_back("ACCORDRUN_BIND=" + mode + " is not understood (expected share or user); not bound");
    return messages;
  }
  if (std::getenv("OMP_NUM_THREADS") == nullptr) setenv("OMP_NUM_THREADS", std::to_string(threads).c_str(), 1);
  if (report) {
    messages.push_back("binding: local rank " + std::to_string(local_rank) + " of " + std::to_string(local_size) +
                       " on " + host + ": CPUs " + FormatCpuList(AffinityCpus()) +
                       ", OMP_NUM_THREADS=" + std::getenv("OMP_NUM_THREADS"));
  }
  return messages;
}

}  // namespace accord::launcher
