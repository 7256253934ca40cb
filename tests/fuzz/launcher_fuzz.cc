// Fuzzes accordrun's parsers of what users type and what rank agents send
// (launcher/src): the first input byte picks the parser, the rest is its
// text.
//   0: -H                     ParseHostList
//   1: a hostfile             ParseHostfile
//   2: --mpi-args             SplitShellWords
//   3: a rank agent's report  DecodeReport (one line from a TCP connection)
//   4: ACCORDRUN_REPORT       ParseReportAddress
//   5: --network-interfaces, --ssh-port, --ssh-identity-file
//   6: the whole command line ParseCommandLine: arguments separated by NUL;
//      after the first two NULs in a row, the contents of every hostfile
// Properties: a value or an InvalidArgument Status, never a crash or an
// exception; what is accepted is well formed (host names, slot ranges) and
// survives a round trip through the matching formatter (FormatHostList,
// JoinShellWords, EncodeHello / EncodeExit, FormatReportAddress).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "cli.h"
#include "fuzz_check.h"
#include "hosts.h"
#include "remote.h"
#include "report.h"
#include "shell_words.h"

namespace accord::launcher {
namespace {

void CheckError(const Status& status) {
  FUZZ_CHECK(status.code() == StatusCode::kInvalidArgument, "a parse error is InvalidArgument");
  FUZZ_CHECK(!status.message().empty(), "a parse error says why");
}

bool SameHosts(const std::vector<HostSlots>& a, const std::vector<HostSlots>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].name != b[i].name || a[i].slots != b[i].slots) return false;
  }
  return true;
}

void CheckHosts(const Result<std::vector<HostSlots>>& parsed) {
  if (!parsed.ok()) return CheckError(parsed.status());
  const std::vector<HostSlots>& hosts = parsed.value();
  FUZZ_CHECK(!hosts.empty(), "hosts were found");
  for (const HostSlots& host : hosts) {
    FUZZ_CHECK(!host.name.empty(), "a host has a name");
    FUZZ_CHECK(host.slots >= 1 && host.slots <= kMaxSlotsPerHost, "slots in range");
  }
  auto again = ParseHostList(FormatHostList(hosts));
  FUZZ_CHECK(again.ok(), "FormatHostList gives a valid -H");
  FUZZ_CHECK(SameHosts(*again, hosts), "hosts survive FormatHostList and ParseHostList");
  FUZZ_CHECK(TotalSlots(hosts) >= static_cast<int>(hosts.size()), "every host has a slot");
}

void MpiArgs(std::string_view text) {
  auto words = SplitShellWords(text);
  if (!words.ok()) return CheckError(words.status());
  auto again = SplitShellWords(JoinShellWords(*words));
  FUZZ_CHECK(again.ok(), "JoinShellWords gives text that splits");
  FUZZ_CHECK(*again == *words, "words survive JoinShellWords and SplitShellWords");
}

void ReportLine(std::string_view line) {
  auto message = DecodeReport(line);
  if (!message.ok()) return CheckError(message.status());
  FUZZ_CHECK(message->rank >= 0, "a report's rank is not negative");
  std::string encoded = message->kind == ReportMessage::Kind::kHello
                            ? EncodeHello(message->token, message->rank, message->pid, message->host)
                            : EncodeExit(message->rank, message->exit);
  FUZZ_CHECK(!encoded.empty() && encoded.back() == '\n', "a report is one line");
  encoded.pop_back();
  auto again = DecodeReport(encoded);
  FUZZ_CHECK(again.ok(), "an encoded report decodes");
  FUZZ_CHECK(again->kind == message->kind && again->rank == message->rank && again->token == message->token &&
                 again->pid == message->pid && again->host == message->host && again->exit.how == message->exit.how &&
                 again->exit.value == message->exit.value && again->exit.stopped == message->exit.stopped,
             "a report survives EncodeHello/EncodeExit and DecodeReport");
  (void)DescribeExit(message->exit, "program");
  (void)ExitStatusFor(message->exit);
}

void ReportAddressText(std::string_view text) {
  auto address = ParseReportAddress(text);
  if (!address.ok()) return CheckError(address.status());
  FUZZ_CHECK(address->port >= 1 && address->port <= 65535, "port in range");
  FUZZ_CHECK(!address->hosts.empty(), "an address has hosts");
  auto again = ParseReportAddress(FormatReportAddress(*address));
  FUZZ_CHECK(again.ok(), "a formatted report address parses");
  FUZZ_CHECK(again->token == address->token && again->port == address->port && again->hosts == address->hosts,
             "a report address survives FormatReportAddress and ParseReportAddress");
}

void Remote(std::string_view text) {
  auto interfaces = ParseNetworkInterfaces(text);
  if (interfaces.ok()) {
    FUZZ_CHECK(!interfaces->empty(), "interfaces were found");
  } else {
    CheckError(interfaces.status());
  }
  auto port = ParseSshPort(text);
  if (port.ok()) {
    FUZZ_CHECK(*port >= 1 && *port <= 65535, "port in range");
  } else {
    CheckError(port.status());
  }
  Status word = CheckRshWord("--rsh-agent", text);
  if (!word.ok()) CheckError(word);
}

void CommandLineArgs(std::string_view text) {
  const size_t files_at = text.find(std::string_view("\0\0", 2));
  const std::string files = files_at == std::string_view::npos ? std::string() : std::string(text.substr(files_at + 2));
  text = text.substr(0, files_at);
  std::vector<std::string> args;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\0', start);
    if (end == std::string_view::npos) end = text.size();
    args.emplace_back(text.substr(start, end - start));
    start = end + 1;
  }
  auto read_file = [&](const std::string& path) -> Result<std::string> {
    if (path == "missing") return Status::InvalidArgument("No such file or directory");
    return files;
  };
  auto parsed = ParseCommandLine(args, read_file);
  if (!parsed.ok()) return CheckError(parsed.status());
  if (parsed->action != Action::kRun) return;
  const LaunchOptions& options = parsed->options;
  FUZZ_CHECK(!options.command.empty(), "a run has a program");
  // Elastic mode may have neither: the discovery script names the hosts as
  // the job runs, and --min-np (default -np, else 1) bounds the count.
  FUZZ_CHECK(options.np || !options.hosts.empty() || options.elastic, "a run knows how many processes");
  if (options.elastic) {
    const ElasticOptions& e = *options.elastic;
    FUZZ_CHECK(e.min_np >= 1, "--min-np is positive");
    if (e.max_np) FUZZ_CHECK(*e.max_np >= e.min_np, "--max-np is not below --min-np");
    if (options.np) {
      FUZZ_CHECK(*options.np >= e.min_np && (!e.max_np || *options.np <= *e.max_np),
                 "-np lies in --min-np .. --max-np");
    }
  }
  if (options.np) {
    FUZZ_CHECK(*options.np >= 1, "-np is positive");
    if (!options.hosts.empty()) FUZZ_CHECK(*options.np <= TotalSlots(options.hosts), "-np fits the slots");
  }
}

}  // namespace
}  // namespace accord::launcher

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace accord::launcher;
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 7) {
    case 0: CheckHosts(ParseHostList(text)); break;
    case 1: CheckHosts(ParseHostfile(text, "hostfile")); break;
    case 2: MpiArgs(text); break;
    case 3: ReportLine(text); break;
    case 4: ReportAddressText(text); break;
    case 5: Remote(text); break;
    default: CommandLineArgs(text); break;
  }
  return 0;
}
