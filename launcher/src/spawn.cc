#include "spawn.h"

#include <fcntl.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace accord::launcher {

Spawned Spawn(const std::vector<std::string>& argv, const SpawnOptions& options, std::string* error) {
  Spawned spawned;
  int exec_pipe[2];
  if (pipe2(exec_pipe, O_CLOEXEC) != 0) {
    *error = std::string("pipe: ") + std::strerror(errno);
    return spawned;
  }
  // Built before the fork: the child must not allocate.
  std::vector<char*> args;
  for (const std::string& word : argv) args.push_back(const_cast<char*>(word.c_str()));
  args.push_back(nullptr);
  const pid_t parent = getpid();
  const pid_t child = fork();
  if (child < 0) {
    *error = std::string("fork: ") + std::strerror(errno);
    close(exec_pipe[0]);
    close(exec_pipe[1]);
    return spawned;
  }
  if (child == 0) {
    close(exec_pipe[0]);
    struct sigaction fallback {};
    fallback.sa_handler = SIG_DFL;
    for (int signal : options.reset_signals) sigaction(signal, &fallback, nullptr);
    if (options.child_mask != nullptr) sigprocmask(SIG_SETMASK, options.child_mask, nullptr);
    if (options.parent_death_signal != 0) prctl(PR_SET_PDEATHSIG, options.parent_death_signal);
    if (getppid() != parent) _exit(1);
    if (options.search_path) {
      execvp(args[0], args.data());
    } else {
      execv(args[0], args.data());
    }
    int exec_error = errno;
    ssize_t ignored = write(exec_pipe[1], &exec_error, sizeof(exec_error));
    (void)ignored;
    _exit(127);
  }
  close(exec_pipe[1]);
  spawned.pid = child;
  spawned.exec_report = exec_pipe[0];
  return spawned;
}

int AwaitExec(Spawned* spawned) {
  int exec_error = 0;
  ssize_t n;
  do {
    n = read(spawned->exec_report, &exec_error, sizeof(exec_error));
  } while (n < 0 && errno == EINTR);
  close(spawned->exec_report);
  spawned->exec_report = -1;
  return n == static_cast<ssize_t>(sizeof(exec_error)) ? exec_error : 0;
}

}  // namespace accord::launcher
