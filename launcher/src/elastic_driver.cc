#include "elastic_driver.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <random>
#include <set>
#include <sstream>

#include "elastic_hosts.h"
#include "plan.h"
#include "report.h"
#include "shell_words.h"

namespace accord::launcher {
namespace {

using Clock = std::chrono::steady_clock;

// A discovery script that has not answered in this long has failed.
constexpr double kDiscoveryTimeoutSeconds = 10;
// How often discovery runs, while waiting for hosts and while a generation runs.
constexpr double kDiscoveryPeriodSeconds = 1;
// The status with which accord's collective watchdog ends a rank whose
// collective did not finish in time (runtime/collective_watchdog.h): a
// peer's failure, like kResetExitStatus.
constexpr int kWatchdogExitStatus = 124;
// A rank that has sent nothing for this many heartbeat periods when a
// generation fails is one of its causes (frozen, or cut off).
constexpr double kSilentBeats = 5;
// A silence that ended this shortly before the first sign still counts.
constexpr double kSilenceEndedLately = 3;

void Say(const std::string& message) { std::cerr << "accordrun: elastic: " << message << std::endl; }

std::string FormatNumber(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g", value);
  return text;
}

std::string Precise(double seconds) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.2f", seconds);
  return text;
}

std::string Seconds(double seconds) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f", seconds);
  return text;
}

double Since(Clock::time_point start, Clock::time_point end = Clock::now()) {
  return std::chrono::duration<double>(end - start).count();
}

double UnixNow() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }

std::string Join(const std::vector<std::string>& words, const char* separator = ", ") {
  std::string text;
  for (const std::string& word : words) text += (text.empty() ? "" : separator) + word;
  return text;
}

std::string RandomId() {
  std::random_device device;
  char text[17];
  std::snprintf(text, sizeof(text), "%08x%08x", device(), device());
  return text;
}

// The rest of `line` after `words` space-separated words.
std::string_view Rest(std::string_view line, int words) {
  for (int i = 0; i < words; ++i) {
    size_t space = line.find(' ');
    if (space == std::string_view::npos) return {};
    line.remove_prefix(space + 1);
  }
  return line;
}

std::vector<std::string_view> Words(std::string_view line, size_t at_most) {
  std::vector<std::string_view> words;
  while (!line.empty() && words.size() + 1 < at_most) {
    size_t space = line.find(' ');
    words.push_back(line.substr(0, space));
    if (space == std::string_view::npos) return words;
    line.remove_prefix(space + 1);
  }
  if (!line.empty()) words.push_back(line);
  return words;
}

template <typename T>
bool ParseNumber(std::string_view text, T* value) {
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), *value);
  return !text.empty() && error == std::errc() && end == text.data() + text.size();
}

// The hosts each rank runs on, from a placement in rank order.
std::vector<std::string> HostOfRank(const std::vector<HostSlots>& placement) {
  std::vector<std::string> hosts;
  for (const HostSlots& host : placement) hosts.insert(hosts.end(), host.slots, host.name);
  return hosts;
}

// One generation as the driver sees it through the ranks' own connections.
class ElasticGeneration : public GenerationObserver {
 public:
  struct Settings {
    int generation = 0;
    std::string token;
    std::vector<HostSlots> placement;
    double heartbeat_s = 1;
    bool verbose = false;
  };
  struct Worker {
    int rank = -1;
    Clock::time_point last_heard;
    std::optional<Clock::time_point> silence_ended;  // when it last spoke after a silence
    bool ready = false;
    bool done = false;
    bool reset = false;
    bool closed = false;
  };

  ElasticGeneration(Settings settings, ElasticHosts& hosts,
                    std::function<std::optional<std::vector<HostSlots>>()> discover)
      : settings_(std::move(settings)),
        hosts_(hosts),
        discover_(std::move(discover)),
        host_of_rank_(HostOfRank(settings_.placement)) {}

