// Tests for the NCCL backend (backends/nccl/).
//
// Most run anywhere, GPU or not: the mapping decisions (nccl_mapping.h), the
// version string, unique ids (ncclGetUniqueId needs no GPU) and the
// argument checks of MakeNcclCollectives, which come before any CUDA call.
// The cases tagged [gpu] need a CUDA device and skip, with a warning,
// without one: every collective on a set of one rank (NCCL runs real kernels
// even then), the int16 fallback, abort, and a set whose other rank never
// arrives (the deadline of initialisation).
//
// Compiled only in builds with NCCL (accord_nccl_headers defines
// ACCORD_WITH_NCCL).
#if ACCORD_WITH_NCCL

#include "backends/nccl/nccl_collectives.h"

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backends/nccl/nccl_comm.h"
#include "backends/nccl/nccl_mapping.h"
#include "device/device_factory.h"

namespace accord {
namespace {

TEST_CASE("NCCL reductions: the type and op for every dtype and reduce op", "[nccl]") {
  struct Row {
    DataType dtype;
    ncclDataType_t type;
  };
  const std::vector<Row> rows = {
      {DataType::kUInt8, ncclUint8},     {DataType::kInt8, ncclInt8},       {DataType::kInt32, ncclInt32},
      {DataType::kInt64, ncclInt64},     {DataType::kFloat16, ncclFloat16}, {DataType::kBFloat16, ncclBfloat16},
      {DataType::kFloat32, ncclFloat32}, {DataType::kFloat64, ncclFloat64},
  };
  for (const Row& row : rows) {
    INFO(DataTypeName(row.dtype));
    const std::vector<std::pair<ReduceOp, ncclRedOp_t>> ops = {{ReduceOp::kSum, ncclSum},
                                                               {ReduceOp::kMin, ncclMin},
                                                               {ReduceOp::kMax, ncclMax},
                                                               {ReduceOp::kProduct, ncclProd}};
    for (const auto& [op, expected] : ops) {
      INFO(ReduceOpName(op));
      const Result<NcclReduction> reduction = NcclReductionFor(row.dtype, op);
      REQUIRE(reduction.ok());
      CHECK(reduction->type == row.type);
      CHECK(reduction->op == expected);
    }
  }
}

TEST_CASE("NCCL reductions: bool is uint8 with Max for any and Min for all", "[nccl]") {
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kProduct}) {
    INFO(ReduceOpName(op));
    const Result<NcclReduction> reduction = NcclReductionFor(DataType::kBool, op);
    REQUIRE(reduction.ok());
    CHECK(reduction->type == ncclUint8);
    const bool any = op == ReduceOp::kSum || op == ReduceOp::kMax;
    CHECK(reduction->op == (any ? ncclMax : ncclMin));
  }
}

TEST_CASE("NCCL reductions: int16 is unimplemented, a floating Average is ncclAvg, an integer one refused", "[nccl]") {
  const Result<NcclReduction> int16 = NcclReductionFor(DataType::kInt16, ReduceOp::kSum);
  CHECK(int16.status().code() == StatusCode::kUnimplemented);
  CHECK(int16.status().message().find("int16") != std::string::npos);
  for (DataType dtype : {DataType::kFloat16, DataType::kBFloat16, DataType::kFloat32, DataType::kFloat64}) {
    INFO(DataTypeName(dtype));
    const Result<NcclReduction> average = NcclReductionFor(dtype, ReduceOp::kAverage);
    REQUIRE(average.ok());
    CHECK(average->op == ncclAvg);
    // ncclAvg from NCCL 2.10 on (2.9.9 is 20909, 2.10.3 is 21003).
    CHECK_FALSE(NcclAverages(dtype, 20909));
    CHECK(NcclAverages(dtype, 21003));
  }
  for (DataType dtype : {DataType::kInt32, DataType::kUInt8, DataType::kBool}) {
    INFO(DataTypeName(dtype));
    CHECK(NcclReductionFor(dtype, ReduceOp::kAverage).status().code() == StatusCode::kInvalidArgument);
    CHECK_FALSE(NcclAverages(dtype, 22809));
  }
}

