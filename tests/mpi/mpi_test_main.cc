// The main() of every multi-rank Catch2 program in tests/mpi/.
//
//   1. accord::Init() (which initialises MPI when nobody has yet), or, in a
//      program that tests accord's internals without the runtime
//      (accord_test::RunWithoutRuntime), MPI_Init_thread;
//   2. run the Catch session. Rank 0 reports to stdout as usual; every other
//      rank's stdout goes into a private log file that is printed to stderr,
//      each line prefixed with "[rank k]", only if that rank failed (or
//      died: on a fatal signal or a hang, see accord_test::DieWithLog);
//   3. accord::Shutdown(), then check the handles the tests left pending on
//      purpose (ExpectShutDownAtExit) completed with kShutDown;
//   4. gather every rank's failure count (MPI, from this thread, now that no
//      accord operation is in flight), print a one-line summary on rank 0,
//      and exit non-zero on every rank if any rank failed (MPI_Finalize
//      first in a program without the runtime). Every rank reached that
//      gather, so a program whose tests stopped the job on purpose (the
//      stall inspector, an injected failure) still finalizes MPI at exit:
//      none of its ranks is missing (docs/troubleshooting.md, "The job
//      ends").
//
// Rules for the test cases (each rank runs the same cases in the same order):
// use CHECK, not REQUIRE, before a collective the other ranks still enter;
// never skip a SECTION on some ranks only; select cases with the same
// command line on every rank (mpirun passes the same arguments to all).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <fcntl.h>
// The C API is all this file needs; skip Open MPI's deprecated C++ bindings.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "accord/accord.h"
#include "backends/mpi/mpi_environment.h"
#include "test_util.h"

namespace {

// Read by the fatal-signal handler, so plain C storage.
char g_log_path[512] = "";
int g_signal_rank = -1;

void WriteAll(int fd, const char* data, size_t n) {
  while (n > 0) {
    const ssize_t written = write(fd, data, n);
    if (written <= 0) return;
    data += written;
    n -= static_cast<size_t>(written);
  }
}

// Runs after Catch's own handler (which reports the crash into the log and
// re-raises): shows the log of a non-zero rank, which would otherwise be
// lost, with "[rank k] " before each line. Apart from the fflush (worth the
// risk in a process that is dying anyway) only async-signal-safe calls.
void OnFatalSignal(int signal_number) {
  std::fflush(stdout);
  char prefix[32];
  const int prefix_length = snprintf(prefix, sizeof(prefix), "[rank %d] ", g_signal_rank);
  char header[128];
  const bool has_log = g_log_path[0] != '\0';
  const int n = snprintf(header, sizeof(header), "%sdied with signal %d%s\n", prefix, signal_number,
                         has_log ? "; its Catch log:" : "");
  if (n > 0) WriteAll(STDERR_FILENO, header, static_cast<size_t>(n));
  const int fd = has_log ? open(g_log_path, O_RDONLY) : -1;
  if (fd >= 0) {
    char buffer[4096];
    ssize_t got;
    bool at_line_start = true;
    while ((got = read(fd, buffer, sizeof(buffer))) > 0) {
      for (ssize_t i = 0; i < got; ++i) {
        if (at_line_start) WriteAll(STDERR_FILENO, prefix, static_cast<size_t>(prefix_length));
        WriteAll(STDERR_FILENO, &buffer[i], 1);
        at_line_start = buffer[i] == '\n';
      }
    }
    close(fd);
  }
  signal(signal_number, SIG_DFL);
  raise(signal_number);
}

void InstallFatalSignalHandlers() {
  for (int s : {SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL}) signal(s, OnFatalSignal);
}

// A log path unique to this job and rank.
std::string LogPathFor(int rank) {
  const char* dir = std::getenv("TMPDIR");
  std::string path = (dir != nullptr && dir[0] != '\0') ? dir : "/tmp";
  return path + "/accord-mpi-test." + std::to_string(getpid()) + ".rank" + std::to_string(rank) + ".log";
}

// Sends this process's stdout (Catch's report among it) into `path`;
// returns a descriptor of the old stdout to restore, or -1 if it could not.
int RedirectStdout(const std::string& path) {
  std::cout.flush();
  std::fflush(stdout);
  const int log = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (log < 0) return -1;
  const int saved = dup(STDOUT_FILENO);
  dup2(log, STDOUT_FILENO);
  close(log);
  return saved;
}

void RestoreStdout(int saved) {
  std::cout.flush();
  std::fflush(stdout);
  if (saved < 0) return;
  dup2(saved, STDOUT_FILENO);
  close(saved);
}

// Every rank's failure count, gathered on every rank.
std::vector<int> GatherFailures(int failures, int size) {
  std::vector<int> all(static_cast<size_t>(size), 0);
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) {
    std::fprintf(stderr, "MPI is not usable after accord::Shutdown(); cannot combine results\n");
    all.assign(all.size(), failures > 0 ? failures : 1);
    return all;
  }
  MPI_Allgather(&failures, 1, MPI_INT, all.data(), 1, MPI_INT, MPI_COMM_WORLD);
  return all;
}

