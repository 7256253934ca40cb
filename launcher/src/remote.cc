#include "remote.h"

#include <arpa/inet.h>

#include <cctype>
#include <charconv>
#include <set>

namespace accord::launcher {
namespace {

// Linux interface names are at most 15 characters (IFNAMSIZ - 1).
constexpr size_t kMaxInterfaceName = 15;

// The parameters the interfaces become, and the ones Open MPI refuses beside them.
constexpr const char* kIncludeParameters[] = {"btl_tcp_if_include", "oob_tcp_if_include"};
constexpr const char* kExcludeParameters[] = {"btl_tcp_if_exclude", "oob_tcp_if_exclude"};

bool HasWhitespace(std::string_view text) {
  for (char c : text) {
    if (std::isspace(static_cast<unsigned char>(c))) return true;
  }
  return false;
}

bool ParseIpv4(std::string_view text, uint32_t* address) {
  in_addr parsed{};
  if (inet_pton(AF_INET, std::string(text).c_str(), &parsed) != 1) return false;
  *address = ntohl(parsed.s_addr);
  return true;
}

// "10.0.0.0/24" -> network and prefix length; false if it is not one.
bool ParseSubnet(std::string_view text, uint32_t* network, int* prefix) {
  size_t slash = text.find('/');
  if (slash == std::string_view::npos) return false;
  std::string_view bits = text.substr(slash + 1);
  if (bits.empty() || bits.size() > 2) return false;
  auto [end, error] = std::from_chars(bits.data(), bits.data() + bits.size(), *prefix);
  if (error != std::errc() || end != bits.data() + bits.size() || *prefix < 0 || *prefix > 32) return false;
  return ParseIpv4(text.substr(0, slash), network);
}

uint32_t Mask(int prefix) { return prefix == 0 ? 0 : ~uint32_t{0} << (32 - prefix); }

bool LooksLikeAddress(std::string_view text) {
  return !text.empty() && text.find_first_not_of("0123456789.") == std::string_view::npos;
}

bool ValidInterfaceName(std::string_view name) {
  if (name.empty() || name.size() > kMaxInterfaceName || name.front() == '-') return false;
  for (char c : name) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.' || c == ':')) return false;
  }
  return true;
}

Status CheckInterface(std::string_view text, std::string_view entry) {
  std::string where = "--network-interfaces \"" + std::string(text) + "\": \"" + std::string(entry) + "\" ";
  uint32_t network = 0;
  int prefix = 0;
  if (entry.find('/') != std::string_view::npos) {
    if (!ParseSubnet(entry, &network, &prefix)) {
      return Status::InvalidArgument(where + "is not an IPv4 subnet in CIDR notation (e.g. 10.0.0.0/24)");
    }
    return Status::OK();
  }
  if (LooksLikeAddress(entry)) {
    return Status::InvalidArgument(where + "is an address, not a subnet: add the prefix length, e.g. " +
                                   std::string(entry) + "/24 (or /32 for this address alone)");
  }
  if (!ValidInterfaceName(entry)) {
    return Status::InvalidArgument(where +
                                   "is neither an interface name (up to 15 letters, digits, '_', '-', '.', ':') "
                                   "nor an IPv4 subnet such as 10.0.0.0/24");
  }
  return Status::OK();
}

bool IsMcaOption(const std::string& arg) {
  return arg == "--mca" || arg == "-mca" || arg == "--gmca" || arg == "-gmca";
}

// The first parameter of `names` that `args` set, or empty.
template <size_t N>
std::string FirstSet(const std::vector<std::string>& args, const char* const (&names)[N]) {
  for (const char* name : names) {
    if (SetsMcaParameter(args, name)) return name;
  }
  return "";
}

std::string Join(const std::vector<std::string>& words, const char* separator) {
  std::string text;
  for (const std::string& word : words) text += (text.empty() ? "" : separator) + word;
  return text;
}

}  // namespace

bool SetsMcaParameter(const std::vector<std::string>& args, std::string_view name) {
  for (size_t i = 0; i + 1 < args.size(); ++i) {
    if (IsMcaOption(args[i]) && args[i + 1] == name) return true;
  }
  return false;
}

