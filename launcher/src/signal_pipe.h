// SignalPipe: while it lives, the signals it was made for are caught and
// their numbers written to a non-blocking self-pipe, so that a poll() loop
// can handle them as ordinary input (the handler itself only write()s,
// which is async-signal-safe). Its destructor restores the actions the
// signals had before and closes the pipe, on every way out of the scope.
//
// Signal actions belong to the process: make and destroy a SignalPipe on
// the main thread, and have at most one alive at a time. Read() and fd()
// are for the thread that owns it.
#pragma once

#include <signal.h>

#include <memory>
#include <vector>

#include "accord/status.h"
#include "unique_fd.h"

namespace accord::launcher {

class SignalPipe {
 public:
  // Makes the pipe and installs the handler (SA_RESTART, and SA_NOCLDSTOP
  // so that SIGCHLD means a child ended) for each signal in `signals`.
  static Result<std::unique_ptr<SignalPipe>> Install(const std::vector<int>& signals);

  SignalPipe(const SignalPipe&) = delete;
  SignalPipe& operator=(const SignalPipe&) = delete;
  ~SignalPipe();

  // The read end, to poll for POLLIN.
  int fd() const { return read_end_.get(); }

  // The next signal caught, or 0 when none is waiting. Never blocks.
  int Read();

 private:
  SignalPipe(UniqueFd read_end, UniqueFd write_end)
      : read_end_(std::move(read_end)), write_end_(std::move(write_end)) {}

  struct Saved {
    int signal;
    struct sigaction action;
  };

  UniqueFd read_end_;
  UniqueFd write_end_;
  std::vector<Saved> previous_;  // what each signal did before, restored in the destructor
};

}  // namespace accord::launcher
