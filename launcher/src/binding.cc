#include "binding.h"

#include <sched.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>

#include "system_info.h"

namespace accord::launcher {

std::vector<int> CoreForLocalRank(const std::vector<std::vector<int>>& cores, int local_rank, int local_size) {
  if (local_size < 1 || local_size > static_cast<int>(cores.size()) || local_rank < 0 ||
      local_rank >= local_size) {
    return {};
  }
  return cores[static_cast<size_t>(local_rank)];
}

std::string BindToLocalCore(int local_rank, int local_size) {
  std::vector<std::vector<int>> cores = UsableCores();
  std::vector<int> cpus = CoreForLocalRank(cores, local_rank, local_size);
  if (cpus.empty()) {
    if (local_rank == 0) {
      char host[256] = {};
      gethostname(host, sizeof(host) - 1);
      std::cerr << "accordrun: note: " << local_size << " ranks on the " << cores.size()
                << (cores.size() == 1 ? " core" : " cores") << " of " << host << ": the ranks on " << host
                << " are not bound to cores" << std::endl;
    }
    return "";
  }
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int cpu : cpus) CPU_SET(cpu, &set);
  if (sched_setaffinity(0, sizeof(set), &set) != 0) {
    return std::string("cannot bind to CPU ") + std::to_string(cpus.front()) + ": " + std::strerror(errno);
  }
  return "";
}

}  // namespace accord::launcher
