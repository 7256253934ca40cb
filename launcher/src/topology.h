// What one host offers its ranks: the physical cores a process may run on
// (each with its hardware threads, socket and NUMA node) and the NVIDIA GPUs
// its ranks would use (each with its NUMA node).
//
// ReadHostTopology reads them from sysfs; its root is a parameter, so tests
// hand it a tree they made. Tests of the binding plan (binding.h) describe a
// HostTopology directly. Everything here is a pure function of its
// arguments, except ReadHostTopology (the files) and the two functions that
// read this process's affinity; any thread may call them.
#pragma once

#include <string>
#include <vector>

#include "accord/status.h"

namespace accord::launcher {

struct CpuCore {
  std::vector<int> cpus;  // its hardware threads, ascending
  int package = 0;        // physical socket
  int numa_node = -1;     // -1: unknown
};

struct GpuDevice {
  std::string pci_address;  // e.g. 0000:17:00.0
  int numa_node = -1;       // -1: unknown (one-node machines report -1 too)
};

struct HostTopology {
  // Ordered by NUMA node, then socket, then first CPU, so that a run of
  // consecutive cores stays on one node where it can.
  std::vector<CpuCore> cores;
  // The GPUs the ranks see, in the order CUDA numbers them under
  // CUDA_DEVICE_ORDER=PCI_BUS_ID: local rank i uses gpus[i].
  std::vector<GpuDevice> gpus;
};

// Parses a Linux CPU list ("0-3,8,10-11"; empty: none) into ascending CPUs.
Result<std::vector<int>> ParseCpuList(const std::string& text);

// The CPU list form of ascending `cpus`, ranges joined: {0,1,2,5} -> "0-2,5".
std::string FormatCpuList(const std::vector<int>& cpus);

// The GPUs that CUDA_VISIBLE_DEVICES leaves visible, in its order: all when
// `visible` is null, none when it is empty, the listed indices otherwise
// (CUDA stops at the first index that does not exist). A list that names
// GPUs by UUID or MIG instance cannot be matched to PCI devices here: it
// gives none, and the ranks are placed by cores alone.
std::vector<GpuDevice> VisibleGpus(const std::vector<GpuDevice>& all, const char* visible);

// The topology of the host under `sysfs_root` (normally "/sys") restricted
// to `cpus` (the CPUs this process may run on): cores from
// devices/system/cpu/cpuN/topology, NUMA nodes from devices/system/node,
// NVIDIA GPUs (PCI vendor 0x10de, display or 3D controller) from
// bus/pci/devices in PCI address order, then VisibleGpus(`cuda_visible`).
// A CPU without topology files counts as a core of its own on node -1.
HostTopology ReadHostTopology(const std::vector<int>& cpus, const std::string& sysfs_root, const char* cuda_visible);

// The CPUs this process may run on (its affinity mask), ascending.
std::vector<int> AffinityCpus();

// The host's online CPUs, ascending (a process's mask may be narrower).
std::vector<int> OnlineCpus();

}  // namespace accord::launcher
