// The main() of every multi-rank Catch2 program in tests/mpi/.
//
//   1. accord::Init() (which initialises MPI when nobody has yet);
//   2. run the Catch session. Rank 0 reports to stdout as usual; every other
//      rank reports into a private log file that is printed, each line
//      prefixed with "[rank k]", only if that rank failed (or died);
//   3. accord::Shutdown(), then check the handles the tests left pending on
//      purpose (ExpectShutDownAtExit) completed with kShutDown;
//   4. gather every rank's failure count (MPI, from this thread, now that no
//      accord operation is in flight), print a one-line summary on rank 0,
//      and exit non-zero on every rank if any rank failed.
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
#include <string>
#include <vector>

#include "accord/accord.h"
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
// lost. Only async-signal-safe calls.
void OnFatalSignal(int signal_number) {
  char header[128];
  const int n = snprintf(header, sizeof(header), "[rank %d] died with signal %d; its Catch log:\n",
                         g_signal_rank, signal_number);
  if (n > 0) WriteAll(STDERR_FILENO, header, static_cast<size_t>(n));
  const int fd = g_log_path[0] != '\0' ? open(g_log_path, O_RDONLY) : -1;
  if (fd >= 0) {
    char buffer[4096];
    ssize_t got;
    while ((got = read(fd, buffer, sizeof(buffer))) > 0) {
      WriteAll(STDERR_FILENO, buffer, static_cast<size_t>(got));
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
  return path + "/accord-mpi-test." + std::to_string(getpid()) + ".rank" +
         std::to_string(rank) + ".log";
}

// Prints the file at `path` to stderr with "[rank r] " before every line.
void PrintPrefixed(const std::string& path, int rank) {
  FILE* file = std::fopen(path.c_str(), "r");
  if (file == nullptr) return;
  char line[4096];
  bool at_line_start = true;
  while (std::fgets(line, sizeof(line), file) != nullptr) {
    if (at_line_start) std::fprintf(stderr, "[rank %d] ", rank);
    std::fputs(line, stderr);
    at_line_start = std::strchr(line, '\n') != nullptr;
  }
  std::fclose(file);
  std::fflush(stderr);
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
    failing += (failing.empty() ? "" : ", ") + std::to_string(r) + " (" +
               std::to_string(failures[r]) + ")";
  }
  if (failing.empty()) {
    std::printf("%s: PASSED on all %zu ranks\n", program, failures.size());
  } else {
    std::printf("%s: FAILED on ranks (failures): %s of %zu\n", program, failing.c_str(),
                failures.size());
  }
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  const accord::Status init = accord::Init();
  if (!init.ok()) {
    std::fprintf(stderr, "accord::Init() failed: %s\n", init.ToString().c_str());
    return 1;  // mpirun stops the whole job when one rank exits non-zero
  }
  const int rank = accord::Rank();
  const int size = accord::Size();
  accord_test::SetRankAndSize(rank, size);
  g_signal_rank = rank;

  Catch::Session session;
  const int parse = session.applyCommandLine(argc, argv);
  if (parse != 0) {  // the same arguments, so the same outcome, on every rank
    (void)accord::Shutdown();
    return parse;
  }
  std::string log_path;
  if (rank != 0) {
    log_path = LogPathFor(rank);
    std::snprintf(g_log_path, sizeof(g_log_path), "%s", log_path.c_str());
    session.configData().outputFilename = log_path;
    accord_test::SetCatchLogPath(log_path);
  }
  InstallFatalSignalHandlers();

  int failures = session.run();
  const accord::Status shutdown = accord::Shutdown();
  if (!shutdown.ok()) {
    std::fprintf(stderr, "[rank %d] accord::Shutdown() failed: %s\n", rank,
                 shutdown.ToString().c_str());
    ++failures;
  }
  failures += accord_test::CheckShutDownAtExitHandles();

  if (!log_path.empty()) {
    if (failures > 0) PrintPrefixed(log_path, rank);
    std::remove(log_path.c_str());
  }
  const std::vector<int> all = GatherFailures(failures, size);
  bool any_failed = false;
  for (int f : all) any_failed = any_failed || f != 0;
  if (rank == 0) {
    const char* slash = std::strrchr(argv[0], '/');
    PrintSummary(slash != nullptr ? slash + 1 : argv[0], all);
  }
  return any_failed ? 1 : 0;
}
