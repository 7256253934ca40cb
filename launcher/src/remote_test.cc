// Tests for the remote options: --network-interfaces, --ssh-port,
// --ssh-identity-file and --rsh-agent values, the mpirun arguments they
// become, and the settings they cannot be combined with.
#include "remote.h"

#include <arpa/inet.h>

#include <catch2/catch.hpp>

namespace accord::launcher {
namespace {

using Args = std::vector<std::string>;
using Env = std::map<std::string, std::string>;

uint32_t Address(const char* text) {
  in_addr address{};
  REQUIRE(inet_pton(AF_INET, text, &address) == 1);
  return ntohl(address.s_addr);
}

Args MustArgs(const RemoteOptions& remote, const Args& mpi_args = {}, const Env& env = {}) {
  Result<Args> args = RemoteMpirunArgs(remote, mpi_args, env);
  INFO("RemoteMpirunArgs failed: " << args.status());
  REQUIRE(args.ok());
  return *args;
}

std::string ArgsError(const RemoteOptions& remote, const Args& mpi_args, const Env& env = {}) {
  Result<Args> args = RemoteMpirunArgs(remote, mpi_args, env);
  REQUIRE_FALSE(args.ok());
  CHECK(args.status().code() == StatusCode::kInvalidArgument);
  return args.status().message();
}

std::string InterfacesError(const std::string& text) {
  Result<std::vector<std::string>> parsed = ParseNetworkInterfaces(text);
  INFO(text);
  REQUIRE_FALSE(parsed.ok());
  return parsed.status().message();
}

TEST_CASE("--network-interfaces takes interface names and IPv4 subnets") {
  CHECK(ParseNetworkInterfaces("eth0").value() == Args{"eth0"});
  CHECK(ParseNetworkInterfaces("eth0,ib0").value() == Args{"eth0", "ib0"});
  CHECK(ParseNetworkInterfaces("10.77.0.0/24").value() == Args{"10.77.0.0/24"});
  CHECK(ParseNetworkInterfaces("enp3s0f1,192.168.1.0/24,bond0.100").value() ==
        Args{"enp3s0f1", "192.168.1.0/24", "bond0.100"});
  CHECK(ParseNetworkInterfaces("0.0.0.0/0").value() == Args{"0.0.0.0/0"});
}

TEST_CASE("Malformed --network-interfaces are refused with what was expected") {
  CHECK(InterfacesError("eth0,,ib0") ==
        "--network-interfaces \"eth0,,ib0\": an entry is empty (expected interfaces or subnets between commas, "
        "e.g. eth0,10.0.0.0/24)");
  CHECK(InterfacesError("eth0,").find("an entry is empty") != std::string::npos);
  CHECK(InterfacesError("10.0.0.0/33") ==
        "--network-interfaces \"10.0.0.0/33\": \"10.0.0.0/33\" is not an IPv4 subnet in CIDR notation (e.g. "
        "10.0.0.0/24)");
  CHECK(InterfacesError("10.0.0/24").find("is not an IPv4 subnet") != std::string::npos);
  CHECK(InterfacesError("10.0.0.0/").find("is not an IPv4 subnet") != std::string::npos);
  CHECK(InterfacesError("10.0.0.0/x").find("is not an IPv4 subnet") != std::string::npos);
  CHECK(InterfacesError("10.1.2.3") ==
        "--network-interfaces \"10.1.2.3\": \"10.1.2.3\" is an address, not a subnet: add the prefix length, e.g. "
        "10.1.2.3/24 (or /32 for this address alone)");
  CHECK(InterfacesError("eth 0").find("is neither an interface name") != std::string::npos);
  CHECK(InterfacesError("averyveryverylongname0").find("up to 15") != std::string::npos);
  CHECK(InterfacesError("-eth0").find("is neither an interface name") != std::string::npos);
  CHECK(InterfacesError("eth0,eth0") == "--network-interfaces \"eth0,eth0\": \"eth0\" is listed twice");
}

TEST_CASE("--ssh-port is a port number") {
  CHECK(ParseSshPort("22").value() == 22);
  CHECK(ParseSshPort("65535").value() == 65535);
  for (const char* bad : {"", "0", "65536", "-1", "22a", "ssh", " 22", "2.5"}) {
    INFO(bad);
    Result<int> port = ParseSshPort(bad);
    REQUIRE_FALSE(port.ok());
    CHECK(port.status().message() ==
          "--ssh-port \"" + std::string(bad) + "\" is not valid: expected a port number from 1 to 65535");
  }
}

TEST_CASE("Paths for plm_rsh_* may not hold spaces") {
  CHECK(CheckRshWord("--ssh-identity-file", "/home/me/.ssh/id_ed25519").ok());
  CHECK(CheckRshWord("--rsh-agent", "").message() == "--rsh-agent is given an empty value");
  CHECK(CheckRshWord("--ssh-identity-file", "/home/me/my keys/id").message() ==
        "--ssh-identity-file \"/home/me/my keys/id\": Open MPI splits this setting at spaces, so the path cannot "
        "hold one (use a link or a name without spaces)");
}

TEST_CASE("The remote options become Open MPI's MCA parameters") {
  CHECK(MustArgs({}).empty());

  RemoteOptions all;
  all.rsh_agent = "/opt/bed/netns-rsh";
  all.ssh_port = 2222;
  all.ssh_identity_file = "/home/me/.ssh/cluster";
  all.network_interfaces = {"eth0", "10.0.0.0/24"};
  CHECK(MustArgs(all) == Args{"--mca", "plm_rsh_agent", "/opt/bed/netns-rsh", "--mca", "plm_rsh_args",
                              "-p 2222 -i /home/me/.ssh/cluster", "--mca", "btl_tcp_if_include", "eth0,10.0.0.0/24",
                              "--mca", "oob_tcp_if_include", "eth0,10.0.0.0/24"});

  RemoteOptions port_only;
  port_only.ssh_port = 22022;
  CHECK(MustArgs(port_only) == Args{"--mca", "plm_rsh_args", "-p 22022"});
  // ssh options already in Open MPI's environment are kept.
  CHECK(MustArgs(port_only, {}, {{"OMPI_MCA_plm_rsh_args", "-o StrictHostKeyChecking=no"}}) ==
        Args{"--mca", "plm_rsh_args", "-o StrictHostKeyChecking=no -p 22022"});
}

TEST_CASE("A parameter set both by a flag and by --mpi-args is refused") {
  RemoteOptions agent;
  agent.rsh_agent = "rsh";
  CHECK(ArgsError(agent, {"--mca", "plm_rsh_agent", "ssh"}) ==
        "--rsh-agent and --mpi-args both set plm_rsh_agent; give one of them");

  RemoteOptions key;
  key.ssh_identity_file = "/k";
  CHECK(ArgsError(key, {"-mca", "plm_rsh_args", "-q"}) ==
        "--ssh-identity-file and --mpi-args both set plm_rsh_args; give one of them");
  RemoteOptions port;
  port.ssh_port = 2;
  CHECK(ArgsError(port, {"--gmca", "plm_rsh_args", "-q"}).find("--ssh-port and --mpi-args") == 0);

  RemoteOptions interfaces;
  interfaces.network_interfaces = {"eth0"};
  CHECK(ArgsError(interfaces, {"--mca", "oob_tcp_if_include", "eth1"}) ==
        "--network-interfaces and --mpi-args both set oob_tcp_if_include; give one of them");
  CHECK(ArgsError(interfaces, {"--mca", "btl_tcp_if_exclude", "lo,docker0"}) ==
        "--network-interfaces cannot be combined with btl_tcp_if_exclude in --mpi-args (Open MPI takes an include "
        "list or an exclude list, not both)");
  CHECK(ArgsError(interfaces, {}, {{"OMPI_MCA_oob_tcp_if_exclude", "lo"}}) ==
        "--network-interfaces cannot be combined with OMPI_MCA_oob_tcp_if_exclude in the environment (Open MPI "
        "takes an include list or an exclude list, not both); unset it");
  // Other parameters do not matter, and an include list in the environment
  // is overridden by the command line.
  CHECK(MustArgs(interfaces, {"--mca", "btl", "self,tcp"}, {{"OMPI_MCA_btl_tcp_if_include", "eth1"}}).size() == 6);
}

TEST_CASE("SetsMcaParameter reads every spelling of --mca") {
  CHECK(SetsMcaParameter({"--mca", "x", "1"}, "x"));
  CHECK(SetsMcaParameter({"-np", "2", "-mca", "x", "1"}, "x"));
  CHECK(SetsMcaParameter({"-gmca", "x", "1"}, "x"));
  CHECK_FALSE(SetsMcaParameter({"--mca", "xy", "1"}, "x"));
  CHECK_FALSE(SetsMcaParameter({"-x", "x"}, "x"));
  CHECK_FALSE(SetsMcaParameter({"--mca"}, "x"));
}

TEST_CASE("InterfaceSelected matches names and subnets") {
  std::vector<std::string> selectors = {"eth1", "10.77.0.0/24"};
  CHECK(InterfaceSelected(selectors, "eth1", Address("192.168.0.5")));
  CHECK(InterfaceSelected(selectors, "accbr0", Address("10.77.0.254")));
  CHECK_FALSE(InterfaceSelected(selectors, "eth0", Address("10.77.1.1")));
  CHECK_FALSE(InterfaceSelected({}, "eth0", Address("10.0.0.1")));
  CHECK(InterfaceSelected({"0.0.0.0/0"}, "any", Address("172.16.3.4")));
  CHECK(InterfaceSelected({"10.0.0.7/32"}, "x", Address("10.0.0.7")));
  CHECK_FALSE(InterfaceSelected({"10.0.0.7/32"}, "x", Address("10.0.0.8")));
}

}  // namespace
}  // namespace accord::launcher
