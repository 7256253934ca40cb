#include "runtime/thread_slice.h"

#include <cerrno>
#include <cstring>

#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "common/logging.h"

namespace accord {

namespace {

#if defined(__linux__) && defined(SYS_sched_setattr) && defined(SYS_sched_getattr)
#define ACCORD_HAVE_SCHED_ATTR 1
// The kernel's struct sched_attr (uapi/linux/sched/types.h), size version 1.
struct SchedAttr {
  uint32_t size;
  uint32_t sched_policy;
  uint64_t sched_flags;
  int32_t sched_nice;
  uint32_t sched_priority;
  uint64_t sched_runtime;
  uint64_t sched_deadline;
  uint64_t sched_period;
  uint32_t sched_util_min;
  uint32_t sched_util_max;
};
constexpr uint32_t kSchedOther = 0;
constexpr uint32_t kSchedBatch = 3;

bool GetAttr(SchedAttr* attr) {
  *attr = SchedAttr{};
  return syscall(SYS_sched_getattr, 0, attr, sizeof(*attr), 0) == 0;
}

// runtime_ns 0: the kernel's base slice.
bool SetSlice(uint32_t policy, int32_t nice, uint64_t runtime_ns) {
  SchedAttr attr{};
  attr.size = sizeof(attr);
  attr.sched_policy = policy;
  attr.sched_nice = nice;
  attr.sched_runtime = runtime_ns;
  return syscall(SYS_sched_setattr, 0, &attr, 0) == 0;
}
#endif

}  // namespace

ThreadSlice::ThreadSlice(int slice_us) {
#ifdef ACCORD_HAVE_SCHED_ATTR
  if (slice_us <= 0) return;
  SchedAttr attr;
  if (!GetAttr(&attr)) return;
  if (attr.sched_policy != kSchedOther && attr.sched_policy != kSchedBatch) return;  // real-time, idle: leave it
  policy_ = attr.sched_policy;
  nice_ = attr.sched_nice;
  short_ns_ = static_cast<uint64_t>(slice_us) * 1000;
  if (!SetSlice(policy_, nice_, short_ns_)) {
    ACCORD_LOG(kDebug) << "the coordinator thread keeps the kernel's time slice (sched_setattr: "
                       << std::strerror(errno) << ")";
    return;
  }
  enabled_ = true;
  is_short_ = true;
#else
  (void)slice_us;
#endif
}

ThreadSlice::~ThreadSlice() { Use(false); }

void ThreadSlice::Use(bool short_slice) {
#ifdef ACCORD_HAVE_SCHED_ATTR
  if (!enabled_ || is_short_ == short_slice) return;
  if (SetSlice(policy_, nice_, short_slice ? short_ns_ : 0)) is_short_ = short_slice;
#else
  (void)short_slice;
#endif
}

uint64_t CurrentThreadSliceNs() {
#ifdef ACCORD_HAVE_SCHED_ATTR
  SchedAttr attr;
  return GetAttr(&attr) ? attr.sched_runtime : 0;
#else
  return 0;
#endif
}

}  // namespace accord
