#include "accord/handle.h"

#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <new>

#include "runtime/fast_path.h"
#include "runtime/handle_state.h"
#include "runtime/waiters.h"

namespace accord {

namespace {

// Counts the calling thread among the waiters (waiters.h) while it lives.
struct CountedWait {
  CountedWait() { Waiters::Get().Begin(); }
  ~CountedWait() { Waiters::Get().End(); }
};

}  // namespace

HandleState::HandleState(int parts) : remaining_(parts), settled_flag_(parts <= 0), parts_(parts) {
  if (parts > 1) more_outputs_.resize(parts - 1);
}

template <typename Ready>
bool HandleState::Spin(std::unique_lock<std::mutex>& lock, Ready ready, std::chrono::steady_clock::time_point limit) {
  const auto until = std::min(std::chrono::steady_clock::now() + spin_, limit);
  while (std::chrono::steady_clock::now() < until) {
    lock.unlock();
    sched_yield();
    lock.lock();
    if (ready()) return true;
  }
  return false;
}

TensorView& HandleState::output(int part) { return part == 0 ? first_output_ : more_outputs_[part - 1]; }

std::shared_ptr<std::vector<std::shared_ptr<void>>> HandleState::keep_alive() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!keep_alive_) keep_alive_ = std::make_shared<std::vector<std::shared_ptr<void>>>();
  return keep_alive_;
}

void HandleState::SetOutput(int part, const TensorView& view) {
  std::lock_guard<std::mutex> lock(mutex_);
  output(part) = view;
}

void HandleState::SetReceivedSplits(std::vector<int64_t> splits) {
  std::lock_guard<std::mutex> lock(mutex_);
  received_splits_ = std::move(splits);
}

void HandleState::SetValue(int64_t value) {
  std::lock_guard<std::mutex> lock(mutex_);
  value_ = value;
}

bool HandleState::CompletePartQuietly(const Status& status, int part, TensorView&& output) {
  std::lock_guard<std::mutex> lock(mutex_);
  this->output(part) = std::move(output);
  return CompleteLocked(status, part);
}

bool HandleState::CompletePartQuietly(const Status& status) { return CompletePartQuietly(status, -1); }

bool HandleState::CompletePartQuietly(const Status& status, int part) {
  std::lock_guard<std::mutex> lock(mutex_);
  return CompleteLocked(status, part);
}

bool HandleState::CompleteLocked(const Status& status, int part) {
  if (done_) return false;
  if (!status.ok() && status_.ok()) status_ = status;
  // A part that was queued on a device settled then.
  const bool was_on_device = part >= 0 && !on_device_.empty() && on_device_[part] != nullptr;
  if (was_on_device) on_device_[part].reset();
  if (!was_on_device) ++settled_;
  done_ = --remaining_ <= 0;
  PublishLocked();
  return done_;
}

void HandleState::PublishLocked() {
  if (done_ || settled_ >= parts_) settled_flag_.store(true, std::memory_order_release);
  if (done_) done_flag_.store(true, std::memory_order_release);
}

void HandleState::SetOnDevice(int part, std::shared_ptr<DeviceEvent> done) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (on_device_.empty()) on_device_.resize(parts_);
    on_device_[part] = std::move(done);
    ++settled_;
    PublishLocked();
  }
  cv_.notify_all();
}

Status HandleState::WaitOnStream(void* native_stream) {
  std::vector<std::shared_ptr<DeviceEvent>> events;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    auto settled = [&] { return done_ || settled_ >= parts_; };
    FastPath& fast = FastPath::Get();
    fast.NoteWait(*this);
    if (!settled()) {
      lock.unlock();
      fast.BeforeWait(*this, std::chrono::microseconds::max());
      lock.lock();
    }
    if (!settled()) {
      const CountedWait counted;
      if (!Spin(lock, settled, std::chrono::steady_clock::time_point::max())) cv_.wait(lock, settled);
    }
    if (!status_.ok()) return status_;
    for (const auto& event : on_device_) {
      if (event) events.push_back(event);
    }
  }
  for (const auto& event : events) ACCORD_RETURN_IF_ERROR(event->BlockNative(native_stream));
  return Status::OK();
}

