#include "test_util.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <sstream>

#include <catch2/catch.hpp>

#include "common/half.h"

namespace accord_test {

using accord::DataType;

namespace {

int g_rank = -1;
int g_size = -1;
std::string g_catch_log_path;

struct PendingAtExit {
  accord::Handle handle;
  std::vector<TestTensor> tensors;
  std::string what;
};
std::vector<PendingAtExit>& PendingAtExitHandles() {
  static auto* handles = new std::vector<PendingAtExit>();  // leaked: outlives static teardown
  return *handles;
}

// splitmix64: a tiny, well-mixed generator; the same on every platform.
uint64_t NextRandom(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

template <typename T>
T Load(const void* data, int64_t index) {
  T value;
  std::memcpy(&value, static_cast<const char*>(data) + index * sizeof(T), sizeof(T));
  return value;
}

template <typename T>
void Store(void* data, int64_t index, T value) {
  std::memcpy(static_cast<char*>(data) + index * sizeof(T), &value, sizeof(T));
}

std::string FormatValue(DataType dtype, double value) {
  std::ostringstream os;
  os.precision(IsFloatingPoint(dtype) ? 9 : 20);
  os << value;
  return os.str();
}

}  // namespace

namespace {
// Constant-initialised, so set before main whatever the order of the
// programs' initializers.
bool g_without_runtime = false;
}  // namespace

bool RunWithoutRuntime() { return g_without_runtime = true; }
bool WithoutRuntime() { return g_without_runtime; }

int Rank() { return g_rank; }
int Size() { return g_size; }
void SetRankAndSize(int rank, int size) {
  g_rank = rank;
  g_size = size;
}
void SetCatchLogPath(const std::string& path) { g_catch_log_path = path; }

accord::Device TestDevice() {
  static const accord::Device device = [] {
    const char* chosen = std::getenv("ACCORD_TEST_DEVICE");
    return chosen && std::string(chosen) == "cuda" ? accord::Device::CUDA(0) : accord::Device::CPU();
  }();
  return device;
}

std::vector<int> AllRanks() {
  std::vector<int> ranks(g_size);
  for (int r = 0; r < g_size; ++r) ranks[r] = r;
  return ranks;
}

const std::vector<DataType>& AllDataTypes() {
  static const std::vector<DataType> dtypes = {
      DataType::kUInt8,   DataType::kInt8,     DataType::kInt16,   DataType::kInt32,   DataType::kInt64,
      DataType::kFloat16, DataType::kBFloat16, DataType::kFloat32, DataType::kFloat64, DataType::kBool};
  return dtypes;
}

bool IsSigned(DataType dtype) { return dtype != DataType::kUInt8 && dtype != DataType::kBool; }

uint64_t Seed(const std::string& key, int rank) {
  uint64_t hash = 0xCBF29CE484222325ull;  // FNV-1a over the key
  for (unsigned char c : key) hash = (hash ^ c) * 0x100000001B3ull;
  uint64_t state = hash ^ (static_cast<uint64_t>(rank + 1) * 0xD1B54A32D192ED03ull);
  return NextRandom(state);
}

double ValueAt(DataType dtype, uint64_t seed, int64_t index, ValueKind kind) {
  uint64_t state = seed + static_cast<uint64_t>(index) * 0x9E3779B97F4A7C15ull;
  const uint64_t r = NextRandom(state);
  if (dtype == DataType::kBool) {
    const bool often_true = kind == ValueKind::kProduct;
    return (r % 4 == 0) != often_true ? 1.0 : 0.0;
  }
  if (kind == ValueKind::kProduct) {
    static const double kSigned[] = {-1.0, 1.0, 2.0};
    static const double kUnsigned[] = {1.0, 2.0};
    return IsSigned(dtype) ? kSigned[r % 3] : kUnsigned[r % 2];
  }
  return IsSigned(dtype) ? static_cast<double>(static_cast<int>(r % 17) - 8) : static_cast<double>(r % 9);
}

std::vector<double> GenerateValues(DataType dtype, int64_t n, uint64_t seed, ValueKind kind) {
  std::vector<double> values(static_cast<size_t>(std::max<int64_t>(n, 0)));
  for (size_t i = 0; i < values.size(); ++i) {
    values[i] = ValueAt(dtype, seed, static_cast<int64_t>(i), kind);
  }
  return values;
}

std::vector<double> RankValues(const std::string& key, int rank, DataType dtype, int64_t n, ValueKind kind) {
  return GenerateValues(dtype, n, Seed(key, rank), kind);
}

double RoundToDataType(DataType dtype, double value) {
  switch (dtype) {
    case DataType::kFloat16: return accord::HalfToFloat(accord::FloatToHalf(static_cast<float>(value)));
    case DataType::kBFloat16: return accord::BFloat16ToFloat(accord::FloatToBFloat16(static_cast<float>(value)));
    case DataType::kFloat32: return static_cast<float>(value);
    case DataType::kFloat64: return value;
    case DataType::kBool: return value != 0.0 ? 1.0 : 0.0;
    default: return std::trunc(value);
  }
}

double ReadElement(const accord::TensorView& t, int64_t i) {
  switch (t.dtype) {
    case DataType::kUInt8: return Load<uint8_t>(t.data, i);
    case DataType::kInt8: return Load<int8_t>(t.data, i);
    case DataType::kInt16: return Load<int16_t>(t.data, i);
    case DataType::kInt32: return Load<int32_t>(t.data, i);
    case DataType::kInt64: return static_cast<double>(Load<int64_t>(t.data, i));
    case DataType::kFloat16: return accord::HalfToFloat(Load<uint16_t>(t.data, i));
    case DataType::kBFloat16: return accord::BFloat16ToFloat(Load<uint16_t>(t.data, i));
    case DataType::kFloat32: return Load<float>(t.data, i);
    case DataType::kFloat64: return Load<double>(t.data, i);
    case DataType::kBool: return Load<uint8_t>(t.data, i);  // raw byte: 2 is not a bool
  }
  return std::nan("");
}

void WriteElement(const accord::TensorView& t, int64_t i, double value) {
  const double v = RoundToDataType(t.dtype, value);
  switch (t.dtype) {
    case DataType::kUInt8: Store<uint8_t>(t.data, i, static_cast<uint8_t>(v)); break;
    case DataType::kInt8: Store<int8_t>(t.data, i, static_cast<int8_t>(v)); break;
    case DataType::kInt16: Store<int16_t>(t.data, i, static_cast<int16_t>(v)); break;
    case DataType::kInt32: Store<int32_t>(t.data, i, static_cast<int32_t>(v)); break;
    case DataType::kInt64: Store<int64_t>(t.data, i, static_cast<int64_t>(v)); break;
    case DataType::kFloat16: Store<uint16_t>(t.data, i, accord::FloatToHalf(static_cast<float>(v))); break;
    case DataType::kBFloat16: Store<uint16_t>(t.data, i, accord::FloatToBFloat16(static_cast<float>(v))); break;
    case DataType::kFloat32: Store<float>(t.data, i, static_cast<float>(v)); break;
    case DataType::kFloat64: Store<double>(t.data, i, v); break;
    case DataType::kBool: Store<uint8_t>(t.data, i, v != 0.0 ? 1 : 0); break;
  }
}

TestTensor::TestTensor(DataType dtype, accord::Shape shape) {
  view_.dtype = dtype;
  view_.shape = std::move(shape);
  view_.device = TestDevice();
  bytes_.assign(std::max<size_t>(view_.size_bytes(), 1), 0);  // never a null data pointer
  view_.data = bytes_.data();
}

TestTensor::TestTensor(DataType dtype, accord::Shape shape, const std::vector<double>& values)
    : TestTensor(dtype, std::move(shape)) {
  const int64_t n = view_.num_elements();
  for (int64_t i = 0; i < n && i < static_cast<int64_t>(values.size()); ++i) {
    WriteElement(view_, i, values[i]);
  }
}

std::vector<double> Reduce(DataType dtype, const std::vector<std::vector<double>>& inputs, const ReduceSpec& spec) {
  using accord::ReduceOp;
  if (inputs.empty()) return {};
  std::vector<double> out(inputs[0].size());
  for (size_t i = 0; i < out.size(); ++i) {
    // The prescaled input is what a rank contributes: stored in dtype first.
    double acc = RoundToDataType(dtype, inputs[0][i] * spec.prescale);
    for (size_t r = 1; r < inputs.size(); ++r) {
      const double x = RoundToDataType(dtype, inputs[r][i] * spec.prescale);
      switch (spec.op) {
        case ReduceOp::kAverage:
        case ReduceOp::kSum: acc += x; break;
        case ReduceOp::kMin: acc = std::min(acc, x); break;
        case ReduceOp::kMax: acc = std::max(acc, x); break;
        case ReduceOp::kProduct: acc *= x; break;
        case ReduceOp::kAdasum:  // not elementwise: adasum_test has its own reference
          FAIL("Reduce() has no elementwise reference for Adasum");
      }
    }
    if (spec.op == ReduceOp::kAverage) acc /= static_cast<double>(inputs.size());
    out[i] = RoundToDataType(dtype, acc * spec.postscale);
  }
  return out;
}

std::vector<double> ReferenceAllreduce(const std::string& key, const std::vector<int>& ranks, DataType dtype, int64_t n,
                                       ValueKind kind, const ReduceSpec& spec) {
  std::vector<std::vector<double>> inputs;
  for (int r : ranks) inputs.push_back(RankValues(key, r, dtype, n, kind));
  return Reduce(dtype, inputs, spec);
}

int64_t ReducescatterRows(int64_t rows, int set_size, int set_rank) {
  return rows / set_size + (set_rank < rows % set_size ? 1 : 0);
}

int64_t ReducescatterFirstRow(int64_t rows, int set_size, int set_rank) {
  int64_t first = 0;
  for (int r = 0; r < set_rank; ++r) first += ReducescatterRows(rows, set_size, r);
  return first;
}

int64_t RowElements(const accord::Shape& shape) {
  int64_t n = 1;
  for (size_t d = 1; d < shape.size(); ++d) n *= shape[d];
  return n;
}

double Tolerance(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat16: return 2.0 / 1024;  // 2 ulp at 10 mantissa bits
    case DataType::kBFloat16: return 2.0 / 128;  // 2 ulp at 7 mantissa bits
    case DataType::kFloat32: return 4.0e-7;
    case DataType::kFloat64: return 1.0e-14;
    default: return 0.0;
  }
}

bool ExpectValues(const std::string& what, const accord::TensorView& got, DataType dtype, const accord::Shape& shape,
                  const std::vector<double>& expected, double tolerance) {
  if (accord::NumElements(shape) != static_cast<int64_t>(expected.size())) {
    FAIL_CHECK("rank " << g_rank << ": " << what << ": the test expects " << expected.size() << " elements but shape "
                       << accord::ShapeToString(shape) << " holds " << accord::NumElements(shape));
    return false;
  }
  return ExpectValuesFn(
      what, got, dtype, shape, [&expected](int64_t i) { return expected[static_cast<size_t>(i)]; }, tolerance);
}

bool ExpectValuesFn(const std::string& what, const accord::TensorView& got, DataType dtype, const accord::Shape& shape,
                    const std::function<double(int64_t)>& expected, double tolerance) {
  {
    INFO("rank " << g_rank << ": " << what << ": output dtype and shape");
    CHECK(DataTypeName(got.dtype) == std::string(DataTypeName(dtype)));
    CHECK(accord::ShapeToString(got.shape) == accord::ShapeToString(shape));
  }
  if (got.dtype != dtype || got.shape != shape) return false;
  const int64_t n = got.num_elements();
  if (n > 0 && got.data == nullptr) {
    FAIL_CHECK("rank " << g_rank << ": " << what << ": output has no data");
    return false;
  }
  int64_t mismatches = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double g = ReadElement(got, i);
    const double want = expected(i);
    const bool close = tolerance > 0.0 ? std::fabs(g - want) <= tolerance * std::max(1.0, std::fabs(want)) : g == want;
    if (close) continue;
    if (++mismatches <= 5) {
      FAIL_CHECK("rank " << g_rank << ": " << what << " (" << DataTypeName(dtype) << " " << accord::ShapeToString(shape)
                         << ") index " << i << ": expected " << FormatValue(dtype, want) << ", got "
                         << FormatValue(dtype, g));
    }
  }
  if (mismatches > 5) {
    FAIL_CHECK("rank " << g_rank << ": " << what << ": " << mismatches << " of " << n
                       << " elements differ (first 5 shown)");
  }
  return mismatches == 0;
}

