#include "topology.h"

#include <dirent.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <map>
#include <tuple>
#include <utility>

namespace accord::launcher {
namespace {

bool ReadLine(const std::string& path, std::string* line) {
  std::ifstream file(path);
  if (!file) return false;
  std::getline(file, *line);
  while (!line->empty() && std::isspace(static_cast<unsigned char>(line->back()))) line->pop_back();
  return true;
}

bool ReadInt(const std::string& path, int* value) {
  std::ifstream file(path);
  return static_cast<bool>(file >> *value);
}

// The entries of a directory whose names start with `prefix`, sorted.
std::vector<std::string> ListDirectory(const std::string& path, const std::string& prefix) {
  std::vector<std::string> names;
  DIR* dir = opendir(path.c_str());
  if (dir == nullptr) return names;
  while (dirent* entry = readdir(dir)) {
    std::string name = entry->d_name;
    if (name.rfind(prefix, 0) == 0 && name != "." && name != "..") names.push_back(name);
  }
  closedir(dir);
  std::sort(names.begin(), names.end());
  return names;
}

bool ParseNonNegative(const std::string& text, int* value) {
  if (text.empty() || text.size() > 9) return false;
  for (char c : text) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  }
  *value = std::stoi(text);
  return true;
}

// The comma-separated items of `text` (an empty text has none).
std::vector<std::string> SplitCommas(const std::string& text) {
  std::vector<std::string> items;
  size_t start = 0;
  while (start < text.size()) {
    size_t comma = text.find(',', start);
    items.push_back(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    start = comma == std::string::npos ? text.size() : comma + 1;
  }
  return items;
}

// CPU -> NUMA node, from devices/system/node/nodeN/cpulist.
std::map<int, int> NumaNodesOfCpus(const std::string& sysfs_root) {
  std::map<int, int> node_of;
  std::string base = sysfs_root + "/devices/system/node";
  for (const std::string& name : ListDirectory(base, "node")) {
    int node = 0;
    std::string list;
    if (!ParseNonNegative(name.substr(4), &node) || !ReadLine(base + "/" + name + "/cpulist", &list)) continue;
    Result<std::vector<int>> cpus = ParseCpuList(list);
    if (!cpus.ok()) continue;
    for (int cpu : *cpus) node_of[cpu] = node;
  }
  return node_of;
}

std::vector<GpuDevice> NvidiaGpus(const std::string& sysfs_root) {
  std::vector<GpuDevice> gpus;
  std::string base = sysfs_root + "/bus/pci/devices";
  for (const std::string& address : ListDirectory(base, "")) {
    std::string vendor;
    std::string device_class;
    if (!ReadLine(base + "/" + address + "/vendor", &vendor) || vendor != "0x10de") continue;
    if (!ReadLine(base + "/" + address + "/class", &device_class)) continue;
    // 0x0300xx: VGA controller, 0x0302xx: 3D controller (the data-center GPUs).
    if (device_class.rfind("0x0300", 0) != 0 && device_class.rfind("0x0302", 0) != 0) continue;
    GpuDevice gpu;
    gpu.pci_address = address;
    int node = -1;
    if (ReadInt(base + "/" + address + "/numa_node", &node) && node >= 0) gpu.numa_node = node;
    gpus.push_back(gpu);
  }
  return gpus;
}

}  // namespace

Result<std::vector<int>> ParseCpuList(const std::string& text) {
  std::vector<int> cpus;
  for (const std::string& part : SplitCommas(text)) {
    size_t dash = part.find('-');
    int first = 0;
    int last = 0;
    bool ok = false;
    if (dash == std::string::npos) {
      ok = ParseNonNegative(part, &first);
      last = first;
    } else {
      ok = ParseNonNegative(part.substr(0, dash), &first) && ParseNonNegative(part.substr(dash + 1), &last);
    }
    if (!ok || last < first || last - first >= CPU_SETSIZE) {
      return Status::InvalidArgument("'" + text + "' is not a CPU list: '" + part + "' is not N or N-M");
    }
    for (int cpu = first; cpu <= last; ++cpu) cpus.push_back(cpu);
  }
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  return cpus;
}

std::string FormatCpuList(const std::vector<int>& cpus) {
  std::string text;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!text.empty()) text += ",";
    text += std::to_string(cpus[i]);
    if (j > i) text += "-" + std::to_string(cpus[j]);
    i = j + 1;
  }
  return text;
}

std::vector<GpuDevice> VisibleGpus(const std::vector<GpuDevice>& all, const char* visible) {
  if (visible == nullptr) return all;
  std::vector<GpuDevice> gpus;
  for (std::string item : SplitCommas(visible)) {
    item.erase(0, item.find_first_not_of(' '));
    item.erase(item.find_last_not_of(' ') + 1);
    int index = 0;
    if (!ParseNonNegative(item, &index)) {
      // A UUID or MIG name: which PCI device it is cannot be told from sysfs.
      if (item.empty() || item[0] == '-') break;  // "-1" hides the rest, as for CUDA
      return {};
    }
    if (index >= static_cast<int>(all.size())) break;
    gpus.push_back(all[static_cast<size_t>(index)]);
  }
  return gpus;
}

HostTopology ReadHostTopology(const std::vector<int>& cpus, const std::string& sysfs_root, const char* cuda_visible) {
  HostTopology topology;
  std::map<int, int> node_of = NumaNodesOfCpus(sysfs_root);
  auto node_of_cpu = [&node_of](int cpu) {
    auto node = node_of.find(cpu);
    return node == node_of.end() ? -1 : node->second;
  };
  std::map<std::pair<int, int>, size_t> core_index;  // (package, core id) -> index
  bool known = true;
  for (int cpu : cpus) {
    std::string base = sysfs_root + "/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
    int package = 0;
    int core = 0;
    if (!ReadInt(base + "physical_package_id", &package) || !ReadInt(base + "core_id", &core)) {
      known = false;
      break;
    }
    auto [it, inserted] = core_index.emplace(std::make_pair(package, core), topology.cores.size());
    if (inserted) {
      CpuCore entry;
      entry.package = package;
      entry.numa_node = node_of_cpu(cpu);
      topology.cores.push_back(entry);
    }
    topology.cores[it->second].cpus.push_back(cpu);
  }
  if (!known) {  // no topology: every CPU a core of its own
    topology.cores.clear();
    for (int cpu : cpus) {
      CpuCore entry;
      entry.cpus = {cpu};
      entry.numa_node = node_of_cpu(cpu);
      topology.cores.push_back(entry);
    }
  }
  for (CpuCore& core : topology.cores) std::sort(core.cpus.begin(), core.cpus.end());
  std::stable_sort(topology.cores.begin(), topology.cores.end(), [](const CpuCore& a, const CpuCore& b) {
    return std::make_tuple(a.numa_node, a.package, a.cpus.front()) <
           std::make_tuple(b.numa_node, b.package, b.cpus.front());
  });
  topology.gpus = VisibleGpus(NvidiaGpus(sysfs_root), cuda_visible);
  return topology;
}

std::vector<int> AffinityCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return OnlineCpus();
  std::vector<int> cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  }
  return cpus;
}

std::vector<int> OnlineCpus() {
  std::string list;
  if (ReadLine("/sys/devices/system/cpu/online", &list)) {
    Result<std::vector<int>> cpus = ParseCpuList(list);
    if (cpus.ok() && !cpus->empty()) return *cpus;
  }
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  std::vector<int> cpus;
  for (int cpu = 0; cpu < (online > 0 ? online : 1); ++cpu) cpus.push_back(cpu);
  return cpus;
}

}  // namespace accord::launcher
