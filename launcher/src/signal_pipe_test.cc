// Tests for SignalPipe: signals caught while it lives come out of its pipe
// in order, and its destructor puts back the actions the signals had
// before and closes the pipe.
#include "signal_pipe.h"

#include <fcntl.h>
#include <signal.h>

#include <catch2/catch.hpp>

namespace accord::launcher {
namespace {

volatile sig_atomic_t g_previous_calls = 0;
void PreviousHandler(int) { g_previous_calls = g_previous_calls + 1; }

struct sigaction ActionOf(int signal) {
  struct sigaction action {};
  sigaction(signal, nullptr, &action);
  return action;
}

TEST_CASE("SignalPipe routes its signals to the pipe and restores the previous actions") {
  struct sigaction previous {};
  previous.sa_handler = PreviousHandler;
  sigemptyset(&previous.sa_mask);
  struct sigaction saved_usr1 {};
  struct sigaction saved_usr2 {};
  REQUIRE(sigaction(SIGUSR1, &previous, &saved_usr1) == 0);
  REQUIRE(sigaction(SIGUSR2, nullptr, &saved_usr2) == 0);
  g_previous_calls = 0;
  int pipe_fd = -1;
  {
    Result<std::unique_ptr<SignalPipe>> made = SignalPipe::Install({SIGUSR1, SIGUSR2});
    REQUIRE(made.ok());
    SignalPipe& pipe = **made;
    pipe_fd = pipe.fd();
    CHECK(ActionOf(SIGUSR1).sa_handler != PreviousHandler);
    CHECK(pipe.Read() == 0);  // nothing caught yet, and it does not block
    raise(SIGUSR1);
    raise(SIGUSR2);
    raise(SIGUSR1);
    CHECK(pipe.Read() == SIGUSR1);
    CHECK(pipe.Read() == SIGUSR2);
    CHECK(pipe.Read() == SIGUSR1);
    CHECK(pipe.Read() == 0);
    CHECK(g_previous_calls == 0);
  }
  CHECK(ActionOf(SIGUSR1).sa_handler == PreviousHandler);
  CHECK(ActionOf(SIGUSR2).sa_handler == saved_usr2.sa_handler);
  CHECK(fcntl(pipe_fd, F_GETFD) == -1);  // closed
  raise(SIGUSR1);
  CHECK(g_previous_calls == 1);
  sigaction(SIGUSR1, &saved_usr1, nullptr);
}

}  // namespace
}  // namespace accord::launcher
