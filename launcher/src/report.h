// What the rank agents tell accordrun: one TCP connection per rank, carrying
// text lines.
//
//   1. The agent connects to the address in ACCORDRUN_REPORT
//      ("<token>@<port>@<ip>[,<ip>...]") and sends
//        hello <token> <rank> <pid> <host>
//      before it starts the rank's program.
//   2. When the program ends it sends
//        exit <rank> <exited|signaled|not-started> <value> <stopped 0|1>
//      and closes the connection. `value` is the exit status, the signal
//      number, or the errno of the failed exec; `stopped` says the agent had
//      been told to stop (mpirun was ending the job) before the program ended,
//      so the ending says nothing about the program itself.
//
// accordrun counts hellos for --start-timeout and names the first rank whose
// program failed on its own. Pure functions; any thread may call them.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "accord/status.h"

namespace accord::launcher {

struct RankExit {
  enum class How { kExited, kSignaled, kNotStarted };
  How how = How::kExited;
  int value = 0;
  bool stopped = false;

  bool failed() const { return !(how == How::kExited && value == 0); }
};

struct ReportMessage {
  enum class Kind { kHello, kExit };
  Kind kind = Kind::kHello;
  int rank = -1;
  std::string token;  // kHello
  long pid = 0;       // kHello
  std::string host;   // kHello
  RankExit exit;      // kExit
};

std::string EncodeHello(const std::string& token, int rank, long pid, const std::string& host);
std::string EncodeExit(int rank, const RankExit& exit);
// Decodes one line (without its newline).
Result<ReportMessage> DecodeReport(std::string_view line);

struct ReportAddress {
  std::string token;
  int port = 0;
  std::vector<std::string> hosts;  // IPv4 addresses to try in order
};
std::string FormatReportAddress(const ReportAddress& address);
Result<ReportAddress> ParseReportAddress(std::string_view text);

// "exited with status 3", "was killed by signal 11 (SIGSEGV, Segmentation fault)",
// "could not start \"prog\": No such file or directory".
std::string DescribeExit(const RankExit& exit, const std::string& program);

// "SIGSEGV" for 11, ...; nullptr for a signal without a well-known name.
const char* SignalName(int signal);

// The exit status accordrun returns for a rank that ended this way: the
// status itself, 128 + the signal number, or 127 (program not found) / 126
// (found but could not run), as a shell does.
int ExitStatusFor(const RankExit& exit);

}  // namespace accord::launcher
