#include "runner.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <iterator>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <sstream>

#include "remote.h"
#include "report.h"
#include "spawn.h"

namespace accord::launcher {
namespace {

using Clock = std::chrono::steady_clock;

constexpr double kKillGraceSeconds = 10;   // SIGTERM to SIGKILL when accordrun stops mpirun
constexpr double kDrainSeconds = 3;        // waiting for the last reports after mpirun exits
constexpr int kInterruptGraceSeconds = 3;  // SIGINT to SIGTERM, when mpirun did not stop on its own
// A rank failed, and mpirun has not ended the job this long after: it may be
// waiting for a host it can no longer reach. accordrun stops it (SIGTERM,
// then SIGKILL after kKillGraceSeconds).
constexpr double kFailureGraceSeconds = 10;
constexpr int kHandledSignals[] = {SIGCHLD, SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGUSR2};

int g_signal_pipe = -1;

// Writes the signal number to the self-pipe.
void OnSignal(int signal) {
  int saved = errno;
  unsigned char message = static_cast<unsigned char>(signal);
  ssize_t ignored = write(g_signal_pipe, &message, 1);
  (void)ignored;
  errno = saved;
}

void Say(const std::string& message) { std::cerr << "accordrun: " << message << std::endl; }


std::string RandomToken() {
  std::random_device device;
  std::ostringstream token;
  token << std::hex;
  for (int i = 0; i < 4; ++i) token << device();
  return token.str();
}

// Addresses by which ranks on other hosts may reach this one: every IPv4
// address of an interface that is up, those of --network-interfaces first
// (the agents try them in order), loopback last.
std::vector<std::string> ReachableAddresses(bool remote, const std::vector<std::string>& network_interfaces) {
  if (!remote) return {"127.0.0.1"};
  std::vector<std::string> chosen;
  std::vector<std::string> others;
  ifaddrs* interfaces = nullptr;
  if (getifaddrs(&interfaces) == 0) {
    for (ifaddrs* it = interfaces; it != nullptr; it = it->ifa_next) {
      if (it->ifa_addr == nullptr || it->ifa_addr->sa_family != AF_INET) continue;
      if ((it->ifa_flags & IFF_UP) == 0 || (it->ifa_flags & IFF_LOOPBACK) != 0) continue;
      const in_addr& address = reinterpret_cast<sockaddr_in*>(it->ifa_addr)->sin_addr;
      char text[INET_ADDRSTRLEN] = {};
      inet_ntop(AF_INET, &address, text, sizeof(text));
      bool selected = InterfaceSelected(network_interfaces, it->ifa_name, ntohl(address.s_addr));
      (selected ? chosen : others).push_back(text);
    }
    freeifaddrs(interfaces);
  }
  chosen.insert(chosen.end(), others.begin(), others.end());
  chosen.push_back("127.0.0.1");
  return chosen;
}

// A listening TCP socket on an ephemeral port; -1 and a message on failure.
int Listen(bool remote, int* port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -1;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(remote ? INADDR_ANY : INADDR_LOOPBACK);
  address.sin_port = 0;
  socklen_t length = sizeof(address);
  if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 || listen(fd, SOMAXCONN) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    int saved = errno;
    close(fd);
    errno = saved;
    return -1;
  }
  *port = ntohs(address.sin_port);
  return fd;
}

// More ranks than the default limit of open files must still be able to
// report.
void RaiseOpenFileLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    setrlimit(RLIMIT_NOFILE, &limit);
  }
}

struct Client {
  int fd = -1;
  std::string buffer;
  int rank = -1;     // known after hello
  std::string host;
  bool exited = false;  // its exit report arrived
};

struct Failure {
  int rank = -1;
  std::string host;
  RankExit exit;
  int order = 0;  // failures and lost ranks in the order accordrun learned of them
};

// "mpirun exited with status 1", "mpirun was killed by signal 9".
std::string DescribeMpirunEnd(int wait_status) {
  return WIFSIGNALED(wait_status) ? "mpirun was killed by signal " + std::to_string(WTERMSIG(wait_status))
                                  : "mpirun exited with status " + std::to_string(WEXITSTATUS(wait_status));
}

int WaitStatusToExit(int status) {
  return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
}

// The state of one job while it runs.
class JobMonitor {
 public:
  JobMonitor(const LaunchPlan& plan, const RunSettings& settings, std::string token)
      : plan_(plan), settings_(settings), token_(std::move(token)) {}

