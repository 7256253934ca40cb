// MpiEnvironment: MPI's process lifetime, as accord sees it.
//
// MPI can be initialised once per process, so this is the one process-wide
// object in accord: Acquire() adopts an MPI the user already initialised
// (recording the thread level it provides) or initialises it requesting
// MPI_THREAD_MULTIPLE. MPI_Finalize runs at process exit, and only if accord
// initialised MPI; accord::Shutdown() does not finalize, so Init() works again.
// Acquire() is called from accord::Init() (under its lock).
//
// After accord has ended a job with an error (the stall inspector stopped
// it, a coordinator failed), MarkJobFailed() makes the exit handler skip
// MPI_Finalize: a collective finalize waits for every rank, and a rank that
// never comes (asleep, deadlocked) would keep this process, and so the job,
// alive forever. The process exits with its own status instead, and the
// launcher, seeing a rank end without finalizing, stops the others.
#pragma once

#include "accord/status.h"

namespace accord {

class MpiEnvironment {
 public:
  static Result<const MpiEnvironment*> Acquire();
  int thread_level() const { return thread_level_; }
  bool thread_multiple() const;
  bool initialized_by_accord() const { return owned_; }
  // Process-wide. An Init() that every rank reached (its agreement checks
  // are collective) clears it: the ranks are all there again, so a normal
  // finalize at exit can no longer wait forever.
  static void MarkJobFailed();
  static void ClearJobFailed();

 private:
  int thread_level_ = 0;
  bool owned_ = false;
};

}  // namespace accord
