// How mpirun reaches the other hosts of a job: the values of
// --network-interfaces, --ssh-port, --ssh-identity-file and --rsh-agent,
// checked, and the Open MPI settings (MCA parameters) they become.
//
//   --network-interfaces eth0,10.0.0.0/24  -> btl_tcp_if_include and oob_tcp_if_include
//   --ssh-port 2222 --ssh-identity-file F  -> plm_rsh_args "-p 2222 -i F"
//   --rsh-agent PATH                       -> plm_rsh_agent PATH
//
// accordrun starts no remote process itself: mpirun's rsh launcher (ssh by
// default) starts Open MPI's daemon on each host, and the daemon starts the
// ranks. Pure functions; any thread may call them. Whether a file or program
// exists is checked by PlanLaunch, which knows the machine.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "accord/status.h"

namespace accord::launcher {

struct RemoteOptions {
  std::vector<std::string> network_interfaces;  // interface names or IPv4 subnets (CIDR)
  std::optional<int> ssh_port;
  std::string ssh_identity_file;
  std::string rsh_agent;

  bool empty() const {
    return network_interfaces.empty() && !ssh_port && ssh_identity_file.empty() && rsh_agent.empty();
  }
};

// The value of --network-interfaces: comma-separated interface names (eth0,
// ib0) or IPv4 subnets in CIDR notation (10.0.0.0/24), as Open MPI's
// *_tcp_if_include take them.
Result<std::vector<std::string>> ParseNetworkInterfaces(std::string_view text);

// The value of --ssh-port: a whole number from 1 to 65535.
Result<int> ParseSshPort(std::string_view text);

// A file name or program for Open MPI's plm_rsh_* parameters, which Open MPI
// splits at whitespace: refused when empty or when it holds whitespace.
// `flag` names the flag in the message.
Status CheckRshWord(std::string_view flag, std::string_view value);

// The mpirun arguments (--mca NAME VALUE ...) for `remote`. Refuses a
// parameter that the user's mpirun arguments set as well, and interfaces
// chosen alongside an *_tcp_if_exclude (Open MPI refuses both). ssh options
// already in OMPI_MCA_plm_rsh_args (`env`) are kept, before the new ones.
Result<std::vector<std::string>> RemoteMpirunArgs(const RemoteOptions& remote, const std::vector<std::string>& mpi_args,
                                                  const std::map<std::string, std::string>& env);

// Whether `args` (mpirun's) set Open MPI's parameter `name` with --mca,
// -mca, --gmca or -gmca.
bool SetsMcaParameter(const std::vector<std::string>& args, std::string_view name);

// Whether an interface named `name` with IPv4 address `address` (host byte
// order) is one that `selectors` (from ParseNetworkInterfaces) choose.
bool InterfaceSelected(const std::vector<std::string>& selectors, const std::string& name, uint32_t address);

}  // namespace accord::launcher