TEST_CASE("NCCL layouts: equal counts, non-empty blocks and count checks", "[nccl]") {
  CHECK(EqualCount({3, 3, 3}) == std::optional<int64_t>(3));
  CHECK(EqualCount({0, 0}) == std::optional<int64_t>(0));
  CHECK(EqualCount({5}) == std::optional<int64_t>(5));
  CHECK_FALSE(EqualCount({3, 0, 3}).has_value());
  CHECK_FALSE(EqualCount({}).has_value());

  const std::vector<NcclBlock> blocks = NonEmptyBlocks({2, 0, 3, 1, 0});
  REQUIRE(blocks.size() == 3);
  const int64_t expected[3][3] = {{0, 0, 2}, {2, 2, 3}, {3, 5, 1}};  // rank, offset, count
  for (size_t i = 0; i < blocks.size(); ++i) {
    INFO("block " << i);
    CHECK(blocks[i].rank == expected[i][0]);
    CHECK(blocks[i].offset == expected[i][1]);
    CHECK(blocks[i].count == expected[i][2]);
  }
  CHECK(NonEmptyBlocks({0, 0}).empty());
  CHECK(NcclBytes(3, DataType::kInt16) == 6);
  CHECK(NcclBytes(3, DataType::kFloat64) == 24);

  CHECK(CheckCounts({1, 2}, 2, "allgather").ok());
  const Status wrong_size = CheckCounts({1, 2}, 3, "allgather");
  CHECK(wrong_size.code() == StatusCode::kInvalidArgument);
  CHECK(wrong_size.message().find("2 counts for a set of 3") != std::string::npos);
  const Status negative = CheckCounts({1, -2}, 2, "allgather");
  CHECK(negative.code() == StatusCode::kInvalidArgument);
  CHECK(negative.message().find("rank 1") != std::string::npos);
}

TEST_CASE("NCCL version strings in both encodings, and of the library loaded", "[nccl]") {
  CHECK(NcclVersionString(22809) == "NCCL 2.28.9");
  CHECK(NcclVersionString(21903) == "NCCL 2.19.3");
  CHECK(NcclVersionString(2708) == "NCCL 2.7.8");
  const std::string loaded = NcclVersion();
  INFO(loaded);
  CHECK(loaded.rfind("NCCL " + std::to_string(NCCL_MAJOR) + ".", 0) == 0);
}

TEST_CASE("NCCL unique ids have NCCL_UNIQUE_ID_BYTES bytes and differ", "[nccl]") {
  const Result<std::string> first = NcclUniqueIdBytes();
  const Result<std::string> second = NcclUniqueIdBytes();
  INFO(first.status().ToString() << " / " << second.status().ToString());
  REQUIRE(first.ok());
  REQUIRE(second.ok());
  CHECK(first.value().size() == NCCL_UNIQUE_ID_BYTES);
  CHECK(first.value() != second.value());
}

TEST_CASE("MakeNcclCollectives refuses a malformed id or a rank outside the set", "[nccl]") {
  NcclSetup short_id;
  short_id.unique_id = "too short";
  short_id.timeout_seconds = 5;
  const auto made = MakeNcclCollectives(std::move(short_id));
  CHECK(made.status().code() == StatusCode::kInvalidArgument);
  CHECK(made.status().message().find(std::to_string(NCCL_UNIQUE_ID_BYTES)) != std::string::npos);

  NcclSetup outside;
  outside.unique_id = std::string(NCCL_UNIQUE_ID_BYTES, '\0');
  outside.set_rank = 2;
  outside.set_size = 2;
  outside.timeout_seconds = 5;
  const auto refused = MakeNcclCollectives(std::move(outside));
  CHECK(refused.status().code() == StatusCode::kInvalidArgument);
  CHECK(refused.status().message().find("rank 2 of a set of 2") != std::string::npos);
}

// The CUDA device API, or null (with a warning) on a machine without a GPU.
DeviceApi* GpuOrSkip() {
  const Result<DeviceApi*> api = ProcessDeviceApi(/*host_emulation=*/false);
  if (!api.ok() || api.value()->DeviceCount() == 0) {
    WARN("skipped: no CUDA device (" << api.status().ToString() << ")");
    return nullptr;
  }
  return api.value();
}