  // Handles one line from a client; false when the client must be dropped.
  bool OnLine(Client& client, const std::string& line) {
    Result<ReportMessage> message = DecodeReport(line);
    if (!message.ok()) return false;
    if (message->kind == ReportMessage::Kind::kHello) {
      if (message->token != token_ || message->rank >= plan_.np) return false;
      client.rank = message->rank;
      client.host = message->host;
      if (started_.insert(message->rank).second) {
        if (settings_.verbose) {
          Say("rank " + std::to_string(message->rank) + " started on " + message->host + " (pid " +
              std::to_string(message->pid) + ")");
        }
        if (static_cast<int>(started_.size()) == plan_.np && settings_.verbose) {
          char elapsed[32];
          std::snprintf(elapsed, sizeof(elapsed), "%.1f",
                        std::chrono::duration<double>(Clock::now() - start_).count());
          Say("all " + std::to_string(plan_.np) + " ranks started in " + elapsed + " s");
        }
      }
      return true;
    }
    if (client.rank < 0 || message->rank != client.rank) return false;  // exit before hello
    client.exited = true;
    const RankExit& exit = message->exit;
    if (exit.failed() && !exit.stopped && !first_failure_) {
      first_failure_ = Failure{message->rank, client.host, exit, ++events_};
    }
    if (exit.failed() && !any_failure_) any_failure_ = Failure{message->rank, client.host, exit, ++events_};
    return true;
  }

  // A client is gone. One that started a rank and never said how it ended
  // lost its agent (killed, say by SIGKILL or the out-of-memory killer) or
  // its connection.
  void OnClosed(const Client& client) {
    if (client.rank >= 0 && !client.exited && !first_lost_) {
      first_lost_ = Failure{client.rank, client.host, RankExit{}, ++events_};
    }
  }

  // The first rank that failed or was lost, as "rank R (on HOST)"; empty
  // while none has.
  std::string FirstFailed() const {
    const std::optional<Failure>& f = first_failure_ ? first_failure_ : first_lost_;
    return f ? "rank " + std::to_string(f->rank) + " (on " + f->host + ")" : std::string();
  }

  bool AllStarted() const { return static_cast<int>(started_.size()) == plan_.np; }
  int StartedCount() const { return static_cast<int>(started_.size()); }
  void MarkStart() { start_ = Clock::now(); }

  std::string MissingRanks() const {
    std::ostringstream missing;
    int shown = 0;
    for (int rank = 0; rank < plan_.np; ++rank) {
      if (started_.count(rank) != 0) continue;
      if (shown == 10) {
        missing << ", ...";
        break;
      }
      missing << (shown == 0 ? "" : ", ") << rank;
      ++shown;
    }
    return missing.str();
  }

  // The exit status of the job, with its explanation printed; `mpirun_wait`
  // is mpirun's wait status.
  int Conclude(int mpirun_wait, bool start_timed_out, int stop_signal) const {
    if (start_timed_out) return 1;
    const int mpirun_status = WaitStatusToExit(mpirun_wait);
    if (stop_signal != 0 && !first_failure_) {
      const char* name = SignalName(stop_signal);
      Say(std::string("the job was stopped: accordrun received ") +
          (name != nullptr ? name : "signal " + std::to_string(stop_signal)) + " (" + DescribeMpirunEnd(mpirun_wait) +
          ")");
      return 128 + stop_signal;
    }
    if (first_lost_ && mpirun_status != 0 && (!first_failure_ || first_lost_->order < first_failure_->order)) {
      Say("rank " + std::to_string(first_lost_->rank) + " (on " + first_lost_->host +
          ") ended without reporting how: its rank agent was killed (e.g. by SIGKILL or the out-of-memory "
          "killer) or lost its connection to accordrun; " +
          DescribeMpirunEnd(mpirun_wait));
      return mpirun_status;
    }
    if (first_failure_) {
      const Failure& failure = *first_failure_;
      std::string text = "rank " + std::to_string(failure.rank) + " (on " + failure.host + ") " +
                         DescribeExit(failure.exit, settings_.program);
      if (plan_.np > 1) text += "; it was the first rank to fail, and the other ranks were stopped";
      Say(text);
      return ExitStatusFor(failure.exit);
    }
    if (mpirun_status != 0) {
      std::string text = DescribeMpirunEnd(mpirun_wait);
      if (any_failure_) {
        text += "; no rank failed on its own before the ranks were told to stop (the first to stop: rank " +
                std::to_string(any_failure_->rank) + " on " + any_failure_->host + "); see mpirun's messages above";
      } else if (StartedCount() < plan_.np) {
        text += " before " + std::string(StartedCount() == 0 ? "any rank" : "every rank") +
                " started; see mpirun's messages above";
      }
      Say(text);
      return mpirun_status;
    }
    if (settings_.verbose) Say("all " + std::to_string(plan_.np) + " ranks exited with status 0");
    return 0;
  }