std::chrono::milliseconds HangTimeout() {
  static const std::chrono::milliseconds timeout = [] {
    const char* env = std::getenv("ACCORD_TEST_WAIT_TIMEOUT_S");
    const long seconds = env != nullptr ? std::atol(env) : 0;
    return std::chrono::milliseconds(1000 * (seconds > 0 ? seconds : 100));
  }();
  return timeout;
}

accord::Handle Enqueued(accord::Result<accord::Handle> result, const std::string& what) {
  if (!result.ok()) {
    FAIL_CHECK("rank " << g_rank << ": enqueue of " << what << " failed: " << result.status().ToString());
    return accord::Handle();
  }
  return std::move(result).value();
}

accord::Status WaitFor(const accord::Handle& handle, const std::string& what) {
  if (!handle.valid()) {
    return accord::Status::Internal("no handle for " + what + " (its enqueue failed)");
  }
  accord::Status status = handle.Wait(HangTimeout());
  if (status.code() == accord::StatusCode::kTimeout) {
    DieWithLog(what + " did not complete within " + std::to_string(HangTimeout().count() / 1000) +
               " s (a hang; raise ACCORD_TEST_WAIT_TIMEOUT_S if the machine is just slow)");
  }
  return status;
}

bool WaitOk(const accord::Handle& handle, const std::string& what) {
  const accord::Status status = WaitFor(handle, what);
  INFO("rank " << g_rank << ": " << what << ": " << status.ToString());
  CHECK(status.ok());
  return status.ok();
}

