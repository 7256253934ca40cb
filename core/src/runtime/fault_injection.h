// Fault injection for tests: makes this process's coordinator fail at a
// chosen point, as a broken invariant or a failed MPI call would.
//
// Not part of the public API (no header under core/include declares it):
// tests that include core/src call accord::testing::InjectCoordinatorFault,
// and the coordinator asks TakeInjectedFault at each point. When nothing is
// armed a check costs one relaxed atomic load. Any thread may arm a fault;
// only the coordinator thread takes it.
#pragma once

#include <string>

#include "accord/status.h"

namespace accord {
namespace testing {

// Where the coordinator fails.
enum class FaultPoint : int {
  kNone = 0,
  // At the start of an iteration, before the round of the global set: no
  // collective is in flight anywhere, so the failure reaches every rank.
  kIteration = 1,
  // Before the round of a process set other than the global one (after the
  // iteration's global round and its collectives).
  kSetRound = 2,
  // Just before this rank enters a data collective that the round agreed:
  // the other ranks enter it and wait there for this one (the last-resort
  // path, see docs/troubleshooting.md, "A rank's coordinator failed").
  kCollective = 3,
  // Inside a data collective the round agreed, under the collective
  // watchdog, just before the MPI call: the whole process stops itself with
  // SIGSTOP, as a peer that froze mid-collective. The other ranks wait in
  // the collective until their watchdog ends the job (the message of the
  // injected fault is not used).
  kFreezeInCollective = 4,
};

// Arms one fault: the next time this process's coordinator reaches `point`
// it fails with Status::Internal(message). Replaces a fault armed before and
// not yet taken; stays armed across Shutdown()/Init() until taken.
void InjectCoordinatorFault(FaultPoint point, const std::string& message);

}  // namespace testing

// Coordinator thread: the armed fault if it is for `point` (disarming it),
// OK otherwise.
Status TakeInjectedFault(testing::FaultPoint point);

}  // namespace accord
