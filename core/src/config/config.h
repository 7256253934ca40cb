// accord's configuration: every tunable knob, read once from the environment.
//
// Each knob is an ACCORD_* environment variable; where Horovod has the same
// knob, its HOROVOD_* name is read as a fallback so Horovod users' settings
// carry over. Rules, the same for every knob:
//   1. ACCORD_* wins over HOROVOD_*.
//   2. An empty (or all-whitespace) value counts as unset; surrounding
//      whitespace is ignored.
//   3. A malformed or out-of-range value is an InvalidArgument Status whose
//      message names the variable, the value and what was expected. Nothing
//      is silently ignored or clamped.
//
// Init() calls Config::FromEnv() once, before the coordinator starts; the
// Config is immutable afterwards and may then be read from any thread. No
// other code in accord reads these variables. docs/configuration.md describes
// every knob for users; keep it in step with the table below.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>

#include "accord/status.h"
#include "common/logging.h"

namespace accord {

// The declaration of one knob: its variables, default, accepted range and doc.
template <typename T>
struct Knob {
  const char* name;          // the ACCORD_* variable
  const char* horovod_name;  // the HOROVOD_* variable read as a fallback, or nullptr
  T default_value;
  T min_value;  // accepted range, inclusive
  T max_value;
  const char* unit;  // what the number counts, for error messages ("bytes"); nullptr for names
  const char* doc;   // one line
};

// Which data plane CUDA tensors use (ACCORD_GPU_OPERATIONS).
enum class GpuOperations {
  kAuto,  // NCCL where it can run (built, and every rank of the set has a GPU of its own), else MPI
  kNccl,  // NCCL, or a clear error where it cannot run
  kMpi,   // MPI, staged through page-locked host memory
};
const char* GpuOperationsName(GpuOperations value);  // "auto", "nccl", "mpi"

// How an allreduce of one CPU tensor larger than the staging window runs
// (ACCORD_LONE_ALLREDUCE; ops/lone_allreduce.h).
enum class LoneAllreduce {
  kAuto,     // whichever of the two Init's probe found faster on this machine
  kInPlace,  // in the tensor's own memory, in chunks of 8 windows
  kStaged,   // through the fusion buffer, window by window
};
const char* LoneAllreduceName(LoneAllreduce value);  // "auto", "in_place", "staged"

namespace knobs {

// Each knob's arguments are grouped by hand, one line for its names and
// default, one for its range and unit, then its documentation.
// clang-format off

inline constexpr Knob<int64_t> kFusionThreshold{
    "ACCORD_FUSION_THRESHOLD", "HOROVOD_FUSION_THRESHOLD", int64_t{64} << 20,
    0, std::numeric_limits<int64_t>::max(), "bytes",
    "Largest fused buffer: ready tensors are packed into one collective up to this size; 0 disables fusion."};

// The default applies to process sets on one host; unset, a set that spans
// hosts uses 0 (Config::StagingWindowBytes).
inline constexpr Knob<int64_t> kStagingWindowBytes{
    "ACCORD_STAGING_WINDOW_BYTES", nullptr, int64_t{1} << 20,
    0, int64_t{1} << 40, "bytes",
    "Allreduces, broadcasts and allgathers of CPU tensors run through accord's huge-page fusion buffer in windows of "
    "this size "
    "(copy in, collective, copy out); 0 works in a lone tensor's own memory and on a fused batch in one call. Unset: "
    "1 MiB for a process set on one host, 0 for one that spans hosts."};

inline constexpr Knob<LoneAllreduce> kLoneAllreduce{
    "ACCORD_LONE_ALLREDUCE", nullptr, LoneAllreduce::kAuto,
    LoneAllreduce::kAuto, LoneAllreduce::kStaged, nullptr,
    "An allreduce of one CPU tensor larger than the staging window, on one host: in_place (in its own memory, in "
    "chunks of 8 windows), staged (through the fusion buffer, window by window), or auto (whichever Init measured "
    "faster on this machine)."};

inline constexpr Knob<int64_t> kMpiMaxCount{
    "ACCORD_MPI_MAX_COUNT", nullptr, int64_t{2147483647},
    1, int64_t{2147483647}, "elements",
    "Most elements one MPI call moves (MPI counts are 32-bit); a larger collective is split into several calls."};

// The default is for a set whose hosts hold one rank each or unequal
// numbers of ranks; unset, a set with the same number of ranks (two or more)
// on each of its hosts runs two levels (Config::HierarchicalAllreduce).
inline constexpr Knob<bool> kHierarchicalAllreduce{
    "ACCORD_HIERARCHICAL_ALLREDUCE", "HOROVOD_HIERARCHICAL_ALLREDUCE", false,
    false, true, nullptr,
    "1 runs the allreduces of a process set that spans hosts in two levels: a reduce-scatter within each host, an "
    "allreduce of each shard across hosts (every local rank at once), an allgather within each host; 0 runs them "
    "flat. Unset: two levels where every host of the set has the same number of ranks, two or more. A set with one "
    "rank on every host runs flat either way."};

inline constexpr Knob<bool> kHierarchicalAllgather{
    "ACCORD_HIERARCHICAL_ALLGATHER", "HOROVOD_HIERARCHICAL_ALLGATHER", false,
    false, true, nullptr,
    "1 runs the allgathers of a process set that spans hosts in two levels: within each host, then between one "
    "leader per host, then from the leader to its host."};

inline constexpr Knob<int> kCacheCapacity{
    "ACCORD_CACHE_CAPACITY", "HOROVOD_CACHE_CAPACITY", 1024,
    0, std::numeric_limits<int>::max(), "entries",
    "Requests remembered by the response cache, so a repeated tensor is negotiated as one bit; 0 disables the cache."};

inline constexpr Knob<double> kCycleTimeMs{
    "ACCORD_CYCLE_TIME_MS", "HOROVOD_CYCLE_TIME", 0.0,
    0.0, 60000.0, "milliseconds",
    "Minimum interval between negotiation rounds (Horovod's cycle time); 0 starts a round as soon as there is work."};

inline constexpr Knob<int> kIdleTimeoutUs{
    "ACCORD_IDLE_TIMEOUT_US", nullptr, 1000,
    0, 1000000, "microseconds",
    "A rank with nothing new, whose announced tensors the others have yet to match, joins a negotiation round after "
    "this long; one that holds nothing up waits ACCORD_IDLE_BACKOFF_MAX_US."};

inline constexpr Knob<int> kIdleBackoffMaxUs{
    "ACCORD_IDLE_BACKOFF_MAX_US", nullptr, 10000,
    0, 1000000, "microseconds",
    "When no rank has made progress for a while, the idle timeout grows (to 1/8 of the quiet time) up to this."};

inline constexpr Knob<int> kPollSpinUs{
    "ACCORD_POLL_SPIN_US", nullptr, 20,
    0, 1000000, "microseconds",
    "While waiting for other ranks, busy-test MPI for this long before starting to sleep."};

inline constexpr Knob<int> kPollWaitedSpinUs{
    "ACCORD_POLL_WAITED_SPIN_US", nullptr, 1000,
    0, 1000000, "microseconds",
    "While a thread of this process waits for a result, keep busy-testing MPI (yielding) for up to this long."};

inline constexpr Knob<int> kPollMaxSleepUs{
    "ACCORD_POLL_MAX_SLEEP_US", nullptr, 500,
    1, 1000000, "microseconds",
    "After the busy phase, the sleep between MPI tests doubles up to this."};

inline constexpr Knob<int> kDeviceSpinUs{
    "ACCORD_DEVICE_SPIN_US", nullptr, 50,
    0, 1000000, "microseconds",
    "While GPU work is in flight or just done, a thread that waits for its next step polls (yielding) this long "
    "before it sleeps."};

inline constexpr Knob<int> kCoordinatorSliceUs{
    "ACCORD_COORDINATOR_SLICE_US", nullptr, 100,
    0, 100000, "microseconds",
    "The scheduler time slice the coordinator thread asks Linux for (sched_setattr; kernels from 6.12 honour it): "
    "with a short one it runs as soon as it wakes instead of after a training thread's slice. 0 keeps the kernel's "
    "default."};

inline constexpr Knob<bool> kFastPath{
    "ACCORD_FAST_PATH", nullptr, true,
    false, true, nullptr,
    "1 lets a thread that waits for an operation run the coordinator's round and collective itself while the "
    "coordinator is idle, so a small synchronous operation costs no thread hand-off; 0 leaves every round to the "
    "coordinator thread."};

inline constexpr Knob<bool> kCarrySmallAllreduce{
    "ACCORD_CARRY_SMALL_ALLREDUCE", nullptr, true,
    false, true, nullptr,
    "1 sends a lone cached allreduce of host memory of up to 1020 bytes with the negotiation round's bits, and "
    "every rank reduces what all sent: one exchange instead of two. 0 runs it as a collective."};

inline constexpr Knob<double> kCollectiveTimeoutSeconds{
    "ACCORD_COLLECTIVE_TIMEOUT_SECONDS", nullptr, 300.0,
    0.0, 1e9, "seconds",
    "The collective watchdog: a negotiation round or a collective on CPU tensors still running after this long ends "
    "the job (MPI_Abort, exit status 124) with a message naming the tensors, process set and ranks; a collective on "
    "CUDA tensors is aborted (the NCCL communicator with it) and fails every pending operation. Also bounds the waits "
    "of the GPU path's MPI staging and NCCL setup. 0: never."};

inline constexpr Knob<GpuOperations> kGpuOperations{
    "ACCORD_GPU_OPERATIONS", "HOROVOD_GPU_OPERATIONS", GpuOperations::kAuto,
    GpuOperations::kAuto, GpuOperations::kMpi, nullptr,
    "Data plane for CUDA tensors: auto (NCCL where every rank of the set has its own GPU, else MPI), nccl, or mpi "
    "(through page-locked host memory)."};

inline constexpr Knob<bool> kCudaHostEmulation{
    "ACCORD_CUDA_HOST_EMULATION", nullptr, false,
    false, true, nullptr,
    "1 serves CUDA tensors with a host emulation of the GPU (memory on the host, streams as threads): for testing "
    "the GPU path without a GPU."};

inline constexpr Knob<LogLevel> kLogLevel{
    "ACCORD_LOG_LEVEL", "HOROVOD_LOG_LEVEL", LogLevel::kWarning,
    LogLevel::kTrace, LogLevel::kFatal, nullptr,
    "Least severe message written to stderr: trace, debug, info, warning, error or fatal."};

inline constexpr Knob<bool> kLogHideTime{
    "ACCORD_LOG_HIDE_TIME", "HOROVOD_LOG_HIDE_TIME", false,
    false, true, nullptr,
    "1 leaves the local time out of log lines."};

inline constexpr Knob<double> kStallCheckTimeSeconds{
    "ACCORD_STALL_CHECK_TIME_SECONDS", "HOROVOD_STALL_CHECK_TIME_SECONDS", 60.0,
    0.001, 1e9, "seconds",
    "Warn (on a process set's rank 0) about a tensor some ranks submitted and others not for this long."};

inline constexpr Knob<double> kStallShutdownTimeSeconds{
    "ACCORD_STALL_SHUTDOWN_TIME_SECONDS", "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", 600.0,
    0.0, 1e9, "seconds",
    "Stop the job when such a tensor has waited this long; every pending operation fails with the report. 0: never. "
    "Also bounds (up to 30 s) how long a rank whose coordinator failed waits to tell the others."};

inline constexpr Knob<bool> kStallCheckDisable{
    "ACCORD_STALL_CHECK_DISABLE", "HOROVOD_STALL_CHECK_DISABLE", false,
    false, true, nullptr,
    "1 turns the stall inspector off (no warnings, no stop)."};

inline constexpr Knob<const char*> kTimeline{
    "ACCORD_TIMELINE", "HOROVOD_TIMELINE", "", "", "", nullptr,
    "Rank 0 writes a Chrome trace-event timeline of every operation to this file (empty: no timeline)."};

inline constexpr Knob<bool> kTimelineMarkCycles{
    "ACCORD_TIMELINE_MARK_CYCLES", "HOROVOD_TIMELINE_MARK_CYCLES", false,
    false, true, nullptr,
    "1 also marks, in the timeline, each coordinator iteration that executed something."};

inline constexpr Knob<int> kTimelineMaxMb{
    "ACCORD_TIMELINE_MAX_MB", nullptr, 1024,
    1, 1048576, "MiB",
    "Largest timeline file: beyond it the oldest half of the events is dropped (with a marker)."};

inline constexpr Knob<bool> kAutotune{
    "ACCORD_AUTOTUNE", "HOROVOD_AUTOTUNE", false,
    false, true, nullptr,
    "1 searches the fusion threshold, cycle time and response cache on/off online during the first steps, then "
    "keeps the best."};

inline constexpr Knob<int> kAutotuneWarmupSamples{
    "ACCORD_AUTOTUNE_WARMUP_SAMPLES", "HOROVOD_AUTOTUNE_WARMUP_SAMPLES", 3,
    0, 1000000, "samples",
    "Autotune: samples taken with the starting parameters and discarded before the search."};

inline constexpr Knob<int> kAutotuneStepsPerSample{
    "ACCORD_AUTOTUNE_STEPS_PER_SAMPLE", "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", 10,
    1, 1000000, "steps",
    "Autotune: steps (coordinator iterations that executed something) in one sample."};

inline constexpr Knob<int> kAutotuneMaxSamples{
    "ACCORD_AUTOTUNE_MAX_SAMPLES", "HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES", 20,
    1, 1000000, "samples",
    "Autotune: most scored samples before the best setting is kept."};

inline constexpr Knob<const char*> kAutotuneLog{
    "ACCORD_AUTOTUNE_LOG", "HOROVOD_AUTOTUNE_LOG", "", "", "", nullptr,
    "Autotune: rank 0 writes a CSV line per sample to this file (empty: no log)."};

// clang-format on

}  // namespace knobs

struct Config {
  int64_t fusion_threshold_bytes = knobs::kFusionThreshold.default_value;
  int64_t staging_window_bytes = knobs::kStagingWindowBytes.default_value;
  // Whether ACCORD_STAGING_WINDOW_BYTES was given (else staging_window_bytes
  // holds its default, which only sets on one host use).
  bool staging_window_set = false;
  LoneAllreduce lone_allreduce = knobs::kLoneAllreduce.default_value;
  int64_t mpi_max_count = knobs::kMpiMaxCount.default_value;
  bool hierarchical_allreduce = knobs::kHierarchicalAllreduce.default_value;
  // Whether ACCORD_HIERARCHICAL_ALLREDUCE (or Horovod's name) was given.
  bool hierarchical_allreduce_set = false;
  bool hierarchical_allgather = knobs::kHierarchicalAllgather.default_value;
  int cache_capacity = knobs::kCacheCapacity.default_value;
  double cycle_time_ms = knobs::kCycleTimeMs.default_value;
  int idle_timeout_us = knobs::kIdleTimeoutUs.default_value;
  int idle_backoff_max_us = knobs::kIdleBackoffMaxUs.default_value;
  int poll_spin_us = knobs::kPollSpinUs.default_value;
  int poll_waited_spin_us = knobs::kPollWaitedSpinUs.default_value;
  int poll_max_sleep_us = knobs::kPollMaxSleepUs.default_value;
  // 0 where the runtime found one core or more ranks than cores (Runtime::Create).
  int device_spin_us = knobs::kDeviceSpinUs.default_value;
  int coordinator_slice_us = knobs::kCoordinatorSliceUs.default_value;
  bool fast_path = knobs::kFastPath.default_value;
  bool carry_small_allreduce = knobs::kCarrySmallAllreduce.default_value;
  LogLevel log_level = knobs::kLogLevel.default_value;
  bool log_hide_time = knobs::kLogHideTime.default_value;
  double stall_check_time_seconds = knobs::kStallCheckTimeSeconds.default_value;
  double stall_shutdown_time_seconds = knobs::kStallShutdownTimeSeconds.default_value;
  bool stall_check_disable = knobs::kStallCheckDisable.default_value;
  double collective_timeout_seconds = knobs::kCollectiveTimeoutSeconds.default_value;
  GpuOperations gpu_operations = knobs::kGpuOperations.default_value;
  bool cuda_host_emulation = knobs::kCudaHostEmulation.default_value;