  bool OnWorkerLine(int id, const std::string& text) override {
    Result<WorkerLine> line = ParseWorkerLine(text);
    if (!line.ok()) {
      Say("dropping a rank's connection: " + line.status().message());
      return false;
    }
    auto it = workers_.find(id);
    if (line->kind == WorkerLine::Kind::kWorker) {
      if (line->token != settings_.token || line->rank < 0 || line->rank >= static_cast<int>(host_of_rank_.size()) ||
          it != workers_.end()) {
        return false;  // a rank of an earlier generation, or a stranger
      }
      Worker& worker = workers_[id];
      worker.rank = line->rank;
      worker.last_heard = Clock::now();
      if (++connected_ == static_cast<int>(host_of_rank_.size())) all_connected_ = Clock::now();
      return true;
    }
    if (it == workers_.end() || line->rank != it->second.rank) return false;
    Worker& worker = it->second;
    const Clock::time_point now = Clock::now();
    if (Since(worker.last_heard, now) > kSilentBeats * settings_.heartbeat_s) worker.silence_ended = now;
    worker.last_heard = now;
    const std::string& host = host_of_rank_[static_cast<size_t>(worker.rank)];
    switch (line->kind) {
      case WorkerLine::Kind::kCommit:
        hosts_.Committed(host, line->commit, line->path);
        newest_commit_ = std::max(newest_commit_, line->commit);
        break;
      case WorkerLine::Kind::kReady:
        worker.ready = true;
        restore_sync_s_ = std::max(restore_sync_s_, line->restore_s + line->sync_s);
        if (++ready_ == static_cast<int>(host_of_rank_.size())) all_ready_ = Clock::now();
        break;
      case WorkerLine::Kind::kReset:
        worker.reset = true;
        MarkFirstSign();
        if (line->hosts) {
          hosts_reset_ = true;
        } else if (failure_text_.empty()) {
          failure_text_ = "rank " + std::to_string(worker.rank) + " (on " + host + "): " + line->text;
        }
        break;
      case WorkerLine::Kind::kError:
        if (error_text_.empty())
          error_text_ = "rank " + std::to_string(worker.rank) + " (on " + host + "): " + line->text;
        break;
      case WorkerLine::Kind::kDone: worker.done = true; break;
      default: break;
    }
    return true;
  }

  void OnWorkerClosed(int id) override {
    auto it = workers_.find(id);
    if (it == workers_.end()) return;
    Worker& worker = it->second;
    worker.closed = true;
    if (!worker.done && !worker.reset) MarkFirstSign();
  }

  void OnTick(std::vector<std::string>* broadcast, std::string* stop) override {
    const Clock::time_point now = Clock::now();
    if (std::optional<std::vector<HostSlots>> found = discover_()) {
      hosts_.Discovered(*found);
      ElasticHosts::Change change = hosts_.Compare(settings_.placement, now);
      if (change.any() && (change.removed != notified_.removed || change.added != notified_.added)) {
        notified_ = change;
        MarkFirstSign();
        char line[96];
        std::snprintf(line, sizeof(line), "hosts %.6f %d %d", UnixNow(), change.removed ? 1 : 0, change.added ? 1 : 0);
        broadcast->push_back(line);
        Say(std::string("the hosts changed (") + (change.removed ? "removed" : "") +
            (change.removed && change.added ? " and " : "") + (change.added ? "added" : "") +
            "); the ranks stop at their next commit");
      }
    }
    // A rank that has gone silent (frozen, or cut off) for much longer than
    // the others' collectives wait does not come back.
    const double silence_limit = std::max(60.0, 30 * settings_.heartbeat_s);
    for (const auto& [id, worker] : workers_) {
      if (worker.closed || worker.done || worker.reset) continue;
      if (Since(worker.last_heard, now) > silence_limit && stop->empty()) {
        silent_by_driver_.insert(worker.rank);
        MarkFirstSign();
        *stop = "rank " + std::to_string(worker.rank) + " (on " + host_of_rank_[static_cast<size_t>(worker.rank)] +
                ") has sent nothing for " + Seconds(silence_limit) + " s";
      }
    }
  }

