#include "accord/torch/basics.h"

#include "orphans.h"

namespace accord {
namespace torch {

Error::Error(const Status& status) : Error(status.code(), status.message()) {}

Error::Error(StatusCode code, const std::string& message) : std::runtime_error(message), code_(code) {}

void check(const Status& status) {
  if (!status.ok()) throw Error(status);
}

void init(const InitOptions& options) { check(Init(options)); }

void shutdown() {
  const Status status = Shutdown();
  // Every pending operation has now completed (with kShutDown): release the
  // tensors of those whose handles were dropped.
  internal::SweepOrphans();
  check(status);
}

bool is_initialized() { return IsInitialized(); }

namespace {

int Checked(int value, const char* what) {
  if (value < 0) {
    throw Error(StatusCode::kPreconditionFailed, std::string("accord::torch::") + what +
                                                     "(): accord is not initialised; call accord::torch::init() first");
  }
  return value;
}

}  // namespace

int rank() { return Checked(Rank(), "rank"); }
int size() { return Checked(Size(), "size"); }
int local_rank() { return Checked(LocalRank(), "local_rank"); }
int local_size() { return Checked(LocalSize(), "local_size"); }
int cross_rank() { return Checked(CrossRank(), "cross_rank"); }
int cross_size() { return Checked(CrossSize(), "cross_size"); }

}  // namespace torch
}  // namespace accord
