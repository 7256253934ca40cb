#include "backends/device_selection.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "backends/staged/staged_collectives.h"
#include "common/logging.h"
#include "device/device_factory.h"

#if ACCORD_WITH_NCCL
#include "backends/nccl/nccl_collectives.h"
#endif

namespace accord {

namespace {

// Each rank's description of its GPU travels in a record of this many
// bytes (truncated if longer; host names are at most 64).
constexpr size_t kIdentityBytes = 160;

std::string HostName() {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  return host;
}

std::string Rank(const DeviceSelection& set, int set_rank) { return std::to_string(set.ranks[set_rank]); }

// Step 1: every rank's "host pci-bus-id", or "? reason" for a rank that
// cannot name its device.
Result<std::vector<std::string>> ExchangeIdentities(const DeviceSelection& set) {
  const int size = static_cast<int>(set.ranks.size());
  Result<std::string> identity = set.api->DeviceIdentity(set.ordinal);
  std::string mine = identity.ok() ? HostName() + " " + *identity : "? " + identity.status().message();
  mine.resize(kIdentityBytes, '\0');
  std::vector<char> all(kIdentityBytes * static_cast<size_t>(size));
  std::memcpy(all.data() + kIdentityBytes * static_cast<size_t>(set.set_rank), mine.data(), kIdentityBytes);
  ACCORD_RETURN_IF_ERROR(set.host->Allgatherv(
      all.data(), std::vector<int64_t>(size, static_cast<int64_t>(kIdentityBytes)), DataType::kUInt8));
  std::vector<std::string> gpus;
  for (int q = 0; q < size; ++q) {
    const char* record = all.data() + kIdentityBytes * q;
    gpus.emplace_back(record, strnlen(record, kIdentityBytes));
  }
  return gpus;
}

// Step 2: why NCCL cannot serve the set, or empty if it can.
std::string WhyNoNccl(const DeviceSelection& set, const std::vector<std::string>& gpus, std::string* shared) {
  for (size_t a = 0; a < gpus.size() && shared->empty(); ++a) {
    for (size_t b = a + 1; b < gpus.size() && shared->empty(); ++b) {
      if (gpus[a] == gpus[b]) {
        *shared = "ranks " + Rank(set, a) + " and " + Rank(set, b) + " both use the GPU " + gpus[a];
      }
    }
  }
  if (!ACCORD_WITH_NCCL) return "this build of accord has no NCCL";
  if (std::string(set.api->name()) != "cuda") {
    return std::string("CUDA tensors are served by the ") + set.api->name() + " (ACCORD_CUDA_HOST_EMULATION)";
  }
  if (!shared->empty()) return *shared + " (NCCL cannot run two ranks of one communicator on one GPU)";
  return "";
}

// Step 4: NCCL's communicator for the set, with `staged` as its fallback.
Result<std::unique_ptr<DeviceCollectives>> MakeNccl(const DeviceSelection& set,
                                                    std::unique_ptr<DeviceCollectives> staged, Status* agreed) {
#if ACCORD_WITH_NCCL
  std::vector<char> message(1 + kNcclUniqueIdBytes, '\0');
  if (set.set_rank == 0) {
    Result<std::string> id = NcclUniqueIdBytes();
    const std::string& body = id.ok() ? *id : id.status().message();
    message[0] = id.ok() ? 1 : 0;
    std::memcpy(message.data() + 1, body.data(), std::min(body.size(), kNcclUniqueIdBytes));
  }
  ACCORD_RETURN_IF_ERROR(
      set.host->Broadcast(message.data(), static_cast<int64_t>(message.size()), DataType::kUInt8, 0));
  if (message[0] != 1) {
    *agreed = Status::Internal("process set " + std::to_string(set.set_id) + ": rank " + Rank(set, 0) +
                               " could not make an NCCL unique id: " +
                               std::string(message.data() + 1, strnlen(message.data() + 1, kNcclUniqueIdBytes)));
    return std::unique_ptr<DeviceCollectives>();
  }
  NcclSetup setup;
  setup.set_rank = set.set_rank;
  setup.set_size = static_cast<int>(set.ranks.size());
  setup.ordinal = set.ordinal;
  setup.unique_id.assign(message.data() + 1, kNcclUniqueIdBytes);
  setup.timeout_seconds = set.timeout_seconds;
  setup.fallback = std::move(staged);
  // A failure here is this rank's own: the others may have succeeded and
  // wait for it, so it is fatal.
  return MakeNcclCollectives(std::move(setup));
#else
  return Status::Unimplemented("this build of accord has no NCCL support");
#endif
}

}  // namespace

DeviceSupport GetDeviceSupport() {
  DeviceSupport support;
  support.cuda_built = CudaBuilt();
  support.cuda_version = CudaVersionBuilt();
#if ACCORD_WITH_NCCL
  support.nccl_built = true;
  support.nccl_version = NcclVersion();
#endif
  return support;
}

Result<std::unique_ptr<DeviceCollectives>> SelectDeviceCollectives(const DeviceSelection& set, Status* agreed) {
  ACCORD_ASSIGN_OR_RETURN(const std::vector<std::string> gpus, ExchangeIdentities(set));
  for (size_t q = 0; q < gpus.size(); ++q) {
    if (gpus[q].rfind("? ", 0) == 0) {
      *agreed = Status::Internal("rank " + Rank(set, q) + " cannot use its GPU: " + gpus[q].substr(2));
      return std::unique_ptr<DeviceCollectives>();
    }
  }
  std::string shared;
  const std::string no_nccl = WhyNoNccl(set, gpus, &shared);
  // Step 3.
  if (set.mode == GpuOperations::kNccl && !no_nccl.empty()) {
    *agreed = Status::Internal(
        "ACCORD_GPU_OPERATIONS=nccl, but NCCL cannot run for process set " + std::to_string(set.set_id) + ": " +
        no_nccl +
        (shared.empty() ? ""
                        : ". Give each rank its own GPU (e.g. torch.cuda.set_device(hvd.local_rank())), or set "
                          "ACCORD_GPU_OPERATIONS=mpi to go through host memory"));
    return std::unique_ptr<DeviceCollectives>();
  }
  auto staged = std::make_unique<StagedCollectives>(set.host, set.api, set.ordinal, set.set_rank, set.timeout_seconds);
  if (set.mode != GpuOperations::kMpi && no_nccl.empty()) return MakeNccl(set, std::move(staged), agreed);
  if (set.mode == GpuOperations::kAuto && set.set_rank == 0 && std::string(set.api->name()) == "cuda") {
    ACCORD_LOG(kInfo) << "process set " << set.set_id
                      << ": CUDA tensors go through MPI and host memory, not NCCL: " << no_nccl;
  }
  return std::unique_ptr<DeviceCollectives>(std::move(staged));
}

}  // namespace accord
