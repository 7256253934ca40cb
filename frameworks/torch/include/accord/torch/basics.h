// accord::torch basics: the exception every failure becomes, and the
// lifecycle and rank queries of the core with exceptions instead of Status.
//
// accord::torch is the LibTorch edge of accord, so it follows LibTorch's
// conventions rather than the core's: snake_case functions and methods (as in
// torch::optim and torch::nn, and as in horovod.torch), and errors thrown as
// exceptions. Every accord::torch function throws accord::torch::Error when
// the core reports a failure, with the core's message unchanged.
//
// Thread safety: every function here may be called from any thread.
#pragma once

#include <stdexcept>
#include <string>

#include "accord/accord.h"
#include "accord/status.h"

namespace accord {
namespace torch {

// A failed accord operation. what() is the core's message, which names the
// tensor, the ranks and what they disagree on; code() says what kind of
// failure it was (kInvalidArgument for bad input, kMismatch when ranks
// disagree, kShutDown, kTimeout, ...).
class Error : public std::runtime_error {
 public:
  explicit Error(const Status& status);
  Error(StatusCode code, const std::string& message);

  StatusCode code() const noexcept { return code_; }
  // The core's Status, e.g. to hand on to code written against the core.
  Status status() const { return Status(code_, what()); }

 private:
  StatusCode code_;
};

// Throws Error(status) unless status is OK.
void check(const Status& status);

// accord::Init() that throws: initialises accord (and MPI, unless the caller
// already did) on every rank. Does nothing if accord is already running.
void init(const InitOptions& options = {});
// accord::Shutdown(): pending operations fail with kShutDown. init() may be
// called again afterwards.
void shutdown();
bool is_initialized();

// The core's rank queries; each throws Error(kPreconditionFailed) when
// accord is not initialised (instead of returning -1).
int rank();
int size();
int local_rank();
int local_size();
int cross_rank();
int cross_size();

}  // namespace torch
}  // namespace accord