void ExpectShutDownAtExit(accord::Handle handle, std::vector<TestTensor> tensors, const std::string& what) {
  PendingAtExitHandles().push_back({std::move(handle), std::move(tensors), what});
}

int CheckShutDownAtExitHandles() {
  int failures = 0;
  for (const PendingAtExit& p : PendingAtExitHandles()) {
    const accord::Status status = p.handle.Wait(HangTimeout());
    if (status.code() == accord::StatusCode::kShutDown) continue;
    ++failures;
    std::fprintf(stderr, "[rank %d] %s: expected kShutDown after Shutdown(), got %s\n", g_rank, p.what.c_str(),
                 status.ToString().c_str());
  }
  PendingAtExitHandles().clear();
  return failures;
}

void PrintLogPrefixed(const std::string& path) {
  if (path.empty()) return;
  FILE* file = std::fopen(path.c_str(), "r");
  if (file == nullptr) return;
  char line[4096];
  bool at_line_start = true;
  while (std::fgets(line, sizeof(line), file) != nullptr) {
    if (at_line_start) std::fprintf(stderr, "[rank %d] ", g_rank);
    std::fputs(line, stderr);
    at_line_start = std::strchr(line, '\n') != nullptr;
  }
  std::fclose(file);
  std::fflush(stderr);
}