Result<std::vector<std::string>> ParseNetworkInterfaces(std::string_view text) {
  std::vector<std::string> interfaces;
  std::set<std::string> seen;
  size_t start = 0;
  for (;;) {
    size_t comma = text.find(',', start);
    std::string_view entry = text.substr(start, comma == std::string_view::npos ? comma : comma - start);
    if (entry.empty()) {
      return Status::InvalidArgument("--network-interfaces \"" + std::string(text) +
                                     "\": an entry is empty (expected interfaces or subnets between commas, "
                                     "e.g. eth0,10.0.0.0/24)");
    }
    ACCORD_RETURN_IF_ERROR(CheckInterface(text, entry));
    if (!seen.insert(std::string(entry)).second) {
      return Status::InvalidArgument("--network-interfaces \"" + std::string(text) + "\": \"" + std::string(entry) +
                                     "\" is listed twice");
    }
    interfaces.emplace_back(entry);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return interfaces;
}

Result<int> ParseSshPort(std::string_view text) {
  int port = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), port);
  if (text.empty() || error != std::errc() || end != text.data() + text.size() || port < 1 || port > 65535) {
    return Status::InvalidArgument("--ssh-port \"" + std::string(text) +
                                   "\" is not valid: expected a port number from 1 to 65535");
  }
  return port;
}

Status CheckRshWord(std::string_view flag, std::string_view value) {
  if (value.empty()) return Status::InvalidArgument(std::string(flag) + " is given an empty value");
  if (HasWhitespace(value)) {
    return Status::InvalidArgument(std::string(flag) + " \"" + std::string(value) +
                                   "\": Open MPI splits this setting at spaces, so the path cannot hold one "
                                   "(use a link or a name without spaces)");
  }
  return Status::OK();
}

Result<std::vector<std::string>> RemoteMpirunArgs(const RemoteOptions& remote, const std::vector<std::string>& mpi_args,
                                                  const std::map<std::string, std::string>& env) {
  std::vector<std::string> args;
  auto both = [](const std::string& flag, const std::string& parameter) {
    return Status::InvalidArgument(flag + " and --mpi-args both set " + parameter + "; give one of them");
  };
  if (!remote.rsh_agent.empty()) {
    if (SetsMcaParameter(mpi_args, "plm_rsh_agent")) return both("--rsh-agent", "plm_rsh_agent");
    args.insert(args.end(), {"--mca", "plm_rsh_agent", remote.rsh_agent});
  }
  if (remote.ssh_port || !remote.ssh_identity_file.empty()) {
    std::string flag = remote.ssh_port ? "--ssh-port" : "--ssh-identity-file";
    if (SetsMcaParameter(mpi_args, "plm_rsh_args")) return both(flag, "plm_rsh_args");
    std::vector<std::string> ssh_args;
    auto inherited = env.find("OMPI_MCA_plm_rsh_args");
    if (inherited != env.end() && !inherited->second.empty()) ssh_args.push_back(inherited->second);
    if (remote.ssh_port) ssh_args.push_back("-p " + std::to_string(*remote.ssh_port));
    if (!remote.ssh_identity_file.empty()) ssh_args.push_back("-i " + remote.ssh_identity_file);
    args.insert(args.end(), {"--mca", "plm_rsh_args", Join(ssh_args, " ")});
  }
  if (!remote.network_interfaces.empty()) {
    const char* const why = " (Open MPI takes an include list or an exclude list, not both)";
    std::string given = FirstSet(mpi_args, kIncludeParameters);
    if (!given.empty()) return both("--network-interfaces", given);
    std::string excluded = FirstSet(mpi_args, kExcludeParameters);
    if (!excluded.empty()) {
      return Status::InvalidArgument("--network-interfaces cannot be combined with " + excluded + " in --mpi-args" +
                                     why);
    }
    for (const char* parameter : kExcludeParameters) {
      std::string variable = std::string("OMPI_MCA_") + parameter;
      if (env.count(variable) != 0) {
        return Status::InvalidArgument("--network-interfaces cannot be combined with " + variable +
                                       " in the environment" + why + "; unset it");
      }
    }
    std::string list = Join(remote.network_interfaces, ",");
    for (const char* parameter : kIncludeParameters) args.insert(args.end(), {"--mca", parameter, list});
  }
  return args;
}

bool InterfaceSelected(const std::vector<std::string>& selectors, const std::string& name, uint32_t address) {
  for (const std::string& selector : selectors) {
    uint32_t network = 0;
    int prefix = 0;
    if (ParseSubnet(selector, &network, &prefix)) {
      if ((address & Mask(prefix)) == (network & Mask(prefix))) return true;
    } else if (selector == name) {
      return true;
    }
  }
  return false;
}

}  // namespace accord::launcher
