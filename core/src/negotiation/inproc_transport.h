// ControlTransport for N ranks living as threads in one process (tests).
//
// InProcHub is shared by the N transports; each rank's thread uses only its
// own InProcTransport. All methods are thread-safe.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "negotiation/control_transport.h"

namespace accord {

class InProcHub {
 public:
  explicit InProcHub(int size);
  int size() const { return size_; }
  // Every rank contributes `mine`; every rank gets all contributions, by rank.
  std::vector<std::string> Exchange(int rank, std::string mine);

 private:
  const int size_;
  std::mutex mutex_;
  std::condition_variable cv_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  std::vector<std::string> slots_;
  std::vector<std::string> result_;
};

class InProcTransport : public ControlTransport {
 public:
  InProcTransport(std::shared_ptr<InProcHub> hub, int rank) : hub_(std::move(hub)), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return hub_->size(); }
  Status AllreduceBitAnd(std::vector<uint64_t>* bits) override;
  Status AllreduceBitAndCarrying(std::vector<uint64_t>* bits, const std::string& mine,
                                 std::vector<std::string>* carried) override;
  Status Gather(const std::string& mine, std::vector<std::string>* gathered) override;
  Status Broadcast(std::string* bytes) override;

 private:
  std::shared_ptr<InProcHub> hub_;
  int rank_;
};

}  // namespace accord