void DieWithLog(const std::string& message) {
  std::cout.flush();
  std::fflush(stdout);
  std::fprintf(stderr, "[rank %d] FATAL: %s\n", g_rank, message.c_str());
  if (!g_catch_log_path.empty()) {
    std::fprintf(stderr, "[rank %d] its Catch log so far:\n", g_rank);
    PrintLogPrefixed(g_catch_log_path);
    std::remove(g_catch_log_path.c_str());
  }
  std::fflush(stderr);
  std::_Exit(3);
}

accord::AllreduceOptions SumOptions(const std::string& name) {
  accord::AllreduceOptions options;
  options.name = name;
  options.op = accord::ReduceOp::kSum;
  return options;
}

void CheckSumAllreduce(const std::string& name, int64_t n) {
  TestTensor t(accord::DataType::kFloat32, {n}, RankValues(name, Rank(), accord::DataType::kFloat32, n));
  if (!WaitOk(Enqueued(accord::Allreduce(t.view(), t.view(), SumOptions(name)), name), name)) return;
  ExpectValues(name, t.view(), accord::DataType::kFloat32, {n},
               ReferenceAllreduce(name, AllRanks(), accord::DataType::kFloat32, n, ValueKind::kSmall,
                                  ReduceSpec{accord::ReduceOp::kSum}));
}

}  // namespace accord_test
