#include "system_info.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <utility>

extern char** environ;

namespace accord::launcher {
FileKind GetFileKind(const std::string& path) {
  struct stat info {};
  if (stat(path.c_str(), &info) != 0) return FileKind::kMissing;
  if (S_ISDIR(info.st_mode)) return FileKind::kDirectory;
  return access(path.c_str(), X_OK) == 0 ? FileKind::kExecutable : FileKind::kNotExecutable;
}

SystemInfo GatherSystemInfo() {
  SystemInfo system;
  system.is_root = geteuid() == 0;
  char hostname[256] = {};
  if (gethostname(hostname, sizeof(hostname) - 1) == 0) system.hostname = hostname;
  system.topology = ReadHostTopology(AffinityCpus(), "/sys", std::getenv("CUDA_VISIBLE_DEVICES"));
  char self[4096] = {};
  ssize_t length = readlink("/proc/self/exe", self, sizeof(self) - 1);
  system.self_exe = length > 0 ? std::string(self, static_cast<size_t>(length)) : "accordrun";
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    std::string text = *entry;
    size_t eq = text.find('=');
    if (eq == std::string::npos) continue;
    system.env.emplace(text.substr(0, eq), text.substr(eq + 1));
  }
  system.file_kind = GetFileKind;
  return system;
}

Result<std::string> ReadTextFile(const std::string& path) {
  if (GetFileKind(path) == FileKind::kDirectory) return Status::InvalidArgument("it is a directory");
  std::ifstream file(path);
  if (!file) return Status::InvalidArgument(std::strerror(errno));
  std::ostringstream contents;
  contents << file.rdbuf();
  return contents.str();
}

Result<CommandOutput> RunAndCapture(const std::vector<std::string>& argv, double timeout_s, bool stdout_only) {
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) return Status::Internal(std::string("pipe: ") + std::strerror(errno));
  pid_t child = fork();
  if (child < 0) {
    close(out[0]);
    close(out[1]);
    return Status::Internal(std::string("fork: ") + std::strerror(errno));
  }
  if (child == 0) {
    int null = open("/dev/null", O_RDONLY);
    if (null >= 0) dup2(null, STDIN_FILENO);
    dup2(out[1], STDOUT_FILENO);
    if (!stdout_only) dup2(out[1], STDERR_FILENO);
    std::vector<char*> args;
    for (const std::string& word : argv) args.push_back(const_cast<char*>(word.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    std::string message = std::string("cannot run ") + argv[0] + ": " + std::strerror(errno) + "\n";
    ssize_t ignored = write(STDOUT_FILENO, message.data(), message.size());
    (void)ignored;
    _exit(127);
  }
  close(out[1]);
  CommandOutput result;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  bool timed_out = false;
  char buffer[4096];
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    pollfd reading{out[0], POLLIN, 0};
    int ready = poll(&reading, 1, static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) continue;
    ssize_t n = read(out[0], buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    result.output.append(buffer, static_cast<size_t>(n));
  }
  close(out[0]);
  if (timed_out) kill(child, SIGKILL);
  int status = 0;
  while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) {
    return Status::Timeout(argv[0] + " did not finish within " + std::to_string(static_cast<int>(timeout_s)) + " s");
  }
  result.exit_status = WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
  return result;
}

}  // namespace accord::launcher
