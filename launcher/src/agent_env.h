// The variables through which accordrun talks to its rank agents
// (accordrun --rank-agent, rank_agent.h). The plan puts them on mpirun's
// command line (plan.h), the runner sets the report address in mpirun's
// environment (runner.h), and each agent reads them, acts on them and
// removes them before the rank's program starts. Constants only; any thread
// may read them.
#pragma once

namespace accord::launcher {

// Where the agent reports to: "<token>@<port>@<ip>[,<ip>...]" (report.h).
// Set in mpirun's environment by the runner for each generation of ranks,
// and forwarded by name (-x) to other hosts.
inline constexpr const char* kReportVariable = "ACCORDRUN_REPORT";
// Set for every rank: "share" when each agent is to bind its rank to its
// share of its host's cores, "user" when the user's mpirun arguments bind
// (the agent then only chooses OMP_NUM_THREADS); binding.h.
inline constexpr const char* kBindVariable = "ACCORDRUN_BIND";
// Set to 1 for every rank by --report-bindings: each agent says how its rank
// is bound before the program starts.
inline constexpr const char* kReportBindingsVariable = "ACCORDRUN_REPORT_BINDINGS";
// Set for every rank of a job on several hosts: how many ranks each host
// has, in rank order ("4,2"), from which each agent finds its host's index
// (GROUP_RANK, TorchRankVariables in plan.h).
inline constexpr const char* kHostRanksVariable = "ACCORDRUN_HOST_RANKS";

}  // namespace accord::launcher