// `bytes` of device memory on device 0, freed at scope exit.
struct DeviceBuffer {
  DeviceApi* api;
  void* data = nullptr;
  DeviceBuffer(DeviceApi* a, size_t bytes) : api(a) {
    Result<void*> allocated = api->AllocateDevice(0, bytes);
    REQUIRE(allocated.ok());
    data = allocated.value();
  }
  ~DeviceBuffer() { api->FreeDevice(0, data); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

template <typename T>
std::vector<T> Download(DeviceStream& stream, const void* data, size_t n) {
  std::vector<T> host(n);
  REQUIRE(stream.Copy(host.data(), data, n * sizeof(T)).ok());
  REQUIRE(stream.Synchronize().ok());
  return host;
}

template <typename T>
void Upload(DeviceStream& stream, void* data, const std::vector<T>& host) {
  REQUIRE(stream.Copy(data, host.data(), host.size() * sizeof(T)).ok());
  REQUIRE(stream.Synchronize().ok());
}

// Stands in for the host-staged backend: counts the calls that reach it.
struct CountingFallback : DeviceCollectives {
  int* reductions;
  int* aborts;
  CountingFallback(int* r, int* a) : reductions(r), aborts(a) {}
  const char* name() const override { return "counting fallback"; }
  Status Allreduce(const void*, void*, int64_t, DataType, ReduceOp, DeviceStream&) override {
    ++*reductions;
    return Status::OK();
  }
  Status Allgatherv(void*, const std::vector<int64_t>&, DataType, DeviceStream&) override {
    return Status::Internal("the fallback was asked to allgather");
  }
  Status Broadcast(void*, int64_t, DataType, int, DeviceStream&) override {
    return Status::Internal("the fallback was asked to broadcast");
  }
  Status Alltoallv(const void*, const std::vector<int64_t>&, void*, const std::vector<int64_t>&, int64_t, DataType,
                   DeviceStream&) override {
    return Status::Internal("the fallback was asked to alltoall");
  }
  Status ReduceScatter(const void*, void*, const std::vector<int64_t>&, DataType, ReduceOp, DeviceStream&) override {
    ++*reductions;
    return Status::OK();
  }
  void Abort() override { ++*aborts; }
};

std::unique_ptr<DeviceCollectives> OneRankSet(std::unique_ptr<DeviceCollectives> fallback = nullptr) {
  NcclSetup setup;
  setup.unique_id = NcclUniqueIdBytes().value();
  setup.timeout_seconds = 60;
  setup.fallback = std::move(fallback);
  auto made = MakeNcclCollectives(std::move(setup));
  INFO(made.status().ToString());
  REQUIRE(made.ok());
  return std::move(made).value();
}

TEST_CASE("NCCL collectives on a set of one rank leave every element in place", "[nccl][gpu]") {
  DeviceApi* api = GpuOrSkip();
  if (api == nullptr) return;
  auto stream = api->CreateStream(0).value();
  auto nccl = OneRankSet();
  CHECK(std::string(nccl->name()) == "nccl");

  constexpr size_t kN = 1000;
  std::vector<float> values(kN);
  for (size_t i = 0; i < kN; ++i) values[i] = static_cast<float>(i) + 0.5f;
  DeviceBuffer a(api, kN * sizeof(float)), b(api, kN * sizeof(float));
  const std::vector<int64_t> counts = {static_cast<int64_t>(kN)};
  auto expect_values = [&](const void* data, const char* what) {
    const std::vector<float> got = Download<float>(*stream, data, kN);
    for (size_t i = 0; i < kN; ++i) {
      INFO(what << ": index " << i << " expected " << values[i] << " got " << got[i]);
      REQUIRE(got[i] == values[i]);
    }
  };

  Upload(*stream, a.data, values);
  REQUIRE(nccl->Allreduce(a.data, a.data, kN, DataType::kFloat32, ReduceOp::kSum, *stream).ok());
  expect_values(a.data, "allreduce in place");
  REQUIRE(nccl->Allreduce(a.data, b.data, kN, DataType::kFloat32, ReduceOp::kMax, *stream).ok());
  expect_values(b.data, "allreduce into another buffer");
  REQUIRE(nccl->Allgatherv(a.data, counts, DataType::kFloat32, *stream).ok());
  expect_values(a.data, "allgather");
  REQUIRE(nccl->Broadcast(a.data, kN, DataType::kFloat32, 0, *stream).ok());
  expect_values(a.data, "broadcast");
  REQUIRE(nccl->Alltoallv(a.data, counts, b.data, counts, kN, DataType::kFloat32, *stream).ok());
  expect_values(b.data, "alltoall");
  REQUIRE(nccl->ReduceScatter(a.data, b.data, counts, DataType::kFloat32, ReduceOp::kSum, *stream).ok());
  expect_values(b.data, "reducescatter");
  // Nothing to move is not an error, and enqueues nothing.
  REQUIRE(nccl->Allgatherv(a.data, {0}, DataType::kFloat32, *stream).ok());
  REQUIRE(nccl->Allreduce(a.data, a.data, 0, DataType::kFloat32, ReduceOp::kSum, *stream).ok());
}

TEST_CASE("NCCL: int16 moves as bytes, its reductions need the fallback, and abort is final", "[nccl][gpu]") {
  DeviceApi* api = GpuOrSkip();
  if (api == nullptr) return;
  auto stream = api->CreateStream(0).value();
  auto nccl = OneRankSet();
  const std::vector<int16_t> values = {-3, 7, 32767, -32768, 0};
  DeviceBuffer buffer(api, values.size() * sizeof(int16_t));
  Upload(*stream, buffer.data, values);
  REQUIRE(nccl->Broadcast(buffer.data, values.size(), DataType::kInt16, 0, *stream).ok());
  CHECK(Download<int16_t>(*stream, buffer.data, values.size()) == values);

  const Status reduced =
      nccl->Allreduce(buffer.data, buffer.data, values.size(), DataType::kInt16, ReduceOp::kSum, *stream);
  CHECK(reduced.code() == StatusCode::kUnimplemented);
  CHECK(reduced.message().find("int16") != std::string::npos);

  nccl->Abort();
  nccl->Abort();  // idempotent
  const Status after = nccl->Broadcast(buffer.data, values.size(), DataType::kInt16, 0, *stream);
  CHECK(after.code() == StatusCode::kAborted);
  CHECK(after.message().find("aborted") != std::string::npos);
}

TEST_CASE("NCCL hands int16 reductions, and only them, to the fallback, and aborts it too", "[nccl][gpu]") {
  DeviceApi* api = GpuOrSkip();
  if (api == nullptr) return;
  auto stream = api->CreateStream(0).value();
  int reductions = 0, aborts = 0;
  auto nccl = OneRankSet(std::make_unique<CountingFallback>(&reductions, &aborts));
  DeviceBuffer buffer(api, 64);
  const std::vector<int64_t> counts = {4};
  REQUIRE(nccl->Allreduce(buffer.data, buffer.data, 4, DataType::kInt16, ReduceOp::kSum, *stream).ok());
  REQUIRE(nccl->ReduceScatter(buffer.data, buffer.data, counts, DataType::kInt16, ReduceOp::kMax, *stream).ok());
  CHECK(reductions == 2);
  REQUIRE(nccl->Allreduce(buffer.data, buffer.data, 4, DataType::kInt32, ReduceOp::kSum, *stream).ok());
  REQUIRE(nccl->Allgatherv(buffer.data, counts, DataType::kInt16, *stream).ok());
  CHECK(reductions == 2);  // NCCL ran these itself
  nccl->Abort();
  CHECK(aborts == 1);
}

TEST_CASE("an NCCL communicator whose other rank never comes times out and says who waited", "[nccl][gpu]") {
  DeviceApi* api = GpuOrSkip();
  if (api == nullptr) return;
  ncclUniqueId id;
  const std::string bytes = NcclUniqueIdBytes().value();
  std::memcpy(id.internal, bytes.data(), bytes.size());
  const auto start = std::chrono::steady_clock::now();
  const Result<NcclComm> comm = NcclComm::Create(id, /*rank=*/0, /*size=*/2, /*ordinal=*/0, /*timeout_seconds=*/2);
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  INFO(comm.status().ToString());
  REQUIRE_FALSE(comm.ok());
  CHECK(comm.status().message().find("rank 0 of 2 on CUDA device 0") != std::string::npos);
  CHECK(comm.status().message().find("did not finish within 2.") != std::string::npos);
  CHECK(waited < 30);  // the deadline, plus the abort
}

}  // namespace
}  // namespace accord

#endif  // ACCORD_WITH_NCCL
