#include "py_handle.h"

#include <chrono>
#include <cmath>

#include "errors.h"

namespace py = pybind11;

namespace accord::python {

namespace {

struct Orphan {
  Handle handle;
  std::vector<ImportedTensor> tensors;
};

// Protected by the GIL. Deliberately leaked: it may still hold Python objects
// when static destructors run after the interpreter has gone.
std::vector<Orphan>& Orphans() {
  static auto* orphans = new std::vector<Orphan>();
  return *orphans;
}

// How often a waiting thread takes the GIL back to look for signals
// (Ctrl-C), so that a wait on a stuck collective can be interrupted.
constexpr std::chrono::milliseconds kSignalCheckInterval{100};

}  // namespace

PyHandle::PyHandle(Handle handle, std::vector<ImportedTensor> tensors, std::shared_ptr<OutputStore> store)
    : handle_(std::move(handle)), tensors_(std::move(tensors)), store_(std::move(store)) {}

PyHandle::~PyHandle() {
  if (tensors_.empty()) return;
  if (handle_.Poll()) return;  // the members release them now
  Orphans().push_back(Orphan{handle_, std::move(tensors_)});
}

void PyHandle::ReleaseTensors() {
  std::vector<ImportedTensor> released = std::move(tensors_);
  tensors_.clear();
}

bool PyHandle::Poll() {
  if (!handle_.Poll()) return false;
  ReleaseTensors();
  return true;
}

void PyHandle::Wait(std::optional<double> timeout) {
  using Clock = std::chrono::steady_clock;
  std::optional<Clock::time_point> deadline;
  // Timeouts beyond ~30 years are "forever" (and would overflow the clock).
  constexpr double kForever = 1e9;
  if (timeout) {
    if (std::isnan(*timeout) || *timeout < 0) ThrowValueError("wait(): timeout must be a non-negative number of seconds");
    if (*timeout < kForever) {
      deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(*timeout));
    }
  }
  Status status;
  while (true) {
    auto slice = kSignalCheckInterval;
    bool last_slice = false;
    if (deadline) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*deadline - Clock::now());
      if (left <= slice) {
        slice = std::max(left, std::chrono::milliseconds(0));
        last_slice = true;
      }
    }
    {
      py::gil_scoped_release release;
      status = handle_.Wait(slice);
    }
    if (status.code() != StatusCode::kTimeout) break;
    if (last_slice) {
      ThrowStatus(Status::Timeout("wait(): the operation did not complete within " + std::to_string(*timeout) +
                                  " s; it is still in flight"));
    }
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
  }
  ReleaseTensors();
  ThrowIfError(status);
}

void PyHandle::CheckCompleted(const char* method) {
  if (!handle_.Poll()) {
    ThrowValueError(std::string(method) + " needs a completed operation: call wait() first");
  }
  ReleaseTensors();
  ThrowIfError(handle_.status());
}

py::list PyHandle::Outputs() {
  CheckCompleted("outputs()");
  if (outputs_) return *outputs_;
  py::list list;
  if (store_) {
    for (const TensorView& view : handle_.outputs()) {
      DLManagedTensor* managed = store_->Take(view.data);
      if (!managed) ThrowStatus(Status::Internal("an output of this operation was not allocated by accord's bindings"));
      list.append(py::cast(std::make_unique<DLPackTensor>(managed)));
    }
  }
  outputs_ = list;
  return list;
}

std::vector<int64_t> PyHandle::ReceivedSplits() {
  CheckCompleted("received_splits()");
  return handle_.received_splits();
}

int PyHandle::Value() {
  CheckCompleted("value()");
  return handle_.last_joined_rank();
}

void SweepOrphans() {
  auto& orphans = Orphans();
  if (orphans.empty()) return;
  std::vector<Orphan> done;
  for (auto it = orphans.begin(); it != orphans.end();) {
    if (it->handle.Poll()) {
      done.push_back(std::move(*it));
      it = orphans.erase(it);
    } else {
      ++it;
    }
  }
  // `done` goes here, after the list is consistent again: a deleter may run
  // Python code that enqueues (and sweeps) again.
}

void ClearOrphans() {
  std::vector<Orphan> all = std::move(Orphans());
  Orphans().clear();
}

}  // namespace accord::python
