// accord's public C++ API.
//
// Typical use on every rank:
//
//   ACCORD_RETURN_IF_ERROR(accord::Init());
//   accord::AllreduceOptions opts;
//   opts.name = "grad.fc1";
//   auto handle = accord::Allreduce(grad, grad, opts);   // in place, never blocks on the network
//   ...
//   ACCORD_RETURN_IF_ERROR(handle->Wait());
//   ACCORD_RETURN_IF_ERROR(accord::Shutdown());
//
// Thread safety: every function may be called from any thread. Enqueue
// functions return at once; the coordinator thread (one per process, the only
// thread that calls MPI after Init) negotiates and executes the operation.
// Operations submitted with the same name on every rank are matched by name,
// so ranks may submit in different orders; unnamed operations get the name
// "<collective>.noname.<n>", which matches only if every rank submits its
// unnamed operations of that kind in the same order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "accord/handle.h"
#include "accord/status.h"
#include "accord/tensor.h"

namespace accord {

// ---------------------------------------------------------------- lifecycle

struct InitOptions {
  // Process sets created at init, each a list of global ranks. They get ids
  // 1, 2, ... in this order (0 is the global set). Every rank passes the same.
  std::vector<std::vector<int>> process_sets;
};

// Initialises accord. Adopts MPI if the caller already initialised it,
// otherwise initialises it requesting MPI_THREAD_MULTIPLE. Config is read
// from ACCORD_* (fallback HOROVOD_*) environment variables here, once.
// May be called again after Shutdown().
Status Init(const InitOptions& options = {});
// Stops the coordinator on every rank (the others stop in their next
// negotiation round), fails every pending handle with kShutDown, and frees
// accord's communicators. MPI itself stays initialised until process exit
// if accord initialised it, so Init() can be called again.
Status Shutdown();
bool IsInitialized();

// Rank queries; -1 when not initialised.
int Rank();
int Size();
int LocalRank();  // rank among the processes on this host
int LocalSize();
int CrossRank();  // rank among the processes with this local rank
int CrossSize();

// The MPI thread level provided (MPI_THREAD_*), and whether it is MULTIPLE.
int MpiThreadLevel();
bool MpiThreadsSupported();

// What this build can run: `cuda` says that collectives on CUDA tensors were
// built (through MPI and host memory at least), `nccl` that the NCCL backend
// was; the versions are those built against ("CUDA 13.0") and loaded
// ("NCCL 2.28.9"), empty when not built. Whether a GPU is there is only
// known when a CUDA tensor is used.
struct BuildInfo {
  bool mpi = true;
  bool cuda = false;
  bool nccl = false;
  std::string cuda_version;
  std::string nccl_version;
};
BuildInfo GetBuildInfo();

// Device memory from the implementation accord serves CUDA tensors with
// (CUDA, or the host emulation of ACCORD_CUDA_HOST_EMULATION): for outputs
// that no framework allocates, such as those of the DLPack bindings. Needs
// Init. FreeDeviceMemory, callable from any thread, also after Shutdown,
// waits for the device's queued work before it frees.
Result<void*> AllocateDeviceMemory(int ordinal, size_t bytes);
void FreeDeviceMemory(int ordinal, void* data);

// ------------------------------------------------------------------ metrics

// Counters of this process since the last Init(), all zero before it. Read
// with relaxed atomics: exact once the operations they count have completed.
// See docs/troubleshooting.md, "Metrics".
struct Metrics {
  uint64_t collectives = 0;            // collective calls that moved tensor data (one per fused batch)
  uint64_t tensors = 0;                // tensors those collectives carried
  uint64_t bytes = 0;                  // bytes of this rank's inputs to them
  double fusion_ratio = 0.0;           // tensors / collectives (0 before the first)
  uint64_t negotiation_rounds = 0;     // negotiation rounds, every process set counted
  uint64_t cache_hits = 0;             // requests announced through the response cache (as a bit)
  uint64_t cache_misses = 0;           // cacheable requests announced in full (as a message)
  double cache_hit_rate = 0.0;         // hits / (hits + misses) (0 before the first lookup)
  double negotiation_seconds = 0.0;    // coordinator time in negotiation rounds (steady clock)
  double collective_seconds = 0.0;     // coordinator time executing collectives (steady clock)
  uint64_t driven_iterations = 0;      // coordinator iterations (a round of every set and what they agreed)
                                       // run by a thread waiting for its result (ACCORD_FAST_PATH)
  uint64_t carried_allreduces = 0;     // allreduces whose inputs travelled with the negotiation round
                                       // and were reduced here (ACCORD_CARRY_SMALL_ALLREDUCE)
  int64_t fusion_threshold_bytes = 0;  // the fusion threshold in force (ACCORD_AUTOTUNE may change it)
  double cycle_time_ms = 0.0;          // the minimum cycle time in force (likewise)
  bool cache_enabled = false;          // the response cache is in use (ACCORD_CACHE_CAPACITY > 0; the
                                       // autotuner may switch it off)
  bool autotuning = false;             // ACCORD_AUTOTUNE's search is still running on this rank
};
// Any thread; valid at any time (after Shutdown: the counts up to it).
Metrics GetMetrics();

// ----------------------------------------------------------------- timeline

// Starts writing a Chrome trace-event timeline (Perfetto, chrome://tracing)
// of every operation to `path`, which rank 0 creates or truncates; the other
// ranks write nothing and return OK. `mark_cycles` also marks each
// coordinator iteration that executed something. Replaces a running
// timeline. ACCORD_TIMELINE=path starts one at Init. Needs Init; fails with
// kInvalidArgument if rank 0 cannot create the file. See
// docs/troubleshooting.md, "Timeline".
Status StartTimeline(const std::string& path, bool mark_cycles = false);
// Flushes and closes the timeline (a complete JSON array). Shutdown() does
// this too. No-op if none is running.
Status StopTimeline();

// ------------------------------------------------------------ process sets

using ProcessSetId = int32_t;
inline constexpr ProcessSetId kGlobalProcessSet = 0;

// Adds a process set with the given global ranks (sorted, unique). Every
// rank must call it, with the same ranks, in the same order relative to other
// AddProcessSet/RemoveProcessSet calls. Blocks until the set exists.
Result<ProcessSetId> AddProcessSet(const std::vector<int>& ranks);
// Removes a set; its pending operations fail with kAborted. Same rules as Add.
Status RemoveProcessSet(ProcessSetId id);
// Global ranks of a set, or an error if it does not exist.
Result<std::vector<int>> ProcessSetRanks(ProcessSetId id);
// This process's rank within the set, or -1 if it is not a member.
Result<int> ProcessSetRank(ProcessSetId id);
// Ids of all sets, the global one included, ascending.
std::vector<ProcessSetId> ProcessSetIds();

// ------------------------------------------------------------- collectives

// kAdasum is the adaptive summation of Maleki et al. (MLSys 2021), for
// allreduce only: float16, bfloat16, float32 and float64 CPU tensors over a
// process set whose size is a power of two (see Allreduce below).
enum class ReduceOp : uint8_t { kAverage = 0, kSum = 1, kMin = 2, kMax = 3, kProduct = 4, kAdasum = 5 };
const char* ReduceOpName(ReduceOp op);

// Options shared by every collective.
struct CollectiveOptions {
  std::string name;  // empty: auto-named
  ProcessSetId process_set = kGlobalProcessSet;
  // CUDA tensors: the stream (a cudaStream_t) on which the inputs are
  // produced. accord's collective reads them only after the work submitted
  // to it before the enqueue has run; the host does not wait. Null is the
  // legacy default stream. Ignored for CPU tensors.
  void* stream = nullptr;
};

struct AllreduceOptions : CollectiveOptions {
  ReduceOp op = ReduceOp::kAverage;
  double prescale_factor = 1.0;   // applied to the input before the reduction
  double postscale_factor = 1.0;  // applied to the result after it
};

struct ReducescatterOptions : CollectiveOptions {
  ReduceOp op = ReduceOp::kAverage;  // kSum or kAverage
  double prescale_factor = 1.0;
  double postscale_factor = 1.0;
};

// Reduces `input` across the ranks of the process set into `output`, which
// must have input's dtype, shape and device; output may be input (in place)
// but must not otherwise overlap it (kInvalidArgument).
// Average divides by the process set's size. Integer results of a scaled or
// averaged reduction are rounded toward zero.
// Adasum combines the ranks' vectors pairwise, Adasum(a, b) =
// (1 - a.b / (2|a|^2)) a + (1 - a.b / (2|b|^2)) b, ranks at distance 1 first,
// then 2, 4, ...; each tensor of a grouped call gets its own coefficients,
// and a zero vector's coefficient is 1 (Adasum(0, b) = b). The prescale
// factor applies before, the postscale factor after. Other dtypes fail with
// kInvalidArgument; CUDA tensors, and a process set whose size is not a power
// of two, with kUnimplemented (at enqueue, so on every rank). See
// docs/python.md, "Adasum".
Result<Handle> Allreduce(const TensorView& input, const TensorView& output, const AllreduceOptions& options = {});

// Concatenates every rank's input along dim 0 (dim 0 may differ per rank; the
// other dims must agree). The output comes from `allocator`, or from the heap
// (kept alive by the handle) when it is null.
Result<Handle> Allgather(const TensorView& input, const Allocator& allocator = nullptr,
                         const CollectiveOptions& options = {});

// Overwrites `tensor` on every rank with root_rank's (a rank of the set).
Result<Handle> Broadcast(const TensorView& tensor, int root_rank, const CollectiveOptions& options = {});

// Sends splits[j] rows (dim 0) of input to rank j; empty `splits` splits dim 0
// evenly (it must then divide by the set size). The output concatenates what
// every rank sent here, in rank order; Handle::received_splits() says how
// many rows came from each rank.
Result<Handle> Alltoall(const TensorView& input, const std::vector<int64_t>& splits = {},
                        const Allocator& allocator = nullptr, const CollectiveOptions& options = {});

// Reduces across ranks, then rank i keeps the i-th block of dim 0. Dim 0 is
// split as evenly as possible; the first (dim0 % size) ranks get one row more.
Result<Handle> Reducescatter(const TensorView& input, const Allocator& allocator = nullptr,
                             const ReducescatterOptions& options = {});

// Grouped forms: the group is negotiated as a unit and executed in one round,
// after every member is ready on every rank. `options.name` names the group
// (members are "<name>.<i>"). outputs[i] of GroupedAllreduce may be inputs[i]
// (in place); an output that overlaps any other input or output of the group
// is refused (kInvalidArgument).
Result<Handle> GroupedAllreduce(const std::vector<TensorView>& inputs, const std::vector<TensorView>& outputs,
                                const AllreduceOptions& options = {});
Result<Handle> GroupedAllgather(const std::vector<TensorView>& inputs, const Allocator& allocator = nullptr,
                                const CollectiveOptions& options = {});
Result<Handle> GroupedReducescatter(const std::vector<TensorView>& inputs, const Allocator& allocator = nullptr,
                                    const ReducescatterOptions& options = {});

// Completes once every rank of the set has called Barrier.
Result<Handle> Barrier(ProcessSetId process_set = kGlobalProcessSet);

// Declares that this rank has no more work. Until every rank of the set has
// joined, this rank takes part in the other ranks' allreduces (Sum or
// Average) with zeros; Average still divides by the set size. Any other
// collective (or reduce op) submitted while some rank has joined fails on
// every rank that submitted it with kMismatch, naming the joined ranks; the
// job can go on (e.g. every rank joins). The handle's last_joined_rank() is
// the last rank to join.
Result<Handle> Join(ProcessSetId process_set = kGlobalProcessSet);

}  // namespace accord
