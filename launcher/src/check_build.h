// accordrun --check-build: what this build of accord can run, in the form
// horovodrun --check-build prints.
//
// The core says which backends it has, with their versions
// (accord::GetBuildInfo(): "CUDA 13.0 (driver 12.8)", "NCCL 2.28.9");
// whether the LibTorch C++ adapter was built is fixed when accordrun is
// compiled; numpy and torch are found by asking a Python interpreter to
// import them together with accord's Python package. FormatBuildReport and
// ParsePythonProbe are pure; ProbePython runs the interpreter. Call them
// from the main thread.
#pragma once

#include <string>
#include <vector>

#include "accord/accord.h"
#include "system_info.h"

namespace accord::launcher {

struct PythonModule {
  std::string name;
  bool found = false;
  std::string version;  // when found
  std::string error;    // when not: "ModuleNotFoundError: No module named 'torch'"
};

struct PythonProbe {
  std::string interpreter;            // what was run (empty when none was found)
  std::string problem;                // why nothing could be asked, or empty
  std::vector<PythonModule> modules;  // numpy, torch, accord, accord.torch
};

// The script ProbePython runs with `python -c`.
extern const char* const kPythonProbeScript;

// Reads the probe script's output.
std::vector<PythonModule> ParsePythonProbe(const std::string& output);

// The Python interpreter that --check-build asks about numpy and torch.
inline constexpr const char* kPythonVariable = "ACCORDRUN_PYTHON";

// Asks ACCORDRUN_PYTHON (the pip-installed accordrun sets it to its own
// interpreter), or else python3 from PATH.
PythonProbe ProbePython(const SystemInfo& system);

struct BuildReport {
  std::string version;    // accord's version
  BuildInfo core;         // from the core
  bool libtorch = false;  // the LibTorch C++ adapter (accord_torch) was built
  PythonProbe python;
};

std::string FormatBuildReport(const BuildReport& report);

// True when this accordrun was built together with the accord_torch library.
bool LibTorchAdapterBuilt();

}  // namespace accord::launcher
