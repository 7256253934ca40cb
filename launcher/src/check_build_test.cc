// Tests for --check-build's report: parsing the Python probe and the text for
// every combination of found and missing pieces.
#include "check_build.h"

#include <catch2/catch.hpp>

namespace accord::launcher {
namespace {

const char* const kAllFound =
    "found numpy 1.24.2\n"
    "found torch 1.13.0a0\n"
    "found accord 0.1.0\n"
    "found accord.torch ?\n";

BuildReport Report(const std::string& probe_output) {
  BuildReport report;
  report.version = "0.1.0";
  report.python.interpreter = "/usr/bin/python3";
  report.python.modules = ParsePythonProbe(probe_output);
  return report;
}

bool Has(const std::string& text, const std::string& part) {
  INFO(text);
  return text.find(part) != std::string::npos;
}

TEST_CASE("The probe's output is read line by line") {
  std::vector<PythonModule> modules =
      ParsePythonProbe("found numpy 1.24.2\nmissing torch ModuleNotFoundError: No module named 'torch'\nnoise\n");
  REQUIRE(modules.size() == 2);
  CHECK(modules[0].name == "numpy");
  CHECK(modules[0].found);
  CHECK(modules[0].version == "1.24.2");
  CHECK(modules[1].name == "torch");
  CHECK_FALSE(modules[1].found);
  CHECK(modules[1].error == "ModuleNotFoundError: No module named 'torch'");
}

TEST_CASE("Everything found, as horovodrun --check-build lays it out") {
  BuildReport report = Report(kAllFound);
  report.core.mpi = true;
  std::string text = FormatBuildReport(report);
  CHECK(text ==
        "accord v0.1.0:\n"
        "\n"
        "Available Frameworks:\n"
        "    [X] numpy             (accord with numpy 1.24.2)\n"
        "    [X] torch via DLPack  (accord.torch with torch 1.13.0a0)\n"
        "    [ ] LibTorch C++      (accord_torch was not built)\n"
        "\n"
        "Available Controllers:\n"
        "    [X] MPI\n"
        "\n"
        "Available Tensor Operations:\n"
        "    [X] MPI\n"
        "    [ ] NCCL\n"
        "    [ ] CUDA\n"
        "\n"
        "Python: /usr/bin/python3\n");
}

TEST_CASE("LibTorch, NCCL and CUDA show when built, with the versions the core reports") {
  BuildReport report = Report(kAllFound);
  report.core.mpi = true;
  report.libtorch = true;
  report.core.nccl = true;
  report.core.nccl_version = "NCCL 2.28.9";
  report.core.cuda = true;
  report.core.cuda_version = "CUDA 13.0 (driver 12.8)";
  std::string text = FormatBuildReport(report);
  CHECK(Has(text, "    [X] LibTorch C++      (accord_torch)\n"));
  CHECK(Has(text,
            "Available Tensor Operations:\n"
            "    [X] MPI\n"
            "    [X] NCCL              (NCCL 2.28.9)\n"
            "    [X] CUDA              (CUDA 13.0 (driver 12.8))\n"
            "\n"));
}

TEST_CASE("A backend built without a version to report, or not built, shows no detail") {
  BuildReport report = Report(kAllFound);
  report.core.mpi = true;
  report.core.cuda = true;
  report.core.nccl_version = "NCCL 2.28.9";  // not built: the version is not shown
  std::string text = FormatBuildReport(report);
  CHECK(Has(text, "    [ ] NCCL\n"));
  CHECK(Has(text, "    [X] CUDA\n"));
}

TEST_CASE("A missing module or package is named") {
  std::string no_torch = FormatBuildReport(
      Report("found numpy 1.24.2\nmissing torch ModuleNotFoundError: No module named 'torch'\nfound accord 0.1.0\n"
             "missing accord.torch ModuleNotFoundError: No module named 'torch'\n"));
  CHECK(Has(no_torch, "    [X] numpy "));
  CHECK(Has(no_torch, "    [ ] torch via DLPack  (torch not found by /usr/bin/python3)\n"));

  std::string no_accord = FormatBuildReport(
      Report("found numpy 1.24.2\nfound torch 2.1\nmissing accord ModuleNotFoundError: No module named 'accord'\n"
             "missing accord.torch ModuleNotFoundError: No module named 'accord'\n"));
  CHECK(Has(no_accord,
            "    [ ] numpy             (numpy 1.24.2 found, but /usr/bin/python3 cannot import accord: "
            "ModuleNotFoundError: No module named 'accord')\n"));
  CHECK(Has(no_accord, "[ ] torch via DLPack  (torch 2.1 found, but /usr/bin/python3 cannot import accord.torch"));
}

TEST_CASE("No Python at all: frameworks say why, the rest is unaffected") {
  BuildReport report;
  report.version = "0.1.0";
  report.python.problem = "no python3 in PATH (set ACCORDRUN_PYTHON to choose an interpreter)";
  std::string text = FormatBuildReport(report);
  CHECK(Has(text,
            "    [ ] numpy             (not found: no python3 in PATH (set ACCORDRUN_PYTHON to choose an "
            "interpreter))\n"));
  CHECK(Has(text, "    [ ] torch via DLPack  (not found: no python3 in PATH"));
  CHECK(Has(text, "Available Controllers:\n    [X] MPI\n"));
  CHECK_FALSE(Has(text, "Python:"));
}

}  // namespace
}  // namespace accord::launcher
