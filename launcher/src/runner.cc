#include "runner.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <optional>
#include <random>
#include <sstream>

#include "agent_env.h"
#include "rank_monitor.h"
#include "remote.h"
#include "report.h"
#include "spawn.h"

namespace accord::launcher {
namespace {

using Clock = std::chrono::steady_clock;
constexpr Clock::time_point kNever = Clock::time_point::max();

constexpr double kKillGraceSeconds = 10;      // SIGTERM to SIGKILL when accordrun stops mpirun
constexpr double kDrainSeconds = 3;           // waiting for the last reports after mpirun exits
constexpr double kInterruptGraceSeconds = 3;  // SIGINT to SIGTERM, when mpirun did not stop on its own
// A rank failed, and mpirun has not ended the job this long after: it may be
// waiting for a host it can no longer reach. accordrun stops it (SIGTERM,
// then SIGKILL after kKillGraceSeconds).
constexpr double kFailureGraceSeconds = 10;
// `accordrun --free-port` on rank 0's host, started through mpirun.
constexpr double kProbeTimeoutSeconds = 60;
const std::vector<int> kHandledSignals = {SIGCHLD, SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGUSR2};

void Say(const std::string& message) { std::cerr << "accordrun: " << message << std::endl; }

Clock::time_point After(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

std::string FormatSeconds(double seconds) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g", seconds);
  return text;
}

std::string RandomToken() {
  std::random_device device;
  std::ostringstream token;
  token << std::hex;
  for (int i = 0; i < 4; ++i) token << device();
  return token.str();
}

// A listening TCP socket on an ephemeral port, on every interface when ranks
// may run on other hosts, else on loopback only.
Result<UniqueFd> Listen(bool remote, int* port) {
  UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(remote ? INADDR_ANY : INADDR_LOOPBACK);
  address.sin_port = 0;
  socklen_t length = sizeof(address);
  if (!fd.valid() || bind(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      listen(fd.get(), SOMAXCONN) != 0 || getsockname(fd.get(), reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    return Status::Internal(std::string("cannot open a TCP port for the ranks' reports: ") + std::strerror(errno));
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

// One connection: an agent's, or a program's own (first line "worker ...")
// when an observer is there to take it.
struct Connection {
  UniqueFd fd;
  std::string buffer;  // a line not yet complete
  RankMonitor::Peer peer;
  int id = 0;           // for the observer
  bool lines = false;   // a line has arrived
  bool worker = false;  // its first line was "worker ..."
};

// Reads what an agent or a program sent; false at end of stream or on a bad
// message.
bool ReadConnection(Connection& connection, RankMonitor& monitor, GenerationObserver* observer) {
  char buffer[4096];
  for (;;) {
    ssize_t n = recv(connection.fd.get(), buffer, sizeof(buffer), MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    if (n <= 0) return false;
    connection.buffer.append(buffer, static_cast<size_t>(n));
    size_t newline;
    while ((newline = connection.buffer.find('\n')) != std::string::npos) {
      std::string line = connection.buffer.substr(0, newline);
      connection.buffer.erase(0, newline + 1);
      if (!connection.lines) {
        connection.lines = true;
        connection.worker = observer != nullptr && line.rfind("worker ", 0) == 0;
      }
      if (connection.worker ? !observer->OnWorkerLine(connection.id, line) : !monitor.OnLine(connection.peer, line)) {
        return false;
      }
    }
    if (connection.buffer.size() > 4096) return false;  // no line is this long
  }
}

// Accepts every pending connection; true if there was one. `next_id`
// numbers them.
bool AcceptAll(int listen_fd, std::vector<Connection>& connections, int* next_id) {
  bool any = false;
  for (;;) {
    UniqueFd fd(accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (!fd.valid()) return any;
    Connection connection;
    connection.fd = std::move(fd);
    connection.id = ++*next_id;
    connections.push_back(std::move(connection));
    any = true;
  }
}

// Sends a line to a program; a program that does not take it at once (its
// socket buffer is full, or it is gone) misses it, and its connection's end
// tells the rest.
void SendLine(const Connection& connection, const std::string& line) {
  std::string text = line + "\n";
  ssize_t sent = send(connection.fd.get(), text.data(), text.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  (void)sent;
}

// When the supervision loop must act next; kNever for what is not due.
struct Deadlines {
  Clock::time_point start = kNever;         // --start-timeout: every rank has said hello by then
  Clock::time_point interrupt = kNever;     // after SIGINT: SIGTERM to mpirun
  Clock::time_point failure_stop = kNever;  // a rank failed and mpirun runs on: SIGTERM to it
  Clock::time_point kill = kNever;          // mpirun was told to stop: SIGKILL
  Clock::time_point drain = kNever;         // mpirun has ended: stop waiting for reports

  // mpirun has ended: nothing is left to do to it.
  void ClearStops() { start = interrupt = failure_stop = kill = kNever; }

  // How long poll() may sleep: until the next deadline, at most a second.
  int PollTimeoutMs(Clock::time_point now) const {
    Clock::time_point wake = std::min({now + std::chrono::seconds(1), start, interrupt, failure_stop, kill, drain});
    return static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(wake - now).count()) + 1;
  }
};

// What Generation::Start sets in accordrun's environment for mpirun:
// MASTER_ADDR and MASTER_PORT as `master` says (plan.h), the names set put
// in `exported`.
Status ExportTorchMaster(const TorchMaster& master, const std::vector<std::string>& addresses, bool verbose,
                         std::vector<const char*>* exported) {
  if (!master.set_addr && !master.set_port) return Status::OK();
  PortProbe found;
  if (master.probe_argv.empty()) {
    ACCORD_ASSIGN_OR_RETURN(found.port, FreeTcpPort());
    found.address = addresses.front();
  } else {
    Result<CommandOutput> output = RunAndCapture(master.probe_argv, kProbeTimeoutSeconds, /*stdout_only=*/true);
    if (!output.ok() || output->exit_status != 0) {
      return Status::Internal(
          "cannot choose MASTER_PORT on " + master.host + " (" +
          (output.ok() ? "exit status " + std::to_string(output->exit_status) : output.status().message()) +
          "); set MASTER_PORT (and MASTER_ADDR) yourself");
    }
    Result<PortProbe> parsed = ParsePortProbe(output->output);
    if (!parsed.ok())
      return Status::Internal("choosing MASTER_PORT on " + master.host + ": " + parsed.status().message());
    found = *parsed;
  }
  std::string addr = !master.addr.empty() ? master.addr : !found.address.empty() ? found.address : master.host;
  if (master.set_addr) {
    setenv("MASTER_ADDR", addr.c_str(), 1);
    exported->push_back("MASTER_ADDR");
  }
  if (master.set_port) {
    setenv("MASTER_PORT", std::to_string(found.port).c_str(), 1);
    exported->push_back("MASTER_PORT");
  }
  if (verbose) {
    Say("torch.distributed: " + std::string(master.set_addr ? "MASTER_ADDR=" + addr + " " : "") +
        (master.set_port ? "MASTER_PORT=" + std::to_string(found.port) : ""));
  }
  return Status::OK();
}

// One generation: one mpirun, its agents' connections and what they
// reported, from the start of mpirun until it has ended and its last
// reports are read. Made, used and destroyed within Job::RunGeneration.
class Generation {
 public:
  Generation(const LaunchPlan& plan, const RunSettings& settings, int listen_fd, SignalPipe& signals,
             GenerationObserver* observer)
      : plan_(plan),
        settings_(settings),
        listen_fd_(listen_fd),
        signals_(signals),
        observer_(observer),
        token_(RandomToken()),
        monitor_(plan.np, token_, settings.program, settings.verbose, Say) {}
  Generation(const Generation&) = delete;
  Generation& operator=(const Generation&) = delete;
  // An mpirun still running (the loop ended on an error) is stopped and
  // collected; the report variable is removed from accordrun's environment.
  ~Generation() {
    Collect();
    unsetenv(kReportVariable);
    for (const char* name : torch_exported_) unsetenv(name);
  }

  // Starts mpirun, its agents told to report to `port` at `addresses`;
  // accordrun's exit status when mpirun could not be started.
  std::optional<int> Start(int port, const std::vector<std::string>& addresses);
  // Runs until mpirun has ended and the last reports are read.
  void Supervise();
  // Collects mpirun if it still runs, closes the connections and says how
  // the generation ended.
  GenerationResult Finish();

 private:
  void ActOnDeadlines(Clock::time_point now);
  void HandleSignals();
  void OnMpirunSignal(int signal);
  void ServeConnections(const std::vector<pollfd>& fds);
  void Tick(Clock::time_point now);
  void Collect();

  const LaunchPlan& plan_;
  const RunSettings& settings_;
  const int listen_fd_;
  SignalPipe& signals_;
  GenerationObserver* const observer_;  // may be null
  const std::string token_;             // the agents of this generation say hello with it
  RankMonitor monitor_;
  pid_t mpirun_ = -1;
  bool ended_ = false;   // mpirun has been collected
  int mpirun_wait_ = 0;  // its wait status, once ended_
  std::vector<Connection> connections_;
  int next_connection_id_ = 0;
  Clock::time_point next_tick_ = Clock::now();
  Deadlines deadlines_;
  bool failure_seen_ = false;
  bool hastened_ = false;  // mpirun was told to end a generation whose ranks have all ended
  bool start_timed_out_ = false;
  int stop_signal_ = 0;                      // a signal that told accordrun to stop the job
  std::vector<const char*> torch_exported_;  // MASTER_ADDR, MASTER_PORT when set for this generation
};

std::optional<int> Generation::Start(int port, const std::vector<std::string>& addresses) {
  ReportAddress address{token_, port, addresses};
  setenv(kReportVariable, FormatReportAddress(address).c_str(), 1);
  // Chosen per generation, just before its start: a port free now.
  if (Status master = ExportTorchMaster(plan_.torch, addresses, settings_.verbose, &torch_exported_); !master.ok()) {
    Say(master.message());
    return 1;
  }
  SpawnOptions options;
  options.reset_signals = kHandledSignals;
  // If accordrun dies, mpirun ends the job rather than run on unwatched.
  options.parent_death_signal = SIGTERM;
  std::string error;
  Spawned spawned = Spawn(plan_.argv, options, &error);
  if (spawned.pid < 0) {
    Say(error);
    return 1;
  }
  mpirun_ = spawned.pid;
  if (const int exec_error = AwaitExec(&spawned); exec_error != 0) {
    waitpid(mpirun_, nullptr, 0);
    ended_ = true;
    Say("cannot run " + plan_.argv[0] + ": " + std::strerror(exec_error));
    return 127;
  }
  monitor_.MarkStart();
  deadlines_.start = After(settings_.start_timeout_s);
  return std::nullopt;
}

void Generation::Supervise() {
  for (;;) {
    const Clock::time_point now = Clock::now();
    if (ended_) {
      // Agents that connected and ended just before mpirun may still wait in
      // the listen queue.
      bool accepted = AcceptAll(listen_fd_, connections_, &next_connection_id_);
      if ((connections_.empty() && !accepted) || now >= deadlines_.drain) return;
    } else {
      ActOnDeadlines(now);
      Tick(now);
    }
    std::vector<pollfd> fds = {{signals_.fd(), POLLIN, 0}, {listen_fd_, POLLIN, 0}};
    for (const Connection& connection : connections_) fds.push_back({connection.fd.get(), POLLIN, 0});
    int ready = poll(fds.data(), fds.size(), deadlines_.PollTimeoutMs(now));
    if (ready < 0 && errno != EINTR) {
      Say(std::string("poll: ") + std::strerror(errno));
      return;
    }
    if (ready <= 0) continue;
    if (fds[0].revents != 0) HandleSignals();
    if (fds[1].revents != 0) AcceptAll(listen_fd_, connections_, &next_connection_id_);
    ServeConnections(fds);
    if (!ended_ && !failure_seen_ && !monitor_.FirstFailed().empty()) {
      failure_seen_ = true;
      deadlines_.failure_stop = After(kFailureGraceSeconds);
    }
    // Under a driver, a failed generation whose ranks have all ended is
    // over, and mpirun's abort (which gives every host's processes a second
    // after SIGTERM, though none is left) only delays the next one: it is
    // told to stop, which it does in half the time.
    if (observer_ != nullptr && !ended_ && failure_seen_ && !hastened_ && monitor_.AllEnded()) {
      hastened_ = true;
      kill(mpirun_, SIGTERM);
      deadlines_.kill = std::min(deadlines_.kill, After(kKillGraceSeconds));
    }
  }
}

void Generation::ActOnDeadlines(Clock::time_point now) {
  if (monitor_.AllStarted()) deadlines_.start = kNever;
  if (now >= deadlines_.start) {
    deadlines_.start = kNever;
    start_timed_out_ = true;
    Say("only " + std::to_string(monitor_.StartedCount()) + " of " + std::to_string(plan_.np) +
        " ranks started within " + FormatSeconds(settings_.start_timeout_s) +
        " s (--start-timeout); not started: rank " + monitor_.MissingRanks() + "; stopping the job");
    kill(mpirun_, SIGTERM);
    deadlines_.kill = After(kKillGraceSeconds);
  }
  if (now >= deadlines_.interrupt) {
    kill(mpirun_, SIGTERM);
    deadlines_.interrupt = kNever;
  }
  if (now >= deadlines_.failure_stop) {
    Say("mpirun has not ended the job " + FormatSeconds(kFailureGraceSeconds) + " s after " + monitor_.FirstFailed() +
        " failed (it may be waiting for a host it cannot reach); stopping it");
    kill(mpirun_, SIGTERM);
    deadlines_.failure_stop = kNever;
    deadlines_.kill = std::min(deadlines_.kill, After(kKillGraceSeconds));
  }
  if (now >= deadlines_.kill) {
    kill(mpirun_, SIGKILL);
    deadlines_.kill = kNever;
  }
}

// The observer's turn, once a second while mpirun runs.
void Generation::Tick(Clock::time_point now) {
  if (observer_ == nullptr || now < next_tick_) return;
  next_tick_ = now + std::chrono::seconds(1);
  std::vector<std::string> broadcast;
  std::string stop;
  observer_->OnTick(&broadcast, &stop);
  for (const std::string& line : broadcast) {
    for (const Connection& connection : connections_) {
      if (connection.worker) SendLine(connection, line);
    }
  }
  if (!stop.empty() && deadlines_.kill == kNever) {
    Say(stop + "; stopping this generation");
    kill(mpirun_, SIGTERM);
    deadlines_.kill = After(kKillGraceSeconds);
  }
}

void Generation::HandleSignals() {
  for (int signal = signals_.Read(); signal != 0; signal = signals_.Read()) {
    if (ended_) continue;
    if (signal != SIGCHLD) {
      OnMpirunSignal(signal);
      continue;
    }
    int status = 0;
    if (waitpid(mpirun_, &status, WNOHANG) == mpirun_) {
      mpirun_wait_ = status;
      ended_ = true;
      deadlines_.ClearStops();
      deadlines_.drain = After(kDrainSeconds);
    }
  }
}

// A signal sent to accordrun while mpirun runs.
void Generation::OnMpirunSignal(int signal) {
  if (signal != SIGUSR1 && signal != SIGUSR2 && stop_signal_ == 0) stop_signal_ = signal;
  if (signal != SIGINT) {
    kill(mpirun_, signal);
  } else if (deadlines_.interrupt == kNever) {
    // Ctrl-C reaches mpirun by itself (it shares accordrun's process group),
    // and a second SIGINT would make mpirun quit without stopping the ranks.
    // So SIGINT is not passed on; a SIGINT meant for accordrun alone becomes
    // a SIGTERM if mpirun is still there a little later.
    deadlines_.interrupt = After(kInterruptGraceSeconds);
  }
}

// Reads every connection that poll() found ready (fds[2...], in the order of
// connections_ before accepting) and every one just accepted; drops those
// that ended.
void Generation::ServeConnections(const std::vector<pollfd>& fds) {
  std::vector<Connection> kept;
  for (size_t i = 0; i < connections_.size(); ++i) {
    Connection& connection = connections_[i];
    bool polled = i + 2 < fds.size();
    if ((polled && fds[i + 2].revents == 0) || ReadConnection(connection, monitor_, observer_)) {
      kept.push_back(std::move(connection));
    } else if (connection.worker) {
      observer_->OnWorkerClosed(connection.id);
    } else {
      monitor_.OnClosed(connection.peer);
    }
  }
  connections_ = std::move(kept);
}

void Generation::Collect() {
  if (mpirun_ < 0 || ended_) return;
  kill(mpirun_, SIGTERM);
  int status = 0;
  while (waitpid(mpirun_, &status, 0) < 0 && errno == EINTR) {
  }
  mpirun_wait_ = status;
  ended_ = true;
}

GenerationResult Generation::Finish() {
  for (const Connection& connection : connections_) {
    if (connection.worker) observer_->OnWorkerClosed(connection.id);
  }
  connections_.clear();
  Collect();
  GenerationResult result;
  result.exit_status = monitor_.Conclude(mpirun_wait_, start_timed_out_, stop_signal_, settings_.explain_end);
  result.stop_signal = stop_signal_;
  result.failed_on_their_own = monitor_.FailedOnTheirOwn();
  if (start_timed_out_) result.not_started = monitor_.MissingRankList();
  return result;
}

}  // namespace

Job::Job(const RunSettings& settings, UniqueFd listener, int port, std::vector<std::string> addresses,
         std::unique_ptr<SignalPipe> signals)
    : settings_(settings),
      listener_(std::move(listener)),
      port_(port),
      addresses_(std::move(addresses)),
      signals_(std::move(signals)) {}

Result<std::unique_ptr<Job>> Job::Open(bool remote, const std::vector<std::string>& network_interfaces,
                                       const RunSettings& settings) {
  RaiseOpenFileLimit();
  int port = 0;
  Result<UniqueFd> listener = Listen(remote, &port);
  if (!listener.ok()) return listener.status();
  Result<std::unique_ptr<SignalPipe>> signals = SignalPipe::Install(kHandledSignals);
  if (!signals.ok()) return signals.status();
  return std::unique_ptr<Job>(new Job(settings, std::move(*listener), port,
                                      ReachableAddresses(remote, network_interfaces), std::move(*signals)));
}

GenerationResult Job::RunGeneration(const LaunchPlan& plan, GenerationObserver* observer) {
  Generation generation(plan, settings_, listener_.get(), *signals_, observer);
  if (std::optional<int> failed = generation.Start(port_, addresses_)) {
    GenerationResult result;
    result.exit_status = *failed;
    return result;
  }
  generation.Supervise();
  return generation.Finish();
}

int Job::WaitForStopSignal(double seconds) {
  const Clock::time_point until = After(seconds);
  for (;;) {
    for (int signal = signals_->Read(); signal != 0; signal = signals_->Read()) {
      if (signal == SIGTERM || signal == SIGINT || signal == SIGHUP) return signal;
    }
    const Clock::time_point now = Clock::now();
    if (now >= until) return 0;
    pollfd fd{signals_->fd(), POLLIN, 0};
    int ms = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(until - now).count()) + 1;
    poll(&fd, 1, ms);
  }
}

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

Result<int> FreeTcpPort() {
  UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t length = sizeof(address);
  if (!fd.valid() || bind(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      getsockname(fd.get(), reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    return Status::Internal(std::string("cannot find a free TCP port: ") + std::strerror(errno));
  }
  return static_cast<int>(ntohs(address.sin_port));
}

Result<PortProbe> ParsePortProbe(const std::string& output) {
  std::istringstream lines(output);
  std::string line;
  std::string last;
  while (std::getline(lines, line)) {
    if (line.find_first_not_of(" \t\r") != std::string::npos) last = line;
  }
  std::istringstream words(last);
  PortProbe probe;
  std::string rest;
  if (!(words >> probe.port) || probe.port < 1 || probe.port > 65535 || (words >> probe.address && words >> rest)) {
    return Status::Internal("expected \"PORT [ADDRESS]\" from accordrun --free-port, got \"" + last.substr(0, 200) +
                            "\"");
  }
  return probe;
}

int RunJob(const LaunchPlan& plan, const RunSettings& settings) {
  Result<std::unique_ptr<Job>> job = Job::Open(plan.remote, plan.network_interfaces, settings);
  if (!job.ok()) {
    Say(job.status().message());
    return 1;
  }
  return (*job)->RunGeneration(plan).exit_status;
}

}  // namespace accord::launcher