  std::string timeline_path;  // ACCORD_TIMELINE (a path, taken as given)
  bool timeline_mark_cycles = knobs::kTimelineMarkCycles.default_value;
  int timeline_max_mb = knobs::kTimelineMaxMb.default_value;

  bool autotune = knobs::kAutotune.default_value;
  int autotune_warmup_samples = knobs::kAutotuneWarmupSamples.default_value;
  int autotune_steps_per_sample = knobs::kAutotuneStepsPerSample.default_value;
  int autotune_max_samples = knobs::kAutotuneMaxSamples.default_value;
  std::string autotune_log_path;  // ACCORD_AUTOTUNE_LOG (a path, taken as given)

  // Reads every knob from the process environment.
  static Result<Config> FromEnv();
  // The same, with `lookup(name)` returning a variable's value or nullopt
  // (for tests, and for callers that hold the environment in a map).
  using Lookup = std::function<std::optional<std::string>(const char*)>;
  static Result<Config> FromLookup(const Lookup& lookup);

  // The staging window of a process set (ops/staging.h): the value given,
  // or when none was, the default for a set on one host and 0 (no windows)
  // for one that spans hosts, whose TCP links lose more to windows than
  // staging saves (docs/decisions.md, "Staging across hosts").
  int64_t StagingWindowBytes(bool spans_hosts) const {
    return spans_hosts && !staging_window_set ? 0 : staging_window_bytes;
  }

  // Whether the allreduces of a process set that spans `hosts` hosts run in
  // two levels: as given, or when not given, where every host holds
  // `ranks_per_host` ranks (0: unequal numbers) and that is two or more,
  // where two levels send each byte between hosts once per host instead of
  // once per rank (docs/decisions.md, "Hierarchical collectives"). With one
  // rank on every host they are flat even when asked for: the two levels
  // would be the flat ring with nothing to do within a host, and only the
  // flat backend reduces a fused batch in its tensors' own memory.
  bool HierarchicalAllreduce(int hosts, int ranks_per_host) const {
    if (hosts < 2 || ranks_per_host == 1) return false;
    return hierarchical_allreduce_set ? hierarchical_allreduce : ranks_per_host >= 2;
  }

  // One line for logs: "fusion_threshold_bytes=67108864 staging_window_bytes=auto ...";
  // "auto" for an unset knob whose default depends on the process set's hosts.
  std::string ToString() const;
};

}  // namespace accord
