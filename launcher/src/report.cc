#include "report.h"

#include <cerrno>
#include <csignal>
#include <cstring>
#include <sstream>

namespace accord::launcher {
namespace {

const char* HowName(RankExit::How how) {
  switch (how) {
    case RankExit::How::kExited: return "exited";
    case RankExit::How::kSignaled: return "signaled";
    case RankExit::How::kNotStarted: return "not-started";
  }
  return "?";
}

}  // namespace

std::string EncodeHello(const std::string& token, int rank, long pid, const std::string& host) {
  std::ostringstream line;
  line << "hello " << token << " " << rank << " " << pid << " " << (host.empty() ? "?" : host) << "\n";
  return line.str();
}

std::string EncodeExit(int rank, const RankExit& exit) {
  std::ostringstream line;
  line << "exit " << rank << " " << HowName(exit.how) << " " << exit.value << " " << (exit.stopped ? 1 : 0) << "\n";
  return line.str();
}

Result<ReportMessage> DecodeReport(std::string_view line) {
  std::istringstream words{std::string(line)};
  std::string kind;
  ReportMessage message;
  auto bad = [&] { return Status::InvalidArgument("malformed report \"" + std::string(line) + "\""); };
  if (!(words >> kind)) return bad();
  if (kind == "hello") {
    message.kind = ReportMessage::Kind::kHello;
    if (!(words >> message.token >> message.rank >> message.pid >> message.host)) return bad();
  } else if (kind == "exit") {
    message.kind = ReportMessage::Kind::kExit;
    std::string how;
    int stopped = 0;
    if (!(words >> message.rank >> how >> message.exit.value >> stopped)) return bad();
    if (how == "exited") {
      message.exit.how = RankExit::How::kExited;
    } else if (how == "signaled") {
      message.exit.how = RankExit::How::kSignaled;
    } else if (how == "not-started") {
      message.exit.how = RankExit::How::kNotStarted;
    } else {
      return bad();
    }
    message.exit.stopped = stopped != 0;
  } else {
    return bad();
  }
  std::string extra;
  if (words >> extra || message.rank < 0) return bad();
  return message;
}

std::string FormatReportAddress(const ReportAddress& address) {
  std::string text = address.token + "@" + std::to_string(address.port) + "@";
  for (size_t i = 0; i < address.hosts.size(); ++i) {
    if (i > 0) text += ",";
    text += address.hosts[i];
  }
  return text;
}

Result<ReportAddress> ParseReportAddress(std::string_view text) {
  auto bad = [&] { return Status::InvalidArgument("malformed report address \"" + std::string(text) + "\""); };
  size_t first = text.find('@');
  size_t second = first == std::string_view::npos ? first : text.find('@', first + 1);
  if (second == std::string_view::npos) return bad();
  ReportAddress address;
  address.token = std::string(text.substr(0, first));
  std::string port(text.substr(first + 1, second - first - 1));
  if (address.token.empty() || port.empty() || port.find_first_not_of("0123456789") != std::string::npos ||
      port.size() > 5) {
    return bad();
  }
  address.port = std::stoi(port);
  if (address.port < 1 || address.port > 65535) return bad();
  std::string_view hosts = text.substr(second + 1);
  size_t start = 0;
  while (start < hosts.size()) {
    size_t comma = hosts.find(',', start);
    std::string_view host = hosts.substr(start, comma == std::string_view::npos ? comma : comma - start);
    if (!host.empty()) address.hosts.emplace_back(host);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  if (address.hosts.empty()) return bad();
  return address;
}

std::string DescribeExit(const RankExit& exit, const std::string& program) {
  std::ostringstream text;
  switch (exit.how) {
    case RankExit::How::kExited: text << "exited with status " << exit.value; break;
    case RankExit::How::kSignaled: {
      text << "was killed by signal " << exit.value;
      const char* name = SignalName(exit.value);
      const char* description = strsignal(exit.value);
      if (name != nullptr || description != nullptr) {
        text << " (";
        if (name != nullptr) text << name;
        if (name != nullptr && description != nullptr) text << ", ";
        if (description != nullptr) text << description;
        text << ")";
      }
      break;
    }
    case RankExit::How::kNotStarted:
      text << "could not start \"" << program << "\": " << std::strerror(exit.value);
      break;
  }
  return text.str();
}

const char* SignalName(int signal) {
  switch (signal) {
    case SIGHUP: return "SIGHUP";
    case SIGINT: return "SIGINT";
    case SIGQUIT: return "SIGQUIT";
    case SIGILL: return "SIGILL";
    case SIGTRAP: return "SIGTRAP";
    case SIGABRT: return "SIGABRT";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGKILL: return "SIGKILL";
    case SIGUSR1: return "SIGUSR1";
    case SIGSEGV: return "SIGSEGV";
    case SIGUSR2: return "SIGUSR2";
    case SIGPIPE: return "SIGPIPE";
    case SIGALRM: return "SIGALRM";
    case SIGTERM: return "SIGTERM";
    case SIGXCPU: return "SIGXCPU";
    case SIGXFSZ: return "SIGXFSZ";
    default: return nullptr;
  }
}

int ExitStatusFor(const RankExit& exit) {
  switch (exit.how) {
    case RankExit::How::kExited: return exit.value;
    case RankExit::How::kSignaled: return 128 + exit.value;
    case RankExit::How::kNotStarted: return exit.value == ENOENT ? 127 : 126;
  }
  return 1;
}

}  // namespace accord::launcher
