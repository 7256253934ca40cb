#include "rank_agent.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <iterator>
#include <optional>

#include "agent_env.h"
#include "binding.h"
#include "plan.h"
#include "report.h"
#include "spawn.h"

namespace accord::launcher {
namespace {

constexpr int kConnectTimeoutMs = 5000;
constexpr int kForwardedSignals[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};

volatile sig_atomic_t g_child_pid = 0;
volatile sig_atomic_t g_stopped = 0;  // told to stop before the program ended

void ForwardSignal(int signal) {
  if (signal != SIGUSR1 && signal != SIGUSR2) g_stopped = 1;
  pid_t child = g_child_pid;
  if (child > 0) kill(child, signal);
}

// One line to stderr in one write(), so that lines of ranks sharing the
// terminal or mpirun's forwarding do not interleave mid-line.
void WriteLine(const std::string& text) {
  std::string line = text + "\n";
  size_t done = 0;
  while (done < line.size()) {
    ssize_t n = write(STDERR_FILENO, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

void Complain(const std::string& message) { WriteLine("accordrun --rank-agent: " + message); }

std::optional<int> EnvInt(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  char* end = nullptr;
  long parsed = std::strtol(value, &end, 10);
  if (*end != '\0' || parsed < 0 || parsed > (1L << 30)) return std::nullopt;
  return static_cast<int>(parsed);
}

// Connects to one address within the timeout; -1 on failure (errno set).
int ConnectTo(const std::string& host, int port) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, host.c_str(), &address.sin_addr) != 1) {
    errno = EINVAL;
    return -1;
  }
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -1;
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    if (errno != EINPROGRESS) {
      int saved = errno;
      close(fd);
      errno = saved;
      return -1;
    }
    pollfd waiting{fd, POLLOUT, 0};
    int ready;
    do {
      ready = poll(&waiting, 1, kConnectTimeoutMs);
    } while (ready < 0 && errno == EINTR);
    int error = 0;
    socklen_t length = sizeof(error);
    if (ready <= 0) {
      error = ready == 0 ? ETIMEDOUT : errno;
    } else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) != 0) {
      error = errno;
    }
    if (error != 0) {
      close(fd);
      errno = error;
      return -1;
    }
  }
  int flags = fcntl(fd, F_GETFL);
  fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

void SendAll(int fd, const std::string& text) {
  size_t sent = 0;
  while (sent < text.size()) {
    ssize_t n = send(fd, text.data() + sent, text.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // accordrun is gone; nothing more to tell it
    sent += static_cast<size_t>(n);
  }
}

// Connects to accordrun and says hello; -1 (after a message) when it cannot.
int ConnectToLauncher(const std::string& report, int rank) {
  Result<ReportAddress> address = ParseReportAddress(report);
  if (!address.ok()) {
    Complain(address.status().message());
    return -1;
  }
  char hostname[256] = {};
  gethostname(hostname, sizeof(hostname) - 1);
  std::string failures;
  for (const std::string& host : address->hosts) {
    int fd = ConnectTo(host, address->port);
    if (fd >= 0) {
      SendAll(fd, EncodeHello(address->token, rank, static_cast<long>(getpid()), hostname));
      return fd;
    }
    failures +=
        (failures.empty() ? "" : "; ") + host + ":" + std::to_string(address->port) + ": " + std::strerror(errno);
  }
  Complain("rank " + std::to_string(rank) + " on " + hostname + " cannot reach accordrun (" + failures +
           "); the hosts must be able to open TCP connections to the host that runs accordrun");
  return -1;
}

}  // namespace

