// UniqueFd: owns one file descriptor and closes it when destroyed, like
// std::unique_ptr for an fd. Move-only. An instance is not synchronised: use
// it from one thread at a time (in accordrun, the main thread).
#pragma once

#include <unistd.h>

#include <utility>

namespace accord::launcher {

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }

  // Gives the fd up without closing it.
  int release() { return std::exchange(fd_, -1); }

  // Closes the fd held, if any, and holds `fd` instead.
  void reset(int fd = -1) {
    // close() is not retried on EINTR: on Linux the fd is released even then.
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

}  // namespace accord::launcher
