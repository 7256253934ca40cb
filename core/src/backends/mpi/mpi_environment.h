// MpiEnvironment: MPI's process lifetime, as accord sees it.
//
// MPI can be initialised once per process, so this is the one process-wide
// object in accord: Acquire() adopts an MPI the user already initialised
// (recording the thread level it provides) or initialises it requesting
// MPI_THREAD_MULTIPLE. MPI_Finalize runs at process exit, and only if accord
// initialised MPI; accord::Shutdown() does not finalize, so Init() works again.
// Acquire() is called from accord::Init() (under its lock).
#pragma once

#include "accord/status.h"

namespace accord {

class MpiEnvironment {
 public:
  static Result<const MpiEnvironment*> Acquire();
  int thread_level() const { return thread_level_; }
  bool thread_multiple() const;
  bool initialized_by_accord() const { return owned_; }

 private:
  int thread_level_ = 0;
  bool owned_ = false;
};

}  // namespace accord
