#include "check_build.h"

#include <sstream>

#include "plan.h"
#include "system_info.h"

#ifndef ACCORD_LAUNCHER_WITH_LIBTORCH
#define ACCORD_LAUNCHER_WITH_LIBTORCH 0
#endif

namespace accord::launcher {
namespace {

constexpr double kProbeTimeoutSeconds = 120;

const PythonModule* Find(const PythonProbe& probe, const std::string& name) {
  for (const PythonModule& module : probe.modules) {
    if (module.name == name) return &module;
  }
  return nullptr;
}

// "[X] name   detail" lines.
void Line(std::ostream& out, bool available, const std::string& name, const std::string& detail) {
  std::string padded = name;
  if (!detail.empty() && padded.size() < 18) padded.resize(18, ' ');
  out << "    [" << (available ? 'X' : ' ') << "] " << padded << detail << "\n";
}

// The detail of a framework that needs `framework` and accord's `adapter`.
std::pair<bool, std::string> Framework(const PythonProbe& probe, const std::string& framework,
                                       const std::string& adapter) {
  if (!probe.problem.empty()) return {false, "(not found: " + probe.problem + ")"};
  const PythonModule* lib = Find(probe, framework);
  const PythonModule* ours = Find(probe, adapter);
  if (lib == nullptr || !lib->found) {
    return {false, "(" + framework + " not found by " + probe.interpreter + ")"};
  }
  if (ours == nullptr || !ours->found) {
    std::string why = ours == nullptr ? "not tried" : ours->error;
    return {false, "(" + framework + " " + lib->version + " found, but " + probe.interpreter + " cannot import " +
                       adapter + ": " + why + ")"};
  }
  return {true, "(" + adapter + " with " + framework + " " + lib->version + ")"};
}

// The detail of a backend: the version the core reports, when it was built.
std::string Version(bool built, const std::string& version) {
  return built && !version.empty() ? "(" + version + ")" : "";
}

}  // namespace

const char* const kPythonProbeScript =
    "import importlib\n"
    "for name in ('numpy', 'torch', 'accord', 'accord.torch'):\n"
    "    try:\n"
    "        module = importlib.import_module(name)\n"
    "        print('found', name, getattr(module, '__version__', '?'))\n"
    "    except BaseException as e:\n"
    "        text = (str(e).splitlines() or [''])[0]\n"
    "        print('missing', name, type(e).__name__ + (': ' + text if text else ''))\n";

std::vector<PythonModule> ParsePythonProbe(const std::string& output) {
  std::vector<PythonModule> modules;
  std::istringstream lines(output);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream words(line);
    std::string state;
    PythonModule module;
    if (!(words >> state >> module.name) || (state != "found" && state != "missing")) continue;
    std::string rest;
    std::getline(words, rest);
    if (!rest.empty() && rest[0] == ' ') rest.erase(0, 1);
    module.found = state == "found";
    (module.found ? module.version : module.error) = rest;
    modules.push_back(std::move(module));
  }
  return modules;
}

PythonProbe ProbePython(const SystemInfo& system) {
  PythonProbe probe;
  auto chosen = system.env.find(kPythonVariable);
  if (chosen != system.env.end() && !chosen->second.empty()) {
    Result<std::string> found = FindProgram(chosen->second, system);
    if (!found.ok()) {
      probe.problem = std::string(kPythonVariable) + "=" + chosen->second + ": " + found.status().message();
      return probe;
    }
    probe.interpreter = chosen->second;
  } else {
    Result<std::string> found = FindProgram("python3", system);
    if (!found.ok()) {
      probe.problem = std::string("no python3 in PATH (set ") + kPythonVariable + " to choose an interpreter)";
      return probe;
    }
    probe.interpreter = *found;
  }
  Result<CommandOutput> run = RunAndCapture({probe.interpreter, "-c", kPythonProbeScript}, kProbeTimeoutSeconds);
  if (!run.ok()) {
    probe.problem = run.status().message();
    return probe;
  }
  probe.modules = ParsePythonProbe(run->output);
  if (probe.modules.empty()) {
    std::string first_line = run->output.substr(0, run->output.find('\n'));
    probe.problem =
        probe.interpreter + " failed (exit status " + std::to_string(run->exit_status) + ": " + first_line + ")";
  }
  return probe;
}

std::string FormatBuildReport(const BuildReport& report) {
  std::ostringstream out;
  out << "accord v" << report.version << ":\n\n";
  out << "Available Frameworks:\n";
  auto [numpy, numpy_detail] = Framework(report.python, "numpy", "accord");
  Line(out, numpy, "numpy", numpy_detail);
  auto [torch, torch_detail] = Framework(report.python, "torch", "accord.torch");
  Line(out, torch, "torch via DLPack", torch_detail);
  Line(out, report.libtorch, "LibTorch C++", report.libtorch ? "(accord_torch)" : "(accord_torch was not built)");
  out << "\nAvailable Controllers:\n";
  Line(out, report.core.mpi, "MPI", "");
  out << "\nAvailable Tensor Operations:\n";
  Line(out, report.core.mpi, "MPI", "");
  Line(out, report.core.nccl, "NCCL", Version(report.core.nccl, report.core.nccl_version));
  Line(out, report.core.cuda, "CUDA", Version(report.core.cuda, report.core.cuda_version));
  if (!report.python.interpreter.empty()) out << "\nPython: " << report.python.interpreter << "\n";
  return out.str();
}

bool LibTorchAdapterBuilt() { return ACCORD_LAUNCHER_WITH_LIBTORCH != 0; }

}  // namespace accord::launcher