  // Ranks silent for kSilentBeats heartbeats when the first sign of the end
  // came (or whose silence ended just before it), and
  // those the driver stopped the generation for.
  std::set<int> SilentRanks() const {
    std::set<int> silent = silent_by_driver_;
    silent.insert(silent_at_first_sign_.begin(), silent_at_first_sign_.end());
    return silent;
  }

  bool hosts_reset() const { return hosts_reset_; }
  const std::string& failure_text() const { return failure_text_; }
  const std::string& error_text() const { return error_text_; }
  long newest_commit() const { return newest_commit_; }
  std::optional<Clock::time_point> first_sign() const { return first_sign_; }
  double first_sign_unix() const { return first_sign_unix_; }
  std::optional<Clock::time_point> all_connected() const { return all_connected_; }
  std::optional<Clock::time_point> all_ready() const { return all_ready_; }
  double restore_sync_s() const { return restore_sync_s_; }
  const std::vector<std::string>& host_of_rank() const { return host_of_rank_; }

 private:
  void MarkFirstSign() {
    if (first_sign_) return;
    first_sign_ = Clock::now();
    first_sign_unix_ = UnixNow();
    silent_at_first_sign_ = SilentNow(*first_sign_);
    // A silence that ended just now counts: mpirun wakes a stopped rank
    // (SIGCONT) before it kills it, and the woken rank's lines may come
    // before the sign of the end that caused it.
    for (const auto& [id, worker] : workers_) {
      if (worker.silence_ended && Since(*worker.silence_ended, *first_sign_) < kSilenceEndedLately) {
        silent_at_first_sign_.insert(worker.rank);
      }
    }
    if (settings_.verbose) {
      std::string ranks;
      for (const auto& [id, worker] : workers_) {
        ranks += " " + std::to_string(worker.rank) + ":" + Precise(Since(worker.last_heard, *first_sign_)) + "s" +
                 (worker.closed ? "(closed)" : "");
      }
      std::string silent;
      for (int rank : silent_at_first_sign_) silent += " " + std::to_string(rank);
      Say("generation " + std::to_string(settings_.generation) + ": first sign of its end; last heard from rank" +
          ranks + "; silent:" + (silent.empty() ? std::string(" none") : silent));
    }
  }

  // Ranks that have sent nothing for kSilentBeats heartbeats at `now`.
  std::set<int> SilentNow(Clock::time_point now) const {
    std::set<int> silent;
    for (const auto& [id, worker] : workers_) {
      if (worker.closed || worker.done || worker.reset) continue;
      if (Since(worker.last_heard, now) > kSilentBeats * settings_.heartbeat_s) silent.insert(worker.rank);
    }
    return silent;
  }

  const Settings settings_;
  ElasticHosts& hosts_;
  const std::function<std::optional<std::vector<HostSlots>>()> discover_;
  const std::vector<std::string> host_of_rank_;
  std::map<int, Worker> workers_;  // by connection
  int connected_ = 0;
  int ready_ = 0;
  ElasticHosts::Change notified_;
  bool hosts_reset_ = false;
  std::string failure_text_;
  std::string error_text_;
  long newest_commit_ = -1;
  std::set<int> silent_by_driver_;
  std::set<int> silent_at_first_sign_;
  std::optional<Clock::time_point> first_sign_;
  double first_sign_unix_ = 0;
  std::optional<Clock::time_point> all_connected_;
  std::optional<Clock::time_point> all_ready_;
  double restore_sync_s_ = 0;
};

// Runs the discovery script, or gives the fixed hosts.
class Discovery {
 public:
  Discovery(const ElasticOptions& options, const std::vector<HostSlots>& fixed)
      : script_(options.discovery_script), slots_(options.slots_per_host), fixed_(fixed) {}

  // What the hosts are now; an error when the script failed (said once
  // until it works again, the last answer standing meanwhile).
  Result<std::vector<HostSlots>> Run() {
    if (script_.empty()) return fixed_;
    Result<CommandOutput> output =
        RunAndCapture({"/bin/sh", "-c", script_}, kDiscoveryTimeoutSeconds, /*stdout_only=*/true);
    if (!output.ok()) return Failed(output.status().message());
    if (output->exit_status != 0) {
      return Failed("it exited with status " + std::to_string(output->exit_status));
    }
    Result<std::vector<HostSlots>> hosts = ParseDiscoveredHosts(output->output, slots_);
    if (!hosts.ok()) return Failed("its output: " + hosts.status().message());
    complained_ = false;
    return hosts;
  }

