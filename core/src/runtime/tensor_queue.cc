#include "runtime/tensor_queue.h"

#include <algorithm>
#include <set>

namespace accord {

Status TensorQueue::Enqueue(std::vector<TensorEntry> entries) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!closed_.ok()) return closed_;
    std::set<std::string> names;
    for (const auto& e : entries) {
      const std::string& name = e.request.name;
      if (entries_.count(name) || !names.insert(name).second) {
        return Status::InvalidArgument("a tensor named '" + name +
                                       "' is already in flight on this rank; wait for it to complete "
                                       "or use another name");
      }
    }
    for (auto& e : entries) {
      new_names_.push_back(e.request.name);
      std::string name = e.request.name;
      entries_.emplace(std::move(name), std::move(e));
    }
  }
  signal_->Notify();
  return Status::OK();
}

std::vector<Request> TensorQueue::TakeNewRequests() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<Request> out;
  out.reserve(new_names_.size());
  for (const auto& name : new_names_) out.push_back(entries_.at(name).request);
  new_names_.clear();
  return out;
}

std::optional<TensorEntry> TensorQueue::Remove(const std::string& name) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = entries_.find(name);
  if (it == entries_.end()) return std::nullopt;
  TensorEntry entry = std::move(it->second);
  entries_.erase(it);
  // A rank that has joined can be handed the response for a name it
  // enqueued after this round's TakeNewRequests: it must not be announced.
  auto unannounced = std::find(new_names_.begin(), new_names_.end(), name);
  if (unannounced != new_names_.end()) new_names_.erase(unannounced);
  return entry;
}

std::vector<TensorEntry> TensorQueue::Close(const Status& reason) {
  std::lock_guard<std::mutex> lock(mutex_);
  closed_ = reason;
  std::vector<TensorEntry> out;
  for (auto& [name, e] : entries_) out.push_back(std::move(e));
  entries_.clear();
  new_names_.clear();
  return out;
}

size_t TensorQueue::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return entries_.size();
}

}  // namespace accord
