// The rank agent: mpirun starts `accordrun --rank-agent PROGRAM ARGS...` as
// each rank, and the agent runs PROGRAM as its child.
//
// The agent tells accordrun (see report.h) that the rank started and how its
// program ended, forwards the signals mpirun sends it (SIGTERM, SIGINT, ...)
// to the program, takes the program down with it if it is killed itself, and
// ends the way the program ended (same exit status, or the same signal), so
// that mpirun sees what it would have seen without the agent. Without
// ACCORDRUN_REPORT in the environment it only runs the program. With
// ACCORDRUN_BIND=core it first binds itself, and so the program, to a core
// of its host (binding.h). It sets torchrun's per-rank variables (RANK,
// LOCAL_RANK, GROUP_RANK, ...: TorchRankVariables in plan.h) that the user
// has not set.
//
// Runs on the main thread of its own process.
#pragma once

#include <string>
#include <vector>

namespace accord::launcher {

// Runs `command` and returns the exit status for the agent's process (or
// re-raises the signal that killed the program).
int RunRankAgent(const std::vector<std::string>& command);

}  // namespace accord::launcher