  // For a generation's ticks: the hosts at most once per period; nothing
  // new in between or on failure.
  std::optional<std::vector<HostSlots>> Poll() {
    if (script_.empty() || Since(last_run_) < kDiscoveryPeriodSeconds) return std::nullopt;
    last_run_ = Clock::now();
    Result<std::vector<HostSlots>> hosts = Run();
    if (!hosts.ok()) return std::nullopt;
    return *hosts;
  }

 private:
  Status Failed(const std::string& why) {
    std::string message = "the host discovery script " + script_ + " failed: " + why;
    if (!complained_) Say(message + " (the hosts stay as it last said)");
    complained_ = true;
    return Status::PreconditionFailed(message);
  }

  const std::string script_;
  const int slots_;
  const std::vector<HostSlots> fixed_;
  bool complained_ = false;
  Clock::time_point last_run_ = Clock::time_point();
};

// The whole elastic job: generations until the training finishes or the
// driver gives up.
class ElasticJob {
 public:
  ElasticJob(const LaunchOptions& options, const SystemInfo& system, const RunSettings& settings)
      : options_(options),
        elastic_(*options.elastic),
        system_(system),
        settings_(settings),
        hosts_({elastic_.min_np, elastic_.max_np, elastic_.cooldown_s}),
        discovery_(elastic_, FixedHosts()),
        spill_dir_((elastic_.spill_dir.empty() ? DefaultSpillRoot(system) : elastic_.spill_dir) + "/accord-elastic-" +
                   RandomId()) {
    auto beat = system.env.find(kElasticHeartbeatVariable);
    if (beat != system.env.end()) {
      double seconds = 0;
      if (ParseNumber(std::string_view(beat->second), &seconds) && seconds > 0) heartbeat_s_ = seconds;
    }
  }
  ~ElasticJob() { RemoveSpill(); }

  int Run();
  // --dry-run: the first generation's placement and mpirun command.
  int DryRun();

 private:
  std::vector<HostSlots> FixedHosts() const {
    if (!options_.hosts.empty()) return options_.hosts;
    int slots = elastic_.max_np ? *elastic_.max_np : options_.np ? *options_.np : elastic_.min_np;
    return {{system_.hostname.empty() ? "localhost" : system_.hostname, slots}};
  }
  // Waits for `needed` slots; the placement, or nullopt with the exit status.
  std::optional<std::vector<HostSlots>> AwaitHosts(int needed, std::optional<ElasticHosts::Commit>* restore,
                                                   int* exit_status);
  Result<LaunchPlan> PlanGeneration(const std::vector<HostSlots>& placement,
                                    const std::optional<ElasticHosts::Commit>& restore, const ReportAddress& driver);
  // After a generation that did not finish the job: the hosts to blame, the
  // reset's reason; false (with *exit_status) when the job must end.
  bool Conclude(const GenerationResult& result, const ElasticGeneration& generation, int* exit_status);
  // Removes the job's spill directory here and on every host that ran a
  // rank (as mpirun reaches them: the rsh agent, or ssh with the job's
  // options); a host that cannot be reached is named.
  void RemoveSpill() {
    std::error_code ignored;
    std::filesystem::remove_all(spill_dir_, ignored);
    for (const std::string& host : used_hosts_) {
      if (IsLocalHost(host, system_.hostname)) continue;
      std::vector<std::string> argv;
      if (!options_.remote.rsh_agent.empty()) {
        argv = {options_.remote.rsh_agent};
      } else {
        argv = {"ssh", "-o", "BatchMode=yes"};
        if (options_.remote.ssh_port) argv.insert(argv.end(), {"-p", std::to_string(*options_.remote.ssh_port)});
        if (!options_.remote.ssh_identity_file.empty()) {
          argv.insert(argv.end(), {"-i", options_.remote.ssh_identity_file});
        }
      }
      argv.push_back(host);
      argv.push_back(JoinShellWords({"rm", "-rf", spill_dir_}));
      Result<CommandOutput> removed = RunAndCapture(argv, kDiscoveryTimeoutSeconds);
      if (!removed.ok() || removed->exit_status != 0) {
        Say("could not remove the spill directory " + spill_dir_ + " on " + host + ": " +
            (removed.ok() ? "status " + std::to_string(removed->exit_status) : removed.status().message()));
      }
    }
  }

