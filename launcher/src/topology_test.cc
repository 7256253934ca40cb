// Tests for topology.h: CPU lists, CUDA_VISIBLE_DEVICES, and reading a
// host's cores, NUMA nodes and GPUs from a sysfs tree made for the test.
#include "topology.h"

#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace accord::launcher {
namespace {

namespace fs = std::filesystem;

TEST_CASE("CPU lists are parsed and formatted with ranges") {
  CHECK(ParseCpuList("0-3,8,10-11").value() == std::vector<int>{0, 1, 2, 3, 8, 10, 11});
  CHECK(ParseCpuList("5,1,1-2").value() == std::vector<int>{1, 2, 5});
  CHECK(ParseCpuList("").value().empty());
  for (const char* bad : {"a", "3-1", "1,,2", "-1", "0-", "1-2-3", "0-99999999"}) {
    INFO(bad);
    Result<std::vector<int>> parsed = ParseCpuList(bad);
    REQUIRE_FALSE(parsed.ok());
    CHECK(parsed.status().message().find("is not a CPU list") != std::string::npos);
  }
  CHECK(FormatCpuList({0, 1, 2, 5, 7, 8}) == "0-2,5,7-8");
  CHECK(FormatCpuList({4}) == "4");
  CHECK(FormatCpuList({}).empty());
}

TEST_CASE("CUDA_VISIBLE_DEVICES picks and orders the GPUs the ranks see") {
  std::vector<GpuDevice> all = {{"0000:17:00.0", 0}, {"0000:2a:00.0", 0}, {"0000:8a:00.0", 1}};
  auto addresses = [](const std::vector<GpuDevice>& gpus) {
    std::vector<std::string> out;
    for (const GpuDevice& gpu : gpus) out.push_back(gpu.pci_address);
    return out;
  };
  CHECK(VisibleGpus(all, nullptr).size() == 3);
  CHECK(VisibleGpus(all, "").empty());
  CHECK(addresses(VisibleGpus(all, "2,0")) == std::vector<std::string>{"0000:8a:00.0", "0000:17:00.0"});
  // CUDA stops at the first index that does not exist, or at -1.
  CHECK(addresses(VisibleGpus(all, "1,7,0")) == std::vector<std::string>{"0000:2a:00.0"});
  CHECK(addresses(VisibleGpus(all, "0,-1,2")) == std::vector<std::string>{"0000:17:00.0"});
  // UUIDs cannot be matched to PCI devices here: no GPU placement.
  CHECK(VisibleGpus(all, "GPU-8e2f7a5e-aaaa-bbbb-cccc-0123456789ab").empty());
}

// A sysfs tree under a temporary directory.
class FakeSysfs {
 public:
  FakeSysfs() {
    char pattern[] = "/tmp/accord-sysfs-XXXXXX";
    root_ = mkdtemp(pattern);
  }
  ~FakeSysfs() {
    std::error_code ignored;
    fs::remove_all(root_, ignored);
  }
  const std::string& root() const { return root_; }
  void Write(const std::string& path, const std::string& text) const {
    fs::path full = fs::path(root_) / path;
    fs::create_directories(full.parent_path());
    std::ofstream(full) << text << "\n";
  }
  void Cpu(int cpu, int package, int core) const {
    std::string base = "devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
    Write(base + "physical_package_id", std::to_string(package));
    Write(base + "core_id", std::to_string(core));
  }
  void Pci(const std::string& address, const std::string& vendor, const std::string& device_class, int node) const {
    std::string base = "bus/pci/devices/" + address + "/";
    Write(base + "vendor", vendor);
    Write(base + "class", device_class);
    Write(base + "numa_node", std::to_string(node));
  }

