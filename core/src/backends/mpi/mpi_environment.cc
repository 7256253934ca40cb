#include "backends/mpi/mpi_environment.h"

#include <mpi.h>

#include <atomic>
#include <cstdlib>
#include <mutex>

#include "backends/mpi/mpi_check.h"
#include "common/logging.h"

namespace accord {

namespace {

std::atomic<bool> job_failed_flag{false};

void FinalizeAtExit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (job_failed_flag.load()) {
    ACCORD_LOG(kWarning) << "not finalizing MPI at exit: accord ended this job with an error, and MPI_Finalize "
                            "would wait for ranks that may never come";
    return;
  }
  MPI_Finalize();
}

}  // namespace

void MpiEnvironment::MarkJobFailed() { job_failed_flag.store(true); }

void MpiEnvironment::ClearJobFailed() { job_failed_flag.store(false); }

bool MpiEnvironment::thread_multiple() const { return thread_level_ >= MPI_THREAD_MULTIPLE; }

Result<const MpiEnvironment*> MpiEnvironment::Acquire() {
  // Deliberately leaked: MPI outlives every other object in the process.
  static MpiEnvironment* env = nullptr;
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  if (env) return env;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return Status::PreconditionFailed("MPI was already finalized; accord cannot initialise it again");
  auto* e = new MpiEnvironment();
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) {
    ACCORD_RETURN_IF_ERROR(ACCORD_MPI_CHECK(MPI_Query_thread(&e->thread_level_)));
  } else {
    ACCORD_RETURN_IF_ERROR(ACCORD_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &e->thread_level_)));
    e->owned_ = true;
    std::atexit(FinalizeAtExit);
  }
  if (e->thread_level_ < MPI_THREAD_SERIALIZED) {
    return Status::PreconditionFailed(
        "MPI provides thread level " + std::to_string(e->thread_level_) +
        " but accord's coordinator thread needs at least MPI_THREAD_SERIALIZED (MULTIPLE if the "
        "application calls MPI itself)");
  }
  if (e->thread_level_ < MPI_THREAD_MULTIPLE) {
    ACCORD_LOG(kWarning) << "MPI was initialised with thread level " << e->thread_level_
                         << " (< MPI_THREAD_MULTIPLE): the application must not call MPI while accord runs";
  }
  env = e;
  return env;
}

}  // namespace accord