  const LaunchOptions& options_;
  const ElasticOptions& elastic_;
  const SystemInfo& system_;
  const RunSettings& settings_;
  ElasticHosts hosts_;
  Discovery discovery_;
  const std::string spill_dir_;
  std::set<std::string> used_hosts_;  // every host that ran a rank, for the spill's removal
  double heartbeat_s_ = 1;
  std::unique_ptr<Job> job_;
  int generation_ = 0;
  int resets_ = 0;
  std::string reason_ = "start";
  long progress_at_last_reset_ = -2;  // the newest commit when the last reset began
  bool fruitless_reset_ = false;      // the last reset followed a generation that committed nothing new
};

std::optional<std::vector<HostSlots>> ElasticJob::AwaitHosts(int needed, std::optional<ElasticHosts::Commit>* restore,
                                                             int* exit_status) {
  const Clock::time_point start = Clock::now();
  bool said = false;
  for (;;) {
    Result<std::vector<HostSlots>> found = discovery_.Run();
    if (found.ok()) hosts_.Discovered(*found);
    const Clock::time_point now = Clock::now();
    std::vector<HostSlots> placement = hosts_.Place(now, needed, restore);
    if (!placement.empty()) return placement;
    const int available = hosts_.AvailableSlots(now);
    const std::vector<std::string> blacklisted = hosts_.BlacklistedNames(now);
    std::string state = std::to_string(available) + " slot" + (available == 1 ? "" : "s") + " available (hosts: " +
                        (hosts_.DiscoveredNames().empty() ? "none" : Join(hosts_.DiscoveredNames())) +
                        (blacklisted.empty() ? "" : "; blacklisted: " + Join(blacklisted)) + ")";
    // Fixed hosts blacklisted for good never come back: no use waiting.
    const bool hopeless = elastic_.discovery_script.empty() && !elastic_.cooldown_s && available < needed;
    if (hopeless || Since(start, now) >= elastic_.timeout_s) {
      std::string why = !hosts_.DiscoveredNames().empty() && available == 0 && !blacklisted.empty()
                            ? "every discovered host is blacklisted"
                            : "too few slots";
      Say("the job ends: " + why + ": " + state + ", and " + std::to_string(needed) + " needed (--min-np " +
          std::to_string(elastic_.min_np) + ")" +
          (hopeless ? std::string("; the hosts are fixed (no --host-discovery-script) and blacklisted for good")
                    : " for " + Seconds(elastic_.timeout_s) + " s (--elastic-timeout)"));
      *exit_status = 1;
      return std::nullopt;
    }
    if (!said) {
      Say("waiting up to " + Seconds(elastic_.timeout_s) + " s (--elastic-timeout) for " + std::to_string(needed) +
          " slots: " + state);
      said = true;
    }
    if (int signal = job_->WaitForStopSignal(kDiscoveryPeriodSeconds); signal != 0) {
      Say("the job was stopped while waiting for hosts");
      *exit_status = 128 + signal;
      return std::nullopt;
    }
  }
}

Result<LaunchPlan> ElasticJob::PlanGeneration(const std::vector<HostSlots>& placement,
                                              const std::optional<ElasticHosts::Commit>& restore,
                                              const ReportAddress& driver) {
  LaunchOptions options = options_;
  options.hosts = placement;
  options.hosts_origin = "--host-discovery-script";
  options.np = TotalSlots(placement);
  const std::vector<std::pair<const char*, std::string>> variables = {
      {kElasticDriverVariable, FormatReportAddress(driver)},
      {kElasticGenerationVariable, std::to_string(generation_)},
      {kElasticHostsVariable, FormatHostList(placement)},
      {kElasticSpillVariable, spill_dir_},
      {kElasticRestoreVariable, restore ? restore->path : ""},
      {kElasticHeartbeatVariable, FormatNumber(heartbeat_s_)},
  };
  for (const auto& [name, value] : variables) options.env_args.push_back(std::string(name) + "=" + value);
  return PlanLaunch(options, system_);
}

