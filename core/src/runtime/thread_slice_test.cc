#include "runtime/thread_slice.h"

#include <catch2/catch.hpp>

#include <thread>

namespace accord {
namespace {

// Each case runs on a thread of its own: ThreadSlice changes the calling
// thread's scheduling, which must not leak into the other tests.
template <typename Fn>
void OnNewThread(Fn fn) {
  std::thread thread(fn);
  thread.join();
}

TEST_CASE("ThreadSlice: short and the kernel's by turns, the kernel's restored at the end", "[thread_slice]") {
  OnNewThread([] {
    const uint64_t kernels = CurrentThreadSliceNs();
    {
      ThreadSlice slice(100);
      if (kernels == 0 || !slice.enabled() || CurrentThreadSliceNs() != 100000) {
        // No sched_getattr, a refusal, or a kernel before 6.12 that ignores
        // the field: nothing may have changed.
        WARN("this kernel does not take custom time slices; only the no-op paths are checked");
        CHECK(CurrentThreadSliceNs() == kernels);
        return;
      }
      slice.UseKernels();
      CHECK(CurrentThreadSliceNs() == kernels);
      slice.UseKernels();  // idempotent
      CHECK(CurrentThreadSliceNs() == kernels);
      slice.UseShort();
      CHECK(CurrentThreadSliceNs() == 100000);
    }
    CHECK(CurrentThreadSliceNs() == kernels);
  });
}

TEST_CASE("ThreadSlice: 0 leaves the thread alone", "[thread_slice]") {
  OnNewThread([] {
    const uint64_t kernels = CurrentThreadSliceNs();
    ThreadSlice slice(0);
    CHECK_FALSE(slice.enabled());
    slice.UseShort();
    CHECK(CurrentThreadSliceNs() == kernels);
  });
}

}  // namespace
}  // namespace accord