 private:
  std::string root_;
};

TEST_CASE("A two-socket host with hyperthreads, its NUMA nodes and its NVIDIA GPUs, read from sysfs") {
  FakeSysfs sysfs;
  // 2 sockets x 2 cores x 2 threads, numbered the way Linux often does:
  // CPUs 0-3 are the first threads of the 4 cores (alternating sockets),
  // 4-7 their siblings.
  for (int cpu = 0; cpu < 8; ++cpu) sysfs.Cpu(cpu, cpu % 2, (cpu % 4) / 2);
  sysfs.Write("devices/system/node/node0/cpulist", "0,2,4,6");
  sysfs.Write("devices/system/node/node1/cpulist", "1,3,5,7");
  sysfs.Write("devices/system/node/online", "0-1");     // not a node directory
  sysfs.Pci("0000:8a:00.0", "0x10de", "0x030200", 1);   // 3D controller (data-center GPU)
  sysfs.Pci("0000:17:00.0", "0x10de", "0x030000", 0);   // VGA controller
  sysfs.Pci("0000:18:00.0", "0x10de", "0x040300", 0);   // NVIDIA audio: not a GPU
  sysfs.Pci("0000:00:02.0", "0x8086", "0x030000", -1);  // another vendor's GPU
  sysfs.Pci("0000:c1:00.0", "0x10de", "0x030200", -1);  // NUMA node unknown

  HostTopology topology = ReadHostTopology({0, 1, 2, 3, 4, 5, 6, 7}, sysfs.root(), nullptr);
  REQUIRE(topology.cores.size() == 4);
  // Ordered by node: node 0's cores first, each with both its threads.
  CHECK(topology.cores[0].cpus == std::vector<int>{0, 4});
  CHECK(topology.cores[1].cpus == std::vector<int>{2, 6});
  CHECK(topology.cores[2].cpus == std::vector<int>{1, 5});
  CHECK(topology.cores[3].cpus == std::vector<int>{3, 7});
  CHECK(topology.cores[0].numa_node == 0);
  CHECK(topology.cores[3].numa_node == 1);
  CHECK(topology.cores[3].package == 1);
  REQUIRE(topology.gpus.size() == 3);
  CHECK(topology.gpus[0].pci_address == "0000:17:00.0");
  CHECK(topology.gpus[0].numa_node == 0);
  CHECK(topology.gpus[1].pci_address == "0000:8a:00.0");
  CHECK(topology.gpus[1].numa_node == 1);
  CHECK(topology.gpus[2].numa_node == -1);

  // An affinity mask of some CPUs: only their cores, and only those threads.
  HostTopology narrow = ReadHostTopology({1, 3, 5}, sysfs.root(), "1");
  REQUIRE(narrow.cores.size() == 2);
  CHECK(narrow.cores[0].cpus == std::vector<int>{1, 5});
  CHECK(narrow.cores[1].cpus == std::vector<int>{3});
  REQUIRE(narrow.gpus.size() == 1);
  CHECK(narrow.gpus[0].pci_address == "0000:8a:00.0");
}

TEST_CASE("CPUs without topology files count as cores of their own") {
  FakeSysfs sysfs;
  sysfs.Cpu(0, 0, 0);  // cpu1 has no files
  HostTopology topology = ReadHostTopology({0, 1}, sysfs.root(), nullptr);
  REQUIRE(topology.cores.size() == 2);
  CHECK(topology.cores[0].cpus == std::vector<int>{0});
  CHECK(topology.cores[1].cpus == std::vector<int>{1});
  CHECK(topology.cores[1].numa_node == -1);
  CHECK(topology.gpus.empty());
}

TEST_CASE("This machine: every CPU of the affinity mask in exactly one core") {
  std::vector<int> cpus = AffinityCpus();
  REQUIRE_FALSE(cpus.empty());
  HostTopology topology = ReadHostTopology(cpus, "/sys", nullptr);
  REQUIRE_FALSE(topology.cores.empty());
  std::vector<int> seen;
  for (const CpuCore& core : topology.cores) {
    CHECK_FALSE(core.cpus.empty());
    seen.insert(seen.end(), core.cpus.begin(), core.cpus.end());
  }
  std::sort(seen.begin(), seen.end());
  CHECK(seen == cpus);
  std::vector<int> online = OnlineCpus();
  CHECK(std::includes(online.begin(), online.end(), cpus.begin(), cpus.end()));
}

}  // namespace
}  // namespace accord::launcher
