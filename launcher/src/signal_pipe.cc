#include "signal_pipe.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace accord::launcher {
namespace {

// The write end of the live SignalPipe's pipe, or -1. A signal handler
// cannot be given an argument, so this is the one piece of namespace-scope
// state the pipe needs.
volatile sig_atomic_t g_write_end = -1;

// Writes the signal number to the self-pipe. A full pipe drops it: the
// reader has plenty of signals waiting already.
void OnSignal(int signal) {
  int saved = errno;
  unsigned char message = static_cast<unsigned char>(signal);
  ssize_t ignored = write(g_write_end, &message, 1);
  (void)ignored;
  errno = saved;
}

}  // namespace

Result<std::unique_ptr<SignalPipe>> SignalPipe::Install(const std::vector<int>& signals) {
  int ends[2];
  if (pipe2(ends, O_CLOEXEC | O_NONBLOCK) != 0) return Status::Internal(std::string("pipe: ") + std::strerror(errno));
  std::unique_ptr<SignalPipe> pipe(new SignalPipe(UniqueFd(ends[0]), UniqueFd(ends[1])));
  g_write_end = pipe->write_end_.get();
  struct sigaction action {};
  action.sa_handler = OnSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART | SA_NOCLDSTOP;
  for (int signal : signals) {
    Saved saved{signal, {}};
    if (sigaction(signal, &action, &saved.action) != 0) {
      return Status::Internal("sigaction(" + std::to_string(signal) + "): " + std::strerror(errno));
    }
    pipe->previous_.push_back(saved);  // from here on, the destructor restores it
  }
  return pipe;
}

SignalPipe::~SignalPipe() {
  // In the reverse order, so that a signal named twice ends as it began.
  for (auto it = previous_.rbegin(); it != previous_.rend(); ++it) sigaction(it->signal, &it->action, nullptr);
  g_write_end = -1;
}

int SignalPipe::Read() {
  unsigned char message = 0;
  for (;;) {
    ssize_t n = read(read_end_.get(), &message, 1);
    if (n == 1) return message;
    if (n < 0 && errno == EINTR) continue;
    return 0;
  }
}

}  // namespace accord::launcher
