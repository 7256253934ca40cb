// MpiComm: move-only owner of an MPI communicator (MPI_Comm_free on
// destruction; failures are logged, never thrown).
#pragma once

#include <mpi.h>

namespace accord {

class MpiComm {
 public:
  MpiComm() = default;
  explicit MpiComm(MPI_Comm comm) : comm_(comm) {}
  MpiComm(MpiComm&& o) noexcept : comm_(o.comm_) { o.comm_ = MPI_COMM_NULL; }
  MpiComm& operator=(MpiComm&& o) noexcept {
    if (this != &o) {
      Reset();
      comm_ = o.comm_;
      o.comm_ = MPI_COMM_NULL;
    }
    return *this;
  }
  MpiComm(const MpiComm&) = delete;
  MpiComm& operator=(const MpiComm&) = delete;
  ~MpiComm() { Reset(); }

  MPI_Comm get() const { return comm_; }
  explicit operator bool() const { return comm_ != MPI_COMM_NULL; }
  void Reset() noexcept;

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
};

}  // namespace accord
