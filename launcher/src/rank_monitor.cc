#include "rank_monitor.h"

#include <sys/wait.h>

#include <cstdio>
#include <sstream>
#include <utility>

namespace accord::launcher {
namespace {

int WaitStatusToExit(int status) { return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status); }

}  // namespace

std::string DescribeMpirunEnd(int wait_status) {
  return WIFSIGNALED(wait_status) ? "mpirun was killed by signal " + std::to_string(WTERMSIG(wait_status))
                                  : "mpirun exited with status " + std::to_string(WEXITSTATUS(wait_status));
}

RankMonitor::RankMonitor(int np, std::string token, std::string program, bool verbose, Say say)
    : np_(np), token_(std::move(token)), program_(std::move(program)), verbose_(verbose), say_(std::move(say)) {}

bool RankMonitor::OnLine(Peer& peer, const std::string& line) {
  Result<ReportMessage> message = DecodeReport(line);
  if (!message.ok()) return false;
  if (message->kind == ReportMessage::Kind::kHello) {
    if (message->token != token_ || message->rank >= np_) return false;
    OnHello(peer, *message);
    return true;
  }
  if (peer.rank < 0 || message->rank != peer.rank) return false;  // exit before hello
  peer.exited = true;
  ended_.insert(peer.rank);
  const RankExit& exit = message->exit;
  if (exit.failed() && !exit.stopped) {
    if (!first_failure_) first_failure_ = Failure{message->rank, peer.host, exit, ++events_};
    failed_on_their_own_.push_back(Outcome{message->rank, peer.host, exit, false});
  }
  if (exit.failed() && !any_failure_) any_failure_ = Failure{message->rank, peer.host, exit, ++events_};
  return true;
}

void RankMonitor::OnHello(Peer& peer, const ReportMessage& hello) {
  peer.rank = hello.rank;
  peer.host = hello.host;
  if (!started_.insert(hello.rank).second || !verbose_) return;
  say_("rank " + std::to_string(hello.rank) + " started on " + hello.host + " (pid " + std::to_string(hello.pid) + ")");
  if (AllStarted()) {
    char elapsed[32];
    std::snprintf(elapsed, sizeof(elapsed), "%.1f", std::chrono::duration<double>(Clock::now() - start_).count());
    say_("all " + std::to_string(np_) + " ranks started in " + elapsed + " s");
  }
}

void RankMonitor::OnClosed(const Peer& peer) {
  if (peer.rank < 0 || peer.exited) return;
  ended_.insert(peer.rank);
  if (!first_lost_) first_lost_ = Failure{peer.rank, peer.host, RankExit{}, ++events_};
  failed_on_their_own_.push_back(Outcome{peer.rank, peer.host, RankExit{}, true});
}

std::vector<int> RankMonitor::MissingRankList() const {
  std::vector<int> missing;
  for (int rank = 0; rank < np_; ++rank) {
    if (started_.count(rank) == 0) missing.push_back(rank);
  }
  return missing;
}

std::string RankMonitor::MissingRanks() const {
  std::ostringstream missing;
  int shown = 0;
  for (int rank = 0; rank < np_; ++rank) {
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

std::string RankMonitor::FirstFailed() const {
  const std::optional<Failure>& f = first_failure_ ? first_failure_ : first_lost_;
  return f ? "rank " + std::to_string(f->rank) + " (on " + f->host + ")" : std::string();
}

int RankMonitor::Conclude(int mpirun_wait, bool start_timed_out, int stop_signal, bool explain) const {
  const Say say = explain ? say_ : Say([](const std::string&) {});
  if (start_timed_out) return 1;
  const int mpirun_status = WaitStatusToExit(mpirun_wait);
  if (stop_signal != 0 && !first_failure_) {
    const char* name = SignalName(stop_signal);
    say(std::string("the job was stopped: accordrun received ") +
        (name != nullptr ? name : "signal " + std::to_string(stop_signal)) + " (" + DescribeMpirunEnd(mpirun_wait) +
        ")");
    return 128 + stop_signal;
  }
  if (first_lost_ && mpirun_status != 0 && (!first_failure_ || first_lost_->order < first_failure_->order)) {
    say("rank " + std::to_string(first_lost_->rank) + " (on " + first_lost_->host +
        ") ended without reporting how: its rank agent was killed (e.g. by SIGKILL or the out-of-memory "
        "killer) or lost its connection to accordrun; " +
        DescribeMpirunEnd(mpirun_wait));
    return mpirun_status;
  }
  if (first_failure_) {
    const Failure& failure = *first_failure_;
    std::string text =
        "rank " + std::to_string(failure.rank) + " (on " + failure.host + ") " + DescribeExit(failure.exit, program_);
    if (np_ > 1) text += "; it was the first rank to fail, and the other ranks were stopped";
    say(text);
    return ExitStatusFor(failure.exit);
  }
  if (mpirun_status != 0) {
    say(DescribeMpirunFailure(mpirun_wait));
    return mpirun_status;
  }
  if (verbose_) say("all " + std::to_string(np_) + " ranks exited with status 0");
  return 0;
}

std::string RankMonitor::DescribeMpirunFailure(int mpirun_wait) const {
  std::string text = DescribeMpirunEnd(mpirun_wait);
  if (any_failure_) {
    text += "; no rank failed on its own before the ranks were told to stop (the first to stop: rank " +
            std::to_string(any_failure_->rank) + " on " + any_failure_->host + "); see mpirun's messages above";
  } else if (StartedCount() < np_) {
    text += " before " + std::string(StartedCount() == 0 ? "any rank" : "every rank") +
            " started; see mpirun's messages above";
  }
  return text;
}

}  // namespace accord::launcher