void HandleState::NotifyWaiters() {
  // done_ was set under the lock, so a waiter either saw it or is already
  // waiting: notifying without the lock cannot lose the wake-up. The caller
  // holds a reference to this state until the call returns.
  cv_.notify_all();
}

bool HandleState::done() const { return done_flag_.load(std::memory_order_acquire); }

bool HandleState::settled() const { return settled_flag_.load(std::memory_order_acquire); }

Waiters& Waiters::Get() {
  static Waiters* waiters = new Waiters();  // leaked: user threads may wait during exit
  return *waiters;
}

Status HandleState::Wait(std::optional<std::chrono::milliseconds> timeout) {
  FastPath& fast = FastPath::Get();
  fast.NoteWait(*this);
  // status_ is final once done_flag_ reads true: no lock to return it.
  if (done()) return status_;
  const auto start = timeout ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point();
  if (!timeout || timeout->count() > 0) {
    fast.BeforeWait(*this, timeout ? std::chrono::microseconds(*timeout) : std::chrono::microseconds::max());
    if (done()) return status_;
  }
  std::unique_lock<std::mutex> lock(mutex_);
  if (done_) return status_;
  const CountedWait counted;
  auto finished = [&] { return done_; };
  // A timeout bounds the spin too.
  const auto limit = timeout ? start + *timeout : std::chrono::steady_clock::time_point::max();
  if (Spin(lock, finished, limit)) return status_;
  if (!timeout) {
    cv_.wait(lock, finished);
  } else if (!cv_.wait_until(lock, limit, finished)) {
    return Status::Timeout("operation not complete after " + std::to_string(timeout->count()) +
                           " ms; it is still in flight");
  }
  return status_;
}

Status HandleState::status() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return status_;
}

std::vector<TensorView> HandleState::outputs() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<TensorView> all;
  if (parts_ == 0) return all;
  all.reserve(parts_);
  all.push_back(first_output_);
  all.insert(all.end(), more_outputs_.begin(), more_outputs_.end());
  return all;
}

std::vector<int64_t> HandleState::received_splits() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return received_splits_;
}

int64_t HandleState::value() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return value_;
}

bool Handle::Poll() const {
  if (!state_) return false;
  if (state_->done()) return true;
  FastPath::Get().Polled();
  Waiters::Get().Polled();
  return false;
}
bool Handle::Done() const { return state_ && state_->done(); }
Status Handle::Wait() const {
  if (!state_) return Status::InvalidArgument("Wait() on an empty Handle");
  return state_->Wait(std::nullopt);
}
Status Handle::Wait(std::chrono::milliseconds timeout) const {
  if (!state_) return Status::InvalidArgument("Wait() on an empty Handle");
  return state_->Wait(timeout);
}
Status Handle::WaitOnStream(void* stream) const {
  if (!state_) return Status::InvalidArgument("WaitOnStream() on an empty Handle");
  return state_->WaitOnStream(stream);
}
Status Handle::status() const {
  return state_ ? state_->status() : Status::InvalidArgument("status() of an empty Handle");
}
std::vector<TensorView> Handle::outputs() const { return state_ ? state_->outputs() : std::vector<TensorView>{}; }
std::vector<int64_t> Handle::received_splits() const {
  return state_ ? state_->received_splits() : std::vector<int64_t>{};
}
int Handle::last_joined_rank() const { return state_ ? static_cast<int>(state_->value()) : -1; }

Allocator HeapAllocator(std::shared_ptr<std::vector<std::shared_ptr<void>>> keep_alive) {
  return [keep_alive](DataType dtype, const Shape& shape, Device device) -> Result<TensorView> {
    if (device.type != DeviceType::kCPU) {
      return Status::Unimplemented("the heap allocator makes CPU tensors only, not " + device.ToString());
    }
    TensorView view{nullptr, dtype, shape, device};
    const size_t bytes = std::max<size_t>(view.size_bytes(), 1);
    view.data = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!view.data) return Status::Internal("out of memory allocating " + std::to_string(bytes) + " bytes");
    keep_alive->push_back(std::shared_ptr<void>(view.data, std::free));
    return view;
  };
}

}  // namespace accord