int ElasticJob::DryRun() {
  Result<std::vector<HostSlots>> found = discovery_.Run();
  if (!found.ok()) return 2;
  hosts_.Discovered(*found);
  const int needed = std::max(elastic_.min_np, options_.np.value_or(elastic_.min_np));
  std::optional<ElasticHosts::Commit> restore;
  std::vector<HostSlots> placement = hosts_.Place(Clock::now(), needed, &restore);
  if (placement.empty()) {
    Say("generation 0 would wait (up to " + Seconds(elastic_.timeout_s) + " s, --elastic-timeout) for " +
        std::to_string(needed) + " slots; discovery offers " + std::to_string(TotalSlots(*found)) + " (" +
        FormatHostList(*found) + ")");
    return 0;
  }
  Result<LaunchPlan> plan = PlanGeneration(placement, restore, ReportAddress{"TOKEN", 0, {"ADDRESS"}});
  if (!plan.ok()) {
    std::cerr << "accordrun: " << plan.status().message() << std::endl;
    return 2;
  }
  for (const std::string& note : plan->notes) std::cerr << "accordrun: note: " << note << std::endl;
  for (const std::string& line : plan->torch_lines) std::cerr << "accordrun: torch.distributed: " << line << std::endl;
  Say("generation 0 on " + FormatHostList(placement) + " (" + std::to_string(plan->np) +
      " ranks; from the initial state); reason: start");
  std::cout << JoinShellWords(plan->argv) << std::endl;
  return 0;
}

int ElasticJob::Run() {
  // The ranks may run anywhere discovery says: the port listens on every
  // interface.
  Result<std::unique_ptr<Job>> job = Job::Open(/*remote=*/true, options_.remote.network_interfaces, settings_);
  if (!job.ok()) {
    Say(job.status().message());
    return 1;
  }
  job_ = std::move(*job);
  if (settings_.verbose) Say("spill directory on every host: " + spill_dir_ + "/<host>");
  int needed = std::max(elastic_.min_np, options_.np.value_or(elastic_.min_np));
  std::optional<Clock::time_point> ended_at;  // when the last generation ended
  std::optional<Clock::time_point> first_sign;
  double first_sign_unix = 0;
  for (;; ++generation_) {
    std::optional<ElasticHosts::Commit> restore;
    int exit_status = 0;
    std::optional<std::vector<HostSlots>> placement = AwaitHosts(needed, &restore, &exit_status);
    if (!placement) return exit_status;
    const std::string token = RandomId();
    Result<LaunchPlan> plan =
        PlanGeneration(*placement, restore, ReportAddress{token, job_->port(), job_->addresses()});
    if (!plan.ok()) {
      Say("cannot plan generation " + std::to_string(generation_) + ": " + plan.status().message());
      return 2;
    }
    if (generation_ == 0) {
      for (const std::string& note : plan->notes) std::cerr << "accordrun: note: " << note << std::endl;
    }
    Say("generation " + std::to_string(generation_) + " on " + FormatHostList(*placement) + " (" +
        std::to_string(plan->np) + " ranks; " +
        (restore ? "rank 0 restores commit " + std::to_string(restore->number) + " from " + restore->host
                 : std::string("from the initial state")) +
        "); reason: " + reason_);
    if (settings_.verbose) Say("running " + JoinShellWords(plan->argv));
    ElasticGeneration::Settings generation_settings{generation_, token, *placement, heartbeat_s_, settings_.verbose};
    ElasticGeneration generation(std::move(generation_settings), hosts_, [this] { return discovery_.Poll(); });
    for (const HostSlots& host : *placement) used_hosts_.insert(host.name);
    const Clock::time_point launched = Clock::now();
    GenerationResult result = job_->RunGeneration(*plan, &generation);
    const Clock::time_point ended = Clock::now();
    if (ended_at && first_sign) {
      // The reset that led to this generation, phase by phase.
      char unix_time[32];
      std::snprintf(unix_time, sizeof(unix_time), "%.3f", first_sign_unix);
      std::string line = "reset " + std::to_string(resets_) + " timeline: first sign at " + unix_time +
                         " (unix time), the last generation ended " + Precise(Since(*first_sign, *ended_at)) +
                         " s after it, relaunched after " + Precise(Since(*ended_at, launched)) + " s";
      if (generation.all_connected())
        line += ", ranks connected after " + Precise(Since(launched, *generation.all_connected())) + " s";
      if (generation.all_ready()) {
        line += ", ready after " + Precise(Since(launched, *generation.all_ready())) + " s (restore+sync " +
                Precise(generation.restore_sync_s()) + " s)";
      }
      Say(line);
    }
    if (result.stop_signal != 0) return result.exit_status;
    if (result.exit_status == 0) {
      if (settings_.verbose || generation_ > 0) {
        Say("the training finished in generation " + std::to_string(generation_) + " after " + std::to_string(resets_) +
            " reset" + (resets_ == 1 ? "" : "s"));
      }
      return 0;
    }
    if (!Conclude(result, generation, &exit_status)) return exit_status;
    ended_at = ended;
    first_sign = generation.first_sign().value_or(ended);
    first_sign_unix = generation.first_sign() ? generation.first_sign_unix() : UnixNow();
    needed = elastic_.min_np;
  }
}

