#include "runtime/completion_poller.h"

#include <sched.h>

#include <algorithm>
#include <sstream>

#include "common/logging.h"
#include "runtime/handle_state.h"

namespace accord {

namespace {

constexpr auto kSpin = std::chrono::microseconds(50);
constexpr auto kLongestSleep = std::chrono::microseconds(1000);

}  // namespace

CompletionPoller::CompletionPoller(double timeout_seconds, std::function<void(const Status&)> on_failure,
                                   std::chrono::microseconds idle_spin)
    : timeout_seconds_(timeout_seconds), on_failure_(std::move(on_failure)), idle_spin_(idle_spin) {
  thread_ = std::thread([this] { Run(); });
}

CompletionPoller::~CompletionPoller() {
  Drain();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void CompletionPoller::Touch() {
  last_change_ns_.store(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count());
}

bool CompletionPoller::active_within(std::chrono::microseconds window) const {
  if (busy_.load() > 0) return true;
  const auto since = Clock::now().time_since_epoch() - std::chrono::nanoseconds(last_change_ns_.load());
  return since < window;
}

void CompletionPoller::Add(Batch batch) {
  ++busy_;
  Touch();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    batches_.push_back({std::move(batch), Clock::now()});
    ++added_;
  }
  cv_.notify_all();
}

void CompletionPoller::Drain() {
  std::unique_lock<std::mutex> lock(mutex_);
  drained_.wait(lock, [&] { return batches_.empty() && finishing_ == 0; });
}

size_t CompletionPoller::in_flight() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return batches_.size() + finishing_;
}

void CompletionPoller::Sweep(std::vector<InFlight>* fired, std::vector<InFlight>* failed, Status* failure) {
  const auto now = Clock::now();
  const auto limit = std::chrono::duration<double>(timeout_seconds_);
  // The device whose oldest batch ran out of time, if any: its batches fail.
  int expired_ordinal = -1;
  for (auto it = batches_.begin(); it != batches_.end();) {
    Result<bool> done = it->batch.done->Query();
    if (done.ok() && *done) {
      fired->push_back(std::move(*it));
      it = batches_.erase(it);
      continue;
    }
    if (!done.ok()) {
      // The device reports an error for this batch's work: it fails, and the
      // job with it (the ranks may no longer be in step).
      if (failure->ok()) {
        *failure = Status(done.status().code(), "the collective on tensor '" + it->batch.first_name +
                                                    "' failed on cuda:" + std::to_string(it->batch.ordinal) + ": " +
                                                    done.status().message());
      }
      failed->push_back(std::move(*it));
      it = batches_.erase(it);
      continue;
    }
    if (timeout_seconds_ > 0 && expired_ordinal < 0 && now - it->since > limit) {
      expired_ordinal = it->batch.ordinal;
      std::ostringstream message;
      message << "accord's watchdog: the collective on tensor '" << it->batch.first_name << "' (process set "
              << it->batch.process_set << ", cuda:" << it->batch.ordinal << ") did not complete within "
              << timeout_seconds_ << " s (ACCORD_COLLECTIVE_TIMEOUT_SECONDS; it waited "
              << std::chrono::duration<double>(now - it->since).count()
              << " s); its communicator was aborted. A rank may have died or stopped submitting work";
      if (failure->ok()) *failure = Status::Aborted(message.str());
    }
    ++it;
  }
  if (expired_ordinal < 0) return;
  for (auto it = batches_.begin(); it != batches_.end();) {
    if (it->batch.ordinal == expired_ordinal) {
      failed->push_back(std::move(*it));
      it = batches_.erase(it);
    } else {
      ++it;
    }
  }
}

void CompletionPoller::Finish(std::vector<InFlight>& batches, const Status& status) {
  for (InFlight& flight : batches) {
    for (auto& taken : flight.batch.entries) {
      if (!taken) continue;
      TensorEntry& entry = taken.mapped();
      std::shared_ptr<HandleState> handle = entry.handle;
      if (FinishEntry(entry, flight.batch.type, status)) handle->NotifyWaiters();
    }
  }
  batches.clear();
}

void CompletionPoller::AbortInBackground(const std::vector<InFlight>& batches) {
  std::vector<std::shared_ptr<DeviceCollectives>> collectives;
  for (const InFlight& flight : batches) {
    if (flight.batch.collectives) collectives.push_back(flight.batch.collectives);
  }
  if (collectives.empty()) return;
  // ncclCommAbort may wait for the other ranks of the node; a thread of its
  // own keeps that from holding up the handles, the report, or shutdown.
  std::thread([collectives = std::move(collectives)] {
    for (const auto& c : collectives) c->Abort();
  }).detach();
}

void CompletionPoller::Run() {
  std::unique_lock<std::mutex> lock(mutex_);
  // Polls come fast after a change (a batch added or finished) and slow
  // down as nothing happens.
  auto last_change = Clock::now();
  uint64_t seen_added = added_;
  while (true) {
    if (added_ != seen_added) {
      seen_added = added_;
      last_change = Clock::now();
    }
    if (batches_.empty()) {
      if (finishing_ == 0) drained_.notify_all();
      if (stopping_) return;
      if (Clock::now() - last_change < idle_spin_) {
        lock.unlock();
        sched_yield();
        lock.lock();
        continue;
      }
      cv_.wait(lock, [&] { return !batches_.empty() || stopping_; });
      last_change = Clock::now();
      continue;
    }
    std::vector<InFlight> fired, failed;
    Status failure;
    Sweep(&fired, &failed, &failure);
    if (!fired.empty() || !failed.empty()) {
      finishing_ += fired.size() + failed.size();
      const size_t finished = fired.size() + failed.size();
      lock.unlock();
      Finish(fired, Status::OK());
      if (!failed.empty()) {
        ACCORD_LOG(kError) << failure;
        AbortInBackground(failed);
        Finish(failed, failure);
      }
      lock.lock();
      finishing_ -= finished;
      busy_ -= finished;
      Touch();
      if (!failure.ok() && !reported_) {
        reported_ = true;
        lock.unlock();
        on_failure_(failure);
        lock.lock();
      }
      last_change = Clock::now();
      continue;
    }
    const auto waited = Clock::now() - last_change;
    if (waited < kSpin) {
      lock.unlock();
      sched_yield();
      lock.lock();
    } else {
      cv_.wait_for(lock, std::min<Clock::duration>(waited / 8, kLongestSleep));
    }
  }
}

}  // namespace accord
