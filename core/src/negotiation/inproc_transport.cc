#include "negotiation/inproc_transport.h"

#include <cstring>

namespace accord {

InProcHub::InProcHub(int size) : size_(size), slots_(size) {}

std::vector<std::string> InProcHub::Exchange(int rank, std::string mine) {
  std::unique_lock<std::mutex> lock(mutex_);
  const uint64_t generation = generation_;
  slots_[rank] = std::move(mine);
  if (++arrived_ == size_) {
    // The last to arrive publishes. A rank can only start the next exchange
    // after returning from this one, so result_ is stable until all have read.
    result_ = slots_;
    arrived_ = 0;
    ++generation_;
    cv_.notify_all();
  } else {
    cv_.wait(lock, [&] { return generation_ != generation; });
  }
  return result_;
}

Status InProcTransport::AllreduceBitAnd(std::vector<uint64_t>* bits) {
  std::string mine(reinterpret_cast<const char*>(bits->data()), bits->size() * sizeof(uint64_t));
  auto all = hub_->Exchange(rank_, std::move(mine));
  for (const auto& other : all) {
    if (other.size() != bits->size() * sizeof(uint64_t)) {
      return Status::Internal("in-process bit allreduce: ranks passed different lengths");
    }
    for (size_t i = 0; i < bits->size(); ++i) {
      uint64_t word;
      std::memcpy(&word, other.data() + i * sizeof(uint64_t), sizeof(word));
      (*bits)[i] &= word;
    }
  }
  return Status::OK();
}

Status InProcTransport::AllreduceBitAndCarrying(std::vector<uint64_t>* bits, const std::string& mine,
                                                std::vector<std::string>* carried) {
  if (mine.size() > kCarryBytes) return Status::Internal("in-process bit allreduce: more than kCarryBytes carried");
  ACCORD_RETURN_IF_ERROR(AllreduceBitAnd(bits));
  *carried = hub_->Exchange(rank_, mine);
  return Status::OK();
}

Status InProcTransport::Gather(const std::string& mine, std::vector<std::string>* gathered) {
  auto all = hub_->Exchange(rank_, mine);
  if (rank_ == 0) *gathered = std::move(all);
  return Status::OK();
}

Status InProcTransport::Broadcast(std::string* bytes) {
  auto all = hub_->Exchange(rank_, rank_ == 0 ? *bytes : std::string());
  *bytes = std::move(all[0]);
  return Status::OK();
}

}  // namespace accord
