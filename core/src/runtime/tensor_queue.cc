#include "runtime/tensor_queue.h"

#include <algorithm>

namespace accord {

Status TensorQueue::CheckNewName(const std::string& name) const {
  if (entries_.count(name) == 0) return Status::OK();
  return Status::InvalidArgument("a tensor named '" + name +
                                 "' is already in flight on this rank; wait for it to complete or use another name");
}

Status TensorQueue::Enqueue(std::vector<TensorEntry> entries, bool wake) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!closed_.ok()) return closed_;
    for (size_t i = 0; i < entries.size(); ++i) {
      const std::string& name = entries[i].request.name;
      for (size_t j = 0; j < i; ++j) {
        if (entries[j].request.name == name) {
          return Status::InvalidArgument("a tensor named '" + name + "' appears twice in one grouped operation");
        }
      }
      ACCORD_RETURN_IF_ERROR(CheckNewName(name));
    }
    for (auto& e : entries) new_entries_.push_back(InsertLocked(std::move(e)));
  }
  Signal(wake);
  return Status::OK();
}

Status TensorQueue::Enqueue(TensorEntry&& entry, bool wake) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!closed_.ok()) return closed_;
    TensorEntry* inserted = InsertLocked(std::move(entry));
    if (inserted == nullptr) return CheckNewName(entry.request.name);
    new_entries_.push_back(inserted);
  }
  Signal(wake);
  return Status::OK();
}

TensorEntry* TensorQueue::InsertLocked(TensorEntry&& entry) {
  if (spare_.empty()) {
    // try_emplace leaves `entry` untouched when the name is taken.
    auto [it, inserted] = entries_.try_emplace(entry.request.name, std::move(entry));
    return inserted ? &it->second : nullptr;
  }
  Taken node = spare_.Take();
  node.key() = entry.request.name;
  node.mapped() = std::move(entry);
  auto result = entries_.insert(std::move(node));
  if (result.inserted) return &result.position->second;
  entry = std::move(result.node.mapped());  // the name is in flight: give the entry back
  spare_.Keep(std::move(result.node));
  return nullptr;
}

void TensorQueue::Release(Taken* taken, SpareNodes<Map>* into) {
  if (!*taken) return;
  // A kept node must not keep a handle, an event or an allocator's memory
  // alive; what else it holds is replaced by the next entry in it.
  TensorEntry& e = taken->mapped();
  e.handle.reset();
  e.ready.reset();
  e.allocator = nullptr;
  into->Keep(std::move(*taken));
}

void TensorQueue::Recycle(std::vector<Taken>* taken) {
  std::lock_guard<std::mutex> lock(mutex_);
  spare_.KeepAll(&returned_);
  for (Taken& t : *taken) Release(&t, &spare_);
}

void TensorQueue::Recycle(Taken* taken) { Release(taken, &returned_); }

void TensorQueue::Signal(bool wake) {
  if (wake) {
    signal_->Notify();
  } else {
    signal_->Bump();
  }
}

std::vector<Request> TensorQueue::TakeNewRequests() {
  std::lock_guard<std::mutex> lock(mutex_);
  spare_.KeepAll(&returned_);
  std::vector<Request> out;
  out.reserve(new_entries_.size());
  for (TensorEntry* e : new_entries_) {
    e->announced = true;
    out.push_back(std::move(e->request));
  }
  new_entries_.clear();
  return out;
}

uint64_t TensorQueue::NewBytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  uint64_t bytes = 0;
  for (const TensorEntry* e : new_entries_) bytes += e->input.size_bytes();
  return bytes;
}

std::vector<TensorQueue::Taken> TensorQueue::Remove(const std::vector<const std::string*>& names) {
  std::vector<Taken> out(names.size());
  std::lock_guard<std::mutex> lock(mutex_);
  spare_.KeepAll(&returned_);
  for (size_t i = 0; i < names.size(); ++i) out[i] = TakeLocked(*names[i]);
  return out;
}

TensorQueue::Taken TensorQueue::Remove(const std::string& name) {
  std::lock_guard<std::mutex> lock(mutex_);
  spare_.KeepAll(&returned_);
  return TakeLocked(name);
}

TensorQueue::Taken TensorQueue::TakeLocked(const std::string& name) {
  auto it = entries_.find(name);
  if (it == entries_.end()) return {};
  if (!it->second.announced) {
    // A rank that has joined can be handed the response for a name it
    // enqueued after this round's TakeNewRequests: it must not be announced.
    new_entries_.erase(std::find(new_entries_.begin(), new_entries_.end(), &it->second));
  }
  return entries_.extract(it);
}

bool TensorQueue::CopyInput(const std::string& name, size_t max_bytes, std::string* out) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = entries_.find(name);
  if (it == entries_.end() || it->second.input.size_bytes() > max_bytes) return false;
  out->append(static_cast<const char*>(it->second.input.data), it->second.input.size_bytes());
  return true;
}

std::vector<TensorEntry> TensorQueue::Close(const Status& reason) {
  std::lock_guard<std::mutex> lock(mutex_);
  closed_ = reason;
  std::vector<TensorEntry> out;
  for (auto& [name, e] : entries_) out.push_back(std::move(e));
  entries_.clear();
  new_entries_.clear();
  return out;
}

bool FinishEntry(TensorEntry& entry, OpType type, const Status& status) {
  const Status& result = entry.error.ok() ? status : entry.error;
  // Allreduce and broadcast wrote into memory known at enqueue.
  if (type == OpType::kAllreduce || type == OpType::kBroadcast) {
    return entry.handle->CompletePartQuietly(result, entry.part,
                                             std::move(entry.output_is_input ? entry.input : entry.output));
  }
  return entry.handle->CompletePartQuietly(result, entry.part);
}

size_t TensorQueue::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return entries_.size();
}

}  // namespace accord