 private:
  const LaunchPlan& plan_;
  const RunSettings& settings_;
  std::string token_;
  Clock::time_point start_ = Clock::now();
  std::set<int> started_;
  std::optional<Failure> first_failure_;
  std::optional<Failure> any_failure_;
  std::optional<Failure> first_lost_;
  int events_ = 0;
};

// Reads what a client sent; false at end of stream or on a bad message.
bool ReadClient(Client& client, JobMonitor& monitor) {
  char buffer[4096];
  for (;;) {
    ssize_t n = recv(client.fd, buffer, sizeof(buffer), MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    if (n <= 0) return false;
    client.buffer.append(buffer, static_cast<size_t>(n));
    size_t newline;
    while ((newline = client.buffer.find('\n')) != std::string::npos) {
      std::string line = client.buffer.substr(0, newline);
      client.buffer.erase(0, newline + 1);
      if (!monitor.OnLine(client, line)) return false;
    }
    if (client.buffer.size() > 4096) return false;  // no line is this long
  }
}

// Accepts every pending connection; true if there was one.
bool AcceptAll(int listen_fd, std::vector<Client>& clients) {
  bool any = false;
  for (;;) {
    int fd = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) return any;
    clients.push_back(Client{fd, "", -1, "", false});
    any = true;
  }
}

}  // namespace

