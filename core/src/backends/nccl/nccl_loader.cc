#include "backends/nccl/nccl_loader.h"

#include <dlfcn.h>
#include <link.h>

#include <mutex>

#include <cuda_runtime.h>  // before the pragma: only NCCL's own declarations become hidden

// Everything NCCL's header declares is hidden, and so are the forwarders
// defined for those declarations below: they stay inside libaccord
// (nccl_loader.h says why).
#pragma GCC visibility push(hidden)
#include <nccl.h>
#pragma GCC visibility pop

#ifndef ACCORD_NCCL_BUILD_PATH
#define ACCORD_NCCL_BUILD_PATH "libnccl.so.2"
#endif

namespace accord {
namespace {

// The NCCL calls accord makes, in the order of Table::fn.
const char* const kSymbols[] = {"ncclGetVersion",     "ncclGetUniqueId",  "ncclCommInitRankConfig",
                                "ncclCommFinalize",   "ncclCommDestroy",  "ncclCommAbort",
                                "ncclGetErrorString", "ncclGetLastError", "ncclCommGetAsyncError",
                                "ncclReduce",         "ncclBroadcast",    "ncclAllReduce",
                                "ncclReduceScatter",  "ncclAllGather",    "ncclSend",
                                "ncclRecv",           "ncclGroupStart",   "ncclGroupEnd"};
enum Symbol {
  kGetVersion,
  kGetUniqueId,
  kCommInitRankConfig,
  kCommFinalize,
  kCommDestroy,
  kCommAbort,
  kGetErrorString,
  kGetLastError,
  kCommGetAsyncError,
  kReduce,
  kBroadcast,
  kAllReduce,
  kReduceScatter,
  kAllGather,
  kSend,
  kRecv,
  kGroupStart,
  kGroupEnd,
  kSymbolCount
};
static_assert(sizeof(kSymbols) / sizeof(kSymbols[0]) == kSymbolCount, "one name per symbol");

struct Table {
  NcclLibrary library;
  void* fn[kSymbolCount] = {};
};

std::string PathOf(void* handle, const std::string& fallback) {
  link_map* map = nullptr;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr && map->l_name != nullptr &&
      map->l_name[0] != '\0') {
    return map->l_name;
  }
  return fallback;
}

// Resolves every symbol of `handle`, or says which is missing.
bool Resolve(void* handle, const std::string& path, Table* table) {
  for (int i = 0; i < kSymbolCount; ++i) {
    table->fn[i] = dlsym(handle, kSymbols[i]);
    if (table->fn[i] == nullptr) {
      table->library.error = path + " has no " + kSymbols[i] + " (accord needs NCCL 2.14 or later)";
      return false;
    }
  }
  table->library.loaded = true;
  table->library.path = path;
  return true;
}

Table& Load() {
  static Table table;
  static std::once_flag once;
  std::call_once(once, [] {
    // 1. Already in the process.
    if (void* handle = dlopen("libnccl.so.2", RTLD_NOW | RTLD_NOLOAD)) {
      Resolve(handle, PathOf(handle, "libnccl.so.2"), &table);
      return;  // the process's NCCL or none: two in one process would not share a soname
    }
    // 2. The build's, then 3. the search path's.
    std::string failures;
    for (const char* candidate : {ACCORD_NCCL_BUILD_PATH, "libnccl.so.2"}) {
      void* handle = dlopen(candidate, RTLD_NOW | RTLD_GLOBAL);
      if (handle == nullptr) {
        const char* why = dlerror();
        failures += std::string(failures.empty() ? "" : "; ") + (why != nullptr ? why : candidate);
        continue;
      }
      if (Resolve(handle, PathOf(handle, candidate), &table)) return;
      failures += std::string(failures.empty() ? "" : "; ") + table.library.error;
    }
    table.library.error = "cannot load NCCL (" + failures + ")";
  });
  return table;
}

template <typename Fn>
Fn Get(Symbol symbol) {
  return reinterpret_cast<Fn>(Load().fn[symbol]);
}

}  // namespace

