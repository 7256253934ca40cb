// The main() of every GPU test program (tests/gpu/). Without a visible GPU
// (no driver, no device, or CUDA_VISIBLE_DEVICES hiding them all) it says
// why and exits with 77, which CTest reports as skipped; any other failure
// to start CUDA fails the program. Then it runs the Catch session.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>

#include "device/cuda/cuda_device.h"

int main(int argc, char** argv) {
  const accord::Result<std::unique_ptr<accord::DeviceApi>> api = accord::CreateCudaDeviceApi();
  if (!api.ok()) {
    const bool skip = api.status().code() == accord::StatusCode::kUnimplemented;
    std::printf("%s: %s\n", api.status().message().c_str(),
                skip ? "skipping the GPU tests" : "cannot run the GPU tests");
    return skip ? 77 : 1;
  }
  std::printf("%s, %d device(s)\n", api.value()->Version().c_str(), api.value()->DeviceCount());
  return Catch::Session().run(argc, argv);
}
