// Tests for UniqueFd: it closes what it owns when destroyed or reset, and a
// move hands the fd over without closing it.
#include "unique_fd.h"

#include <fcntl.h>
#include <unistd.h>

#include <catch2/catch.hpp>

namespace accord::launcher {
namespace {

bool IsOpen(int fd) { return fcntl(fd, F_GETFD) != -1; }

// A fresh fd (the read end of a pipe; the write end is closed at once).
int OpenFd() {
  int ends[2];
  REQUIRE(pipe(ends) == 0);
  close(ends[1]);
  return ends[0];
}

TEST_CASE("UniqueFd closes its fd when destroyed") {
  int fd = OpenFd();
  {
    UniqueFd owner(fd);
    CHECK(owner.valid());
    CHECK(owner.get() == fd);
    CHECK(IsOpen(fd));
  }
  CHECK_FALSE(IsOpen(fd));
  CHECK_FALSE(UniqueFd().valid());
}

TEST_CASE("UniqueFd hands its fd over on a move, and closes the one it held on assignment") {
  int first = OpenFd();
  int second = OpenFd();
  UniqueFd a(first);
  UniqueFd b(std::move(a));
  CHECK_FALSE(a.valid());
  CHECK(b.get() == first);
  CHECK(IsOpen(first));
  UniqueFd c(second);
  c = std::move(b);
  CHECK_FALSE(IsOpen(second));
  CHECK(c.get() == first);
  CHECK(IsOpen(first));
  c.reset();
  CHECK_FALSE(c.valid());
  CHECK_FALSE(IsOpen(first));
}

TEST_CASE("UniqueFd::release gives the fd up without closing it") {
  int fd = OpenFd();
  {
    UniqueFd owner(fd);
    CHECK(owner.release() == fd);
    CHECK_FALSE(owner.valid());
  }
  CHECK(IsOpen(fd));
  close(fd);
}

}  // namespace
}  // namespace accord::launcher
