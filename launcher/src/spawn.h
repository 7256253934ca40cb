// Starting a program from the launcher (accordrun starting mpirun, the rank
// agent starting the user's program), with a reliable report of whether the
// exec itself worked.
//
// Call from the process's main thread; the child runs only async-signal-safe
// code between fork and exec, apart from building argv.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <string>
#include <vector>

namespace accord::launcher {

struct SpawnOptions {
  bool search_path = false;              // execvp (PATH lookup) instead of execv
  std::vector<int> reset_signals;        // set back to their default action in the child
  const sigset_t* child_mask = nullptr;  // the child's signal mask (null: inherited)
  int parent_death_signal = 0;           // sent to the child when this process dies (0: none)
};

// A started child: its pid, and the read end of a close-on-exec pipe that
// tells whether the exec worked (AwaitExec).
struct Spawned {
  pid_t pid = -1;
  int exec_report = -1;
};

// Forks and execs `argv` with `options`. A child whose parent is already
// gone when it starts exits at once (status 1). Returns pid -1, with
// `*error` saying which call failed, if the pipe or the fork failed.
Spawned Spawn(const std::vector<std::string>& argv, const SpawnOptions& options, std::string* error);

// Blocks until the child has exec'd (returns 0) or failed to (returns the
// exec's errno; the child has then exited with status 127). Closes the pipe.
int AwaitExec(Spawned* spawned);

}  // namespace accord::launcher