void PrintSummary(const char* program, const std::vector<int>& failures) {
  std::string failing;
  for (size_t r = 0; r < failures.size(); ++r) {
    if (failures[r] == 0) continue;
    failing += (failing.empty() ? "" : ", ") + std::to_string(r) + " (" + std::to_string(failures[r]) + ")";
  }
  if (failing.empty()) {
    std::printf("\n%s: PASSED on all %zu ranks\n", program, failures.size());
  } else {
    std::printf("\n%s: FAILED on ranks (failures): %s of %zu\n", program, failing.c_str(), failures.size());
  }
  std::fflush(stdout);
}

// Step 1, or for a program without the runtime (accord_test::
// RunWithoutRuntime) MPI_Init; this rank and the size, or false if it failed.
bool Start(int* rank, int* size) {
  if (accord_test::WithoutRuntime()) {
    int provided = 0;
    if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
      std::fprintf(stderr, "MPI_Init_thread failed\n");
      return false;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, rank);
    MPI_Comm_size(MPI_COMM_WORLD, size);
    return true;
  }
  const accord::Status init = accord::Init();
  if (!init.ok()) {
    std::fprintf(stderr, "accord::Init() failed: %s\n", init.ToString().c_str());
    return false;
  }
  *rank = accord::Rank();
  *size = accord::Size();
  return true;
}

// Step 3's Shutdown (none without the runtime); the failures it adds.
int Stop(int rank) {
  if (accord_test::WithoutRuntime()) return 0;
  const accord::Status shutdown = accord::Shutdown();
  if (shutdown.ok()) return 0;
  std::fprintf(stderr, "[rank %d] accord::Shutdown() failed: %s\n", rank, shutdown.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  int rank = 0, size = 1;
  if (!Start(&rank, &size)) return 1;  // mpirun stops the whole job when one rank exits non-zero
  accord_test::SetRankAndSize(rank, size);
  g_signal_rank = rank;

  Catch::Session session;
  // mpirun hands ranks a pseudo-terminal, so Catch would colour its output;
  // CTest logs are files. `--use-colour yes` still turns it on.
  session.configData().useColour = Catch::UseColour::No;
  const int parse = session.applyCommandLine(argc, argv);
  if (parse != 0) {  // the same arguments, so the same outcome, on every rank
    (void)Stop(rank);
    if (accord_test::WithoutRuntime()) MPI_Finalize();
    return parse;
  }
  // Ranks other than 0 report into a file (stdout itself, so that anything
  // buffered reaches it when the rank dies early), shown only on failure.
  std::string log_path;
  int saved_stdout = -1;
  if (rank != 0) {
    log_path = LogPathFor(rank);
    std::snprintf(g_log_path, sizeof(g_log_path), "%s", log_path.c_str());
    saved_stdout = RedirectStdout(log_path);
    if (saved_stdout >= 0) accord_test::SetCatchLogPath(log_path);
  }
  InstallFatalSignalHandlers();

  int failures = session.run();
  RestoreStdout(saved_stdout);
  failures += Stop(rank);
  failures += accord_test::CheckShutDownAtExitHandles();

  if (!log_path.empty()) {
    if (failures > 0 && saved_stdout >= 0) accord_test::PrintLogPrefixed(log_path);
    std::remove(log_path.c_str());
  }
  const std::vector<int> all = GatherFailures(failures, size);
  accord::MpiEnvironment::ClearJobFailed();
  bool any_failed = false;
  for (int f : all) any_failed = any_failed || f != 0;
  if (rank == 0) {
    const char* slash = std::strrchr(argv[0], '/');
    PrintSummary(slash != nullptr ? slash + 1 : argv[0], all);
  }
  if (accord_test::WithoutRuntime()) MPI_Finalize();
  return any_failed ? 1 : 0;
}
