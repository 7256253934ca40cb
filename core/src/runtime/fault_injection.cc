#include "runtime/fault_injection.h"

#include <atomic>
#include <mutex>

namespace accord {

namespace {

struct ArmedFault {
  std::atomic<int> point{0};  // a FaultPoint; kNone when nothing is armed
  std::mutex mutex;
  std::string message;  // guarded by mutex
};

ArmedFault& Armed() {
  static ArmedFault* armed = new ArmedFault();  // never destroyed: the coordinator may outlive statics
  return *armed;
}

}  // namespace

namespace testing {

void InjectCoordinatorFault(FaultPoint point, const std::string& message) {
  ArmedFault& armed = Armed();
  std::lock_guard<std::mutex> lock(armed.mutex);
  armed.message = message;
  armed.point.store(static_cast<int>(point));
}

}  // namespace testing

Status TakeInjectedFault(testing::FaultPoint point) {
  ArmedFault& armed = Armed();
  if (armed.point.load(std::memory_order_relaxed) != static_cast<int>(point)) return Status::OK();
  std::lock_guard<std::mutex> lock(armed.mutex);
  int expected = static_cast<int>(point);
  if (!armed.point.compare_exchange_strong(expected, static_cast<int>(testing::FaultPoint::kNone))) {
    return Status::OK();
  }
  return Status::Internal(armed.message);
}

}  // namespace accord