bool ElasticJob::Conclude(const GenerationResult& result, const ElasticGeneration& generation, int* exit_status) {
  const Clock::time_point now = Clock::now();
  *exit_status = result.exit_status;
  if (!generation.error_text().empty()) {
    Say("the job ends: the training function raised an error that is not a failure of a host: " +
        generation.error_text());
    return false;
  }
  // The hosts to blame: ranks killed by a signal on their own, lost with
  // their agent, silent, or never started.
  const std::vector<std::string>& host_of = generation.host_of_rank();
  std::map<std::string, std::string> blamed;  // host -> why
  std::string program_failure;
  auto blame = [&](int rank, const std::string& why) {
    if (rank < 0 || rank >= static_cast<int>(host_of.size())) return;
    blamed.emplace(host_of[static_cast<size_t>(rank)], "rank " + std::to_string(rank) + " " + why);
  };
  for (const RankMonitor::Outcome& outcome : result.failed_on_their_own) {
    if (outcome.lost) {
      blame(outcome.rank, "was lost (its rank agent ended without a report)");
    } else if (outcome.exit.how == RankExit::How::kSignaled) {
      blame(outcome.rank, DescribeExit(outcome.exit, settings_.program));
    } else if (outcome.exit.how == RankExit::How::kExited && outcome.exit.value != kResetExitStatus &&
               outcome.exit.value != kWatchdogExitStatus && program_failure.empty()) {
      program_failure = "rank " + std::to_string(outcome.rank) + " (on " + host_of[static_cast<size_t>(outcome.rank)] +
                        ") " + DescribeExit(outcome.exit, settings_.program);
    }
  }
  for (int rank : generation.SilentRanks()) blame(rank, "went silent (frozen, or cut off from this host)");
  for (int rank : result.not_started) blame(rank, "did not start within --start-timeout");

  if (blamed.empty() && !generation.hosts_reset()) {
    if (!program_failure.empty()) {
      Say("the job ends: " + program_failure + ", which is the program's failure, not its host's");
      return false;
    }
    if (generation.failure_text().empty()) {
      Say("the job ends: generation " + std::to_string(generation_) +
          " failed and no host was to blame (see the messages above)");
      return false;
    }
  }
  std::string reason;
  if (generation.hosts_reset() && blamed.empty()) reason = "the hosts changed";
  for (const auto& [host, why] : blamed) {
    std::optional<double> cooldown = hosts_.Blacklist(host, now);
    reason += (reason.empty() ? "" : "; ") + why + " on " + host;
    Say("blacklisting " + host +
        (cooldown ? " for " + Seconds(*cooldown) + " s" : std::string(" for the rest of the job")) + ": " + why);
  }
  if (reason.empty()) reason = "a collective failed: " + generation.failure_text();
  // A failure that blames nobody and makes no progress twice in a row would
  // loop: end instead.
  const bool progress = generation.newest_commit() > progress_at_last_reset_;
  if (blamed.empty() && !generation.hosts_reset() && !progress && fruitless_reset_) {
    Say("the job ends: two generations in a row failed without progress or a host to blame: " + reason);
    return false;
  }
  fruitless_reset_ = blamed.empty() && !generation.hosts_reset() && !progress;
  progress_at_last_reset_ = std::max(progress_at_last_reset_, generation.newest_commit());
  ++resets_;
  if (elastic_.reset_limit && resets_ > *elastic_.reset_limit) {
    Say("the job ends: it would reset " + std::to_string(resets_) + " times, more than --reset-limit " +
        std::to_string(*elastic_.reset_limit) + "; last reset: " + reason);
    *exit_status = result.exit_status != 0 ? result.exit_status : 1;
    return false;
  }
  reason_ = reason;
  return true;
}

}  // namespace

