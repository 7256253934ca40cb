#include "runtime/collective_watchdog.h"

#include <algorithm>
#include <sstream>

#include "common/logging.h"
#include "runtime/process_set.h"

namespace accord {

namespace {

// How often the thread looks: a tenth of the timeout, between 50 ms and 1 s,
// so a job ends at most about a second after its timeout.
std::chrono::milliseconds Period(std::chrono::steady_clock::duration timeout) {
  const auto tenth = std::chrono::duration_cast<std::chrono::milliseconds>(timeout / 10);
  return std::clamp(tenth, std::chrono::milliseconds(50), std::chrono::milliseconds(1000));
}

constexpr size_t kNamesShown = 8;

}  // namespace

CollectiveWatchdog::CollectiveWatchdog(double timeout_seconds, std::function<void(const std::string&)> on_timeout)
    : timeout_(
          std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(std::max(timeout_seconds, 0.0)))),
      on_timeout_(std::move(on_timeout)) {
  if (timeout_seconds > 0) thread_ = std::thread([this] { Run(); });
}

CollectiveWatchdog::~CollectiveWatchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

CollectiveWatchdog::Scope::Scope(CollectiveWatchdog& dog, const ProcessSet& set, const std::vector<OpItem>* items,
                                 Clock::time_point started)
    : dog_(dog.thread_.joinable() ? &dog : nullptr) {
  if (!dog_) return;
  std::lock_guard<std::mutex> lock(dog_->mutex_);
  dog_->set_ = &set;
  dog_->items_ = items;
  dog_->started_ = started;
}

CollectiveWatchdog::Scope::~Scope() {
  if (!dog_) return;
  std::lock_guard<std::mutex> lock(dog_->mutex_);
  dog_->set_ = nullptr;
  dog_->items_ = nullptr;
}

std::string CollectiveWatchdog::Describe(const ProcessSet& set, const std::vector<OpItem>* items) {
  std::ostringstream out;
  if (!items || items->empty()) {
    out << "a negotiation round";
  } else {
    const Response& first = *items->front().response;
    out << OpTypeName(first.type) << " of " << items->size() << (items->size() == 1 ? " tensor (" : " tensors (");
    for (size_t i = 0; i < items->size() && i < kNamesShown; ++i) {
      out << (i ? ", " : "") << "'" << (*items)[i].response->name << "'";
    }
    if (items->size() > kNamesShown) out << ", and " << items->size() - kNamesShown << " more";
    out << ")";
  }
  out << " on process set " << set.id << " (ranks ";
  for (size_t i = 0; i < set.ranks.size(); ++i) out << (i ? ", " : "") << set.ranks[i];
  out << ")";
  return out.str();
}

void CollectiveWatchdog::Run() {
  const auto period = Period(timeout_);
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    wake_.wait_for(lock, period);
    if (stop_ || !set_) continue;
    const auto waited = Clock::now() - started_;
    if (waited < timeout_) continue;
    std::ostringstream message;
    message << Describe(*set_, items_) << " has not finished after " << std::chrono::duration<double>(waited).count()
            << " s (ACCORD_COLLECTIVE_TIMEOUT_SECONDS=" << std::chrono::duration<double>(timeout_).count()
            << "): a rank of the set died, froze or lost its network. Ending the job (exit status "
            << kCollectiveTimeoutExitCode << ")";
    // The coordinator stays blocked in the step (and so the items alive)
    // while the action ends the process.
    on_timeout_(message.str());
  }
}

}  // namespace accord