const NcclLibrary& LoadNccl() { return Load().library; }

}  // namespace accord

// The forwarders: NCCL's own signatures, hidden like their declarations.
extern "C" {

#define ACCORD_NCCL_FORWARD(name, symbol, params, args)         \
  ncclResult_t name params {                                    \
    auto fn = ::accord::Get<decltype(&name)>(::accord::symbol); \
    return fn == nullptr ? ncclSystemError : fn args;           \
  }

ACCORD_NCCL_FORWARD(ncclGetVersion, kGetVersion, (int* version), (version))
ACCORD_NCCL_FORWARD(ncclGetUniqueId, kGetUniqueId, (ncclUniqueId * id), (id))
ACCORD_NCCL_FORWARD(ncclCommInitRankConfig, kCommInitRankConfig,
                    (ncclComm_t * comm, int nranks, ncclUniqueId id, int rank, ncclConfig_t* config),
                    (comm, nranks, id, rank, config))
ACCORD_NCCL_FORWARD(ncclCommFinalize, kCommFinalize, (ncclComm_t comm), (comm))
ACCORD_NCCL_FORWARD(ncclCommDestroy, kCommDestroy, (ncclComm_t comm), (comm))
ACCORD_NCCL_FORWARD(ncclCommAbort, kCommAbort, (ncclComm_t comm), (comm))
ACCORD_NCCL_FORWARD(ncclCommGetAsyncError, kCommGetAsyncError, (ncclComm_t comm, ncclResult_t* error), (comm, error))
ACCORD_NCCL_FORWARD(ncclReduce, kReduce,
                    (const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op, int root,
                     ncclComm_t comm, cudaStream_t stream),
                    (send, recv, count, type, op, root, comm, stream))
ACCORD_NCCL_FORWARD(ncclBroadcast, kBroadcast,
                    (const void* send, void* recv, size_t count, ncclDataType_t type, int root, ncclComm_t comm,
                     cudaStream_t stream),
                    (send, recv, count, type, root, comm, stream))
ACCORD_NCCL_FORWARD(ncclAllReduce, kAllReduce,
                    (const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op, ncclComm_t comm,
                     cudaStream_t stream),
                    (send, recv, count, type, op, comm, stream))
ACCORD_NCCL_FORWARD(ncclReduceScatter, kReduceScatter,
                    (const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op, ncclComm_t comm,
                     cudaStream_t stream),
                    (send, recv, count, type, op, comm, stream))
ACCORD_NCCL_FORWARD(ncclAllGather, kAllGather,
                    (const void* send, void* recv, size_t count, ncclDataType_t type, ncclComm_t comm,
                     cudaStream_t stream),
                    (send, recv, count, type, comm, stream))
ACCORD_NCCL_FORWARD(ncclSend, kSend,
                    (const void* send, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                     cudaStream_t stream),
                    (send, count, type, peer, comm, stream))
ACCORD_NCCL_FORWARD(ncclRecv, kRecv,
                    (void* recv, size_t count, ncclDataType_t type, int peer, ncclComm_t comm, cudaStream_t stream),
                    (recv, count, type, peer, comm, stream))
ACCORD_NCCL_FORWARD(ncclGroupStart, kGroupStart, (), ())
ACCORD_NCCL_FORWARD(ncclGroupEnd, kGroupEnd, (), ())

#undef ACCORD_NCCL_FORWARD

const char* ncclGetErrorString(ncclResult_t result) {
  auto fn = ::accord::Get<decltype(&ncclGetErrorString)>(::accord::kGetErrorString);
  return fn != nullptr ? fn(result) : ::accord::LoadNccl().error.c_str();
}

const char* ncclGetLastError(ncclComm_t comm) {
  auto fn = ::accord::Get<decltype(&ncclGetLastError)>(::accord::kGetLastError);
  return fn != nullptr ? fn(comm) : ::accord::LoadNccl().error.c_str();
}

}  // extern "C"
