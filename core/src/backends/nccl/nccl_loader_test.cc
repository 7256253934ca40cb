// Tests for nccl_loader.h: NCCL is loaded on first use, and accord's
// forwarders stay inside libaccord, so another library in the process that
// calls NCCL (torch's) reaches the real one.
//
// Compiled only in builds with NCCL (accord_nccl_headers defines
// ACCORD_WITH_NCCL).
#if ACCORD_WITH_NCCL

#include "backends/nccl/nccl_loader.h"

#include <catch2/catch.hpp>

#include <dlfcn.h>

#include <string>

namespace accord {
namespace {

TEST_CASE("NCCL is loaded when first used, from the process or the build's path", "[nccl]") {
  const NcclLibrary& library = LoadNccl();
  INFO(library.error);
  REQUIRE(library.loaded);
  CHECK(library.path.find("libnccl") != std::string::npos);
  CHECK(library.error.empty());
  CHECK(&LoadNccl() == &library);  // once
  // The library is in the process now, and its own symbols are what
  // everyone else finds ...
  void* real = dlsym(RTLD_DEFAULT, "ncclAllReduce");
  REQUIRE(real != nullptr);
  Dl_info where{};
  REQUIRE(dladdr(real, &where) != 0);
  INFO("ncclAllReduce resolves into " << where.dli_fname);
  CHECK(std::string(where.dli_fname).find("libnccl") != std::string::npos);
  // ... while libaccord exports no NCCL symbol of its own (its forwarders
  // are hidden) and does not depend on libnccl.
  Dl_info accord{};
  REQUIRE(dladdr(reinterpret_cast<void*>(&LoadNccl), &accord) != 0);
  void* self = dlopen(accord.dli_fname, RTLD_NOW | RTLD_NOLOAD);
  REQUIRE(self != nullptr);
  INFO("libaccord is " << accord.dli_fname);
  for (const char* name : {"ncclAllReduce", "ncclGetVersion", "ncclCommInitRankConfig", "ncclGetErrorString"}) {
    INFO(name);
    CHECK(dlsym(self, name) == nullptr);
  }
  dlclose(self);
}

}  // namespace
}  // namespace accord

#endif  // ACCORD_WITH_NCCL