Result<WorkerLine> ParseWorkerLine(std::string_view line) {
  auto bad = [&](const char* why) {
    return Status::InvalidArgument("bad line on the driver's channel (" + std::string(why) + "): \"" +
                                   std::string(line.substr(0, 200)) + "\"");
  };
  std::vector<std::string_view> words = Words(line, 8);
  if (words.size() < 2) return bad("too short");
  WorkerLine out;
  const std::string_view kind = words[0];
  const bool first_is_rank = kind != "worker";
  if (first_is_rank && !ParseNumber(words[1], &out.rank)) return bad("no rank");
  if (kind == "worker") {
    if (words.size() != 4 || !ParseNumber(words[2], &out.rank)) return bad("expected: worker TOKEN RANK HOST");
    out.kind = WorkerLine::Kind::kWorker;
    out.token = words[1];
    out.host = words[3];
  } else if (kind == "beat") {
    out.kind = WorkerLine::Kind::kBeat;
  } else if (kind == "commit") {
    if (words.size() < 4 || !ParseNumber(words[2], &out.commit)) return bad("expected: commit RANK N PATH");
    out.kind = WorkerLine::Kind::kCommit;
    out.path = Rest(line, 3);
  } else if (kind == "ready") {
    if (words.size() != 4 || !ParseNumber(words[2], &out.restore_s) || !ParseNumber(words[3], &out.sync_s)) {
      return bad("expected: ready RANK RESTORE_S SYNC_S");
    }
    out.kind = WorkerLine::Kind::kReady;
  } else if (kind == "reset") {
    if (words.size() < 3 || (words[2] != "hosts" && words[2] != "failure"))
      return bad("expected: reset RANK hosts|failure");
    out.kind = WorkerLine::Kind::kReset;
    out.hosts = words[2] == "hosts";
    out.text = Rest(line, 3);
  } else if (kind == "error") {
    out.kind = WorkerLine::Kind::kError;
    out.text = Rest(line, 2);
  } else if (kind == "done") {
    out.kind = WorkerLine::Kind::kDone;
  } else {
    return bad("unknown kind");
  }
  return out;
}

std::string DefaultSpillRoot(const SystemInfo& system) {
  if (access("/dev/shm", W_OK | X_OK) == 0) return "/dev/shm";
  auto tmp = system.env.find("TMPDIR");
  return tmp != system.env.end() && !tmp->second.empty() ? tmp->second : "/tmp";
}

int RunElasticJob(const LaunchOptions& options, const SystemInfo& system, const RunSettings& run_settings) {
  RunSettings settings = run_settings;
  settings.explain_end = false;  // Conclude says what a generation's end means here
  ElasticJob job(options, system, settings);
  return options.dry_run ? job.DryRun() : job.Run();
}

}  // namespace accord::launcher