int RunRankAgent(const std::vector<std::string>& command) {
  if (command.empty()) {
    Complain("no program given");
    return 2;
  }
  std::optional<int> rank = EnvInt("OMPI_COMM_WORLD_RANK");
  if (!rank) rank = EnvInt("PMIX_RANK");
  int report_fd = -1;
  if (const char* report = std::getenv(kReportVariable); report != nullptr && *report != '\0' && rank) {
    report_fd = ConnectToLauncher(report, *rank);
    if (report_fd < 0) return 1;
  }
  unsetenv(kReportVariable);  // the program has no use for it
  const char* bind = std::getenv(kBindVariable);
  if (bind != nullptr) {
    std::optional<int> local_rank = EnvInt("OMPI_COMM_WORLD_LOCAL_RANK");
    std::optional<int> local_size = EnvInt("OMPI_COMM_WORLD_LOCAL_SIZE");
    if (local_rank && local_size) {
      char host[256] = {};
      gethostname(host, sizeof(host) - 1);
      const char* report = std::getenv(kReportBindingsVariable);
      bool reporting = report != nullptr && std::string(report) == "1";
      for (const std::string& message : BindRankAgent(bind, *local_rank, *local_size, host, reporting)) {
        if (message.rfind("note: ", 0) == 0) {
          WriteLine("accordrun: " + message);
        } else if (message.rfind("binding: ", 0) == 0) {
          WriteLine("accordrun: rank " + std::to_string(rank.value_or(-1)) + " " + message);
        } else {
          Complain(message);
        }
      }
    }
  }
  unsetenv(kBindVariable);
  unsetenv(kReportBindingsVariable);
  // torchrun's per-rank variables, for torch.distributed's env:// (plan.h).
  for (const EnvVar& var : TorchRankVariables([](const char* name) { return std::getenv(name); })) {
    setenv(var.name.c_str(), var.value.c_str(), 1);
  }
  unsetenv(kHostRanksVariable);

  // Signals are blocked until the child's pid is known, so none is lost.
  sigset_t forwarded;
  sigemptyset(&forwarded);
  for (int signal : kForwardedSignals) sigaddset(&forwarded, signal);
  sigset_t previous;
  sigprocmask(SIG_BLOCK, &forwarded, &previous);
  struct sigaction action {};
  action.sa_handler = ForwardSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  for (int signal : kForwardedSignals) sigaction(signal, &action, nullptr);
  // If mpirun (or the Open MPI daemon that started this agent) goes away
  // without stopping its ranks, this one stops anyway.
  pid_t launcher = getppid();
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() != launcher || launcher == 1) raise(SIGTERM);  // already gone: handled once unblocked

  SpawnOptions options;
  options.search_path = true;
  options.reset_signals.assign(std::begin(kForwardedSignals), std::end(kForwardedSignals));
  options.child_mask = &previous;
  // If the agent is killed (mpirun's last resort is SIGKILL), so is the program.
  options.parent_death_signal = SIGKILL;
  std::string error;
  Spawned child = Spawn(command, options, &error);
  if (child.pid < 0) {
    Complain(error);
    return 1;
  }
  g_child_pid = child.pid;
  sigprocmask(SIG_SETMASK, &previous, nullptr);

  RankExit exit;
  const int exec_error = AwaitExec(&child);
  int status = 0;
  while (waitpid(child.pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (exec_error != 0) {
    exit.how = RankExit::How::kNotStarted;
    exit.value = exec_error;
    if (report_fd < 0) Complain(DescribeExit(exit, command[0]));  // else accordrun says it
  } else if (WIFSIGNALED(status)) {
    exit.how = RankExit::How::kSignaled;
    exit.value = WTERMSIG(status);
  } else {
    exit.how = RankExit::How::kExited;
    exit.value = WEXITSTATUS(status);
  }
  exit.stopped = g_stopped != 0;
  if (report_fd >= 0) {
    SendAll(report_fd, EncodeExit(*rank, exit));
    close(report_fd);
  }

  if (exit.how == RankExit::How::kSignaled) {
    // End the same way, without a core file of the agent itself.
    rlimit no_core{0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
    std::signal(exit.value, SIG_DFL);
    sigset_t just_this;
    sigemptyset(&just_this);
    sigaddset(&just_this, exit.value);
    sigprocmask(SIG_UNBLOCK, &just_this, nullptr);
    raise(exit.value);
  }
  return ExitStatusFor(exit);
}

}  // namespace accord::launcher