int RunJob(const LaunchPlan& plan, const RunSettings& settings) {
  RaiseOpenFileLimit();
  int port = 0;
  int listen_fd = Listen(plan.remote, &port);
  if (listen_fd < 0) {
    Say(std::string("cannot open a TCP port for the ranks' reports: ") + std::strerror(errno));
    return 1;
  }
  std::string token = RandomToken();
  ReportAddress address{token, port, ReachableAddresses(plan.remote, plan.network_interfaces)};
  setenv(kReportVariable, FormatReportAddress(address).c_str(), 1);

  int signal_pipe[2];
  if (pipe2(signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
    Say(std::string("pipe: ") + std::strerror(errno));
    return 1;
  }
  g_signal_pipe = signal_pipe[1];
  struct sigaction action {};
  action.sa_handler = OnSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART | SA_NOCLDSTOP;
  for (int signal : kHandledSignals) sigaction(signal, &action, nullptr);

  SpawnOptions options;
  options.reset_signals.assign(std::begin(kHandledSignals), std::end(kHandledSignals));
  // If accordrun dies, mpirun ends the job rather than run on unwatched.
  options.parent_death_signal = SIGTERM;
  std::string error;
  Spawned spawned = Spawn(plan.argv, options, &error);
  if (spawned.pid < 0) {
    Say(error);
    return 1;
  }
  const pid_t mpirun = spawned.pid;
  if (const int exec_error = AwaitExec(&spawned); exec_error != 0) {
    waitpid(mpirun, nullptr, 0);
    Say("cannot run " + plan.argv[0] + ": " + std::strerror(exec_error));
    return 127;
  }

  JobMonitor monitor(plan, settings, token);
  monitor.MarkStart();
  std::vector<Client> clients;
  const Clock::time_point started_at = Clock::now();
  const Clock::time_point start_deadline =
      started_at + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(settings.start_timeout_s));
  constexpr Clock::time_point kNever = Clock::time_point::max();
  Clock::time_point kill_at = kNever;  // when stopping mpirun: SIGKILL at this time
  std::optional<Clock::time_point> drain_until;  // after mpirun exited
  Clock::time_point interrupt_at = kNever;  // after SIGINT: SIGTERM to mpirun at this time
  Clock::time_point failure_stop_at = kNever;  // a rank failed: SIGTERM to mpirun at this time
  bool failure_seen = false;
  bool start_timed_out = false;
  int stop_signal = 0;  // a signal that told accordrun to stop the job
  int mpirun_wait = 0;  // mpirun's wait status

  for (;;) {
    Clock::time_point now = Clock::now();
    if (drain_until) {
      // Agents that connected and ended just before mpirun may still wait in
      // the listen queue.
      bool accepted = AcceptAll(listen_fd, clients);
      if ((clients.empty() && !accepted) || now >= *drain_until) break;
    }
    if (!drain_until && !start_timed_out && !monitor.AllStarted() && now >= start_deadline) {
      start_timed_out = true;
      char seconds[32];
      std::snprintf(seconds, sizeof(seconds), "%g", settings.start_timeout_s);
      Say("only " + std::to_string(monitor.StartedCount()) + " of " + std::to_string(plan.np) +
          " ranks started within " + seconds + " s (--start-timeout); not started: rank " +
          monitor.MissingRanks() + "; stopping the job");
      kill(mpirun, SIGTERM);
      kill_at = now + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(kKillGraceSeconds));
    }
    if (!drain_until && now >= interrupt_at) {
      kill(mpirun, SIGTERM);
      interrupt_at = kNever;
    }
    if (!drain_until && now >= failure_stop_at) {
      char seconds[32];
      std::snprintf(seconds, sizeof(seconds), "%g", kFailureGraceSeconds);
      Say("mpirun has not ended the job " + std::string(seconds) + " s after " + monitor.FirstFailed() +
          " failed (it may be waiting for a host it cannot reach); stopping it");
      kill(mpirun, SIGTERM);
      failure_stop_at = kNever;
      kill_at = std::min(kill_at, now + std::chrono::duration_cast<Clock::duration>(
                                            std::chrono::duration<double>(kKillGraceSeconds)));
    }
    if (!drain_until && now >= kill_at) {
      kill(mpirun, SIGKILL);
      kill_at = kNever;
    }

    // Sleep until something happens or the next deadline.
    Clock::time_point wake = now + std::chrono::seconds(1);
    if (!drain_until && !start_timed_out && !monitor.AllStarted()) wake = std::min(wake, start_deadline);
    wake = std::min({wake, kill_at, interrupt_at, failure_stop_at});
    if (drain_until) wake = std::min(wake, *drain_until);
    int timeout_ms =
        static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(wake - now).count()) + 1;

    std::vector<pollfd> fds;
    fds.push_back({signal_pipe[0], POLLIN, 0});
    fds.push_back({listen_fd, POLLIN, 0});
    for (const Client& client : clients) fds.push_back({client.fd, POLLIN, 0});
    int ready = poll(fds.data(), fds.size(), timeout_ms);
    if (ready < 0 && errno != EINTR) {
      Say(std::string("poll: ") + std::strerror(errno));
      break;
    }
    if (ready <= 0) continue;

    if (fds[0].revents != 0) {
      unsigned char message;
      while (read(signal_pipe[0], &message, 1) == 1) {
        int signal = message;
        if (signal == SIGCHLD) {
          int status = 0;
          if (!drain_until && waitpid(mpirun, &status, WNOHANG) == mpirun) {
            mpirun_wait = status;
            drain_until = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(kDrainSeconds));
            kill_at = kNever;
          }
        } else if (!drain_until) {
          if (signal != SIGUSR1 && signal != SIGUSR2 && stop_signal == 0) stop_signal = signal;
          if (signal != SIGINT) {
            kill(mpirun, signal);
          } else if (interrupt_at == kNever) {
            // Ctrl-C reaches mpirun by itself (it shares accordrun's process
            // group), and a second SIGINT would make mpirun quit without
            // stopping the ranks. So SIGINT is not passed on; a SIGINT meant
            // for accordrun alone becomes a SIGTERM if mpirun is still there
            // a little later.
            interrupt_at = Clock::now() + std::chrono::seconds(kInterruptGraceSeconds);
          }
        }
      }
    }
    if (fds[1].revents != 0) AcceptAll(listen_fd, clients);
    // Client fds are fds[2...] in the order of `clients` before accepting.
    std::vector<Client> kept;
    for (size_t i = 0; i < clients.size(); ++i) {
      Client& client = clients[i];
      bool polled = i + 2 < fds.size();
      if (polled && fds[i + 2].revents == 0) {
        kept.push_back(std::move(client));
        continue;
      }
      if (ReadClient(client, monitor)) {
        kept.push_back(std::move(client));
      } else {
        monitor.OnClosed(client);
        close(client.fd);
      }
    }
    clients = std::move(kept);
    if (!drain_until && !failure_seen && !monitor.FirstFailed().empty()) {
      failure_seen = true;
      failure_stop_at = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(kFailureGraceSeconds));
    }
  }

  for (const Client& client : clients) close(client.fd);
  close(listen_fd);
  struct sigaction fallback {};
  fallback.sa_handler = SIG_DFL;
  for (int signal : kHandledSignals) sigaction(signal, &fallback, nullptr);
  close(signal_pipe[0]);
  close(signal_pipe[1]);
  g_signal_pipe = -1;
  unsetenv(kReportVariable);
  if (!drain_until) {  // left the loop on a poll error: collect mpirun
    kill(mpirun, SIGTERM);
    int status = 0;
    waitpid(mpirun, &status, 0);
    mpirun_wait = status;
  }
  return monitor.Conclude(mpirun_wait, start_timed_out, stop_signal);
}

}  // namespace accord::launcher
