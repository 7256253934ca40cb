// Tests for backends/mpi/mpi_types.h and mpi_check.h.
//
// Runs in the single-process unit-test binary: if nobody has initialised MPI
// yet, the test initialises it as a singleton (no mpirun needed) and
// finalises it at exit. The user-defined ops are exercised through
// MPI_Reduce_local, which calls them exactly as a collective would.
#include "backends/mpi/mpi_types.h"

#include <mpi.h>

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backends/mpi/mpi_check.h"
#include "common/dtype_kernels.h"
#include "common/half.h"

namespace accord {
namespace {

void FinalizeMpiAtExit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

// Initialises MPI (MPI_THREAD_MULTIPLE, like accord::Init) unless someone
// already has; the process that initialised it finalises it at exit.
void EnsureMpiInitialized() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) return;
  int provided = 0;
  REQUIRE(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided) == MPI_SUCCESS);
  std::atexit(FinalizeMpiAtExit);
}

std::unique_ptr<MpiTypes> MakeTypes() {
  EnsureMpiInitialized();
  auto types = MpiTypes::Create();
  INFO(types.status().ToString());
  REQUIRE(types.ok());
  return std::move(types).value();
}

constexpr DataType kAllTypes[] = {DataType::kUInt8,   DataType::kInt8,    DataType::kInt16,    DataType::kInt32,
                                  DataType::kInt64,   DataType::kFloat16, DataType::kBFloat16, DataType::kFloat32,
                                  DataType::kFloat64, DataType::kBool};
constexpr ReduceOp kReduceOps[] = {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct};

TEST_CASE("MpiTypes maps every dtype to a datatype of the right size", "[mpi]") {
  auto types = MakeTypes();
  for (DataType dtype : kAllTypes) {
    int size = 0;
    REQUIRE(MPI_Type_size(types->Datatype(dtype), &size) == MPI_SUCCESS);
    CHECK(static_cast<size_t>(size) == DataTypeSize(dtype));
  }
  CHECK(types->Datatype(DataType::kFloat16) != types->Datatype(DataType::kBFloat16));
  CHECK(types->Datatype(DataType::kFloat32) == MPI_FLOAT);
  CHECK(types->Datatype(DataType::kFloat64) == MPI_DOUBLE);
  CHECK(types->Datatype(DataType::kInt64) == MPI_INT64_T);
  CHECK(types->Datatype(DataType::kBool) == MPI_C_BOOL);
}

TEST_CASE("MpiTypes maps ops", "[mpi]") {
  auto types = MakeTypes();
  CHECK(types->Op(ReduceOp::kAverage, DataType::kFloat32) == MPI_SUM);
  CHECK(types->Op(ReduceOp::kSum, DataType::kInt32) == MPI_SUM);
  CHECK(types->Op(ReduceOp::kMin, DataType::kFloat64) == MPI_MIN);
  CHECK(types->Op(ReduceOp::kMax, DataType::kUInt8) == MPI_MAX);
  CHECK(types->Op(ReduceOp::kProduct, DataType::kInt8) == MPI_PROD);
  CHECK(types->Op(ReduceOp::kSum, DataType::kBool) == MPI_LOR);
  CHECK(types->Op(ReduceOp::kMax, DataType::kBool) == MPI_LOR);
  CHECK(types->Op(ReduceOp::kMin, DataType::kBool) == MPI_LAND);
  CHECK(types->Op(ReduceOp::kProduct, DataType::kBool) == MPI_LAND);
  CHECK(types->Op(ReduceOp::kAverage, DataType::kFloat16) == types->Op(ReduceOp::kSum, DataType::kFloat16));
  for (ReduceOp op : kReduceOps) {
    const MPI_Op half_op = types->Op(op, DataType::kFloat16);
    CHECK(half_op == types->Op(op, DataType::kBFloat16));
    CHECK(half_op != types->Op(op, DataType::kFloat32));
    int commutative = 0;
    REQUIRE(MPI_Op_commutative(half_op, &commutative) == MPI_SUCCESS);
    CHECK(commutative == 1);
  }
}

TEST_CASE("only one MpiTypes lives at a time, and a new one can follow", "[mpi]") {
  auto first = MakeTypes();
  auto second = MpiTypes::Create();
  CHECK(second.status().code() == StatusCode::kPreconditionFailed);
  first.reset();
  auto third = MpiTypes::Create();
  INFO(third.status().ToString());
  REQUIRE(third.ok());
  // The new handles are the ones the op callbacks use.
  std::vector<uint16_t> in = {FloatToHalf(1.0f)};
  std::vector<uint16_t> inout = {FloatToHalf(2.0f)};
  REQUIRE(MPI_Reduce_local(in.data(), inout.data(), 1, third.value()->Datatype(DataType::kFloat16),
                           third.value()->Op(ReduceOp::kSum, DataType::kFloat16)) == MPI_SUCCESS);
  CHECK(HalfToFloat(inout[0]) == 3.0f);
}

// Runs MPI_Reduce_local(in, inout) with accord's mapping and checks every
// element against ReduceInto on the same data and against `expected`.
void CheckReduceLocal(const MpiTypes& types, DataType dtype, ReduceOp op, const std::vector<uint16_t>& in,
                      const std::vector<uint16_t>& inout, const std::vector<uint16_t>& expected) {
  float (*to_float)(uint16_t) = dtype == DataType::kFloat16 ? HalfToFloat : BFloat16ToFloat;
  std::vector<uint16_t> got = inout;
  REQUIRE(MPI_Reduce_local(in.data(), got.data(), static_cast<int>(in.size()), types.Datatype(dtype),
                           types.Op(op, dtype)) == MPI_SUCCESS);
  std::vector<uint16_t> reference = inout;
  ReduceInto(reference.data(), in.data(), static_cast<int64_t>(in.size()), dtype, op);
  for (size_t i = 0; i < in.size(); ++i) {
    if (got[i] != expected[i] || reference[i] != expected[i]) {
      FAIL_CHECK(DataTypeName(dtype) << " " << ReduceOpName(op) << ": index " << i << ": expected "
                                     << to_float(expected[i]) << ", got " << to_float(got[i]) << " from MPI and "
                                     << to_float(reference[i]) << " from ReduceInto");
    }
  }
}

std::vector<uint16_t> Encode(DataType dtype, const std::vector<float>& values) {
  std::vector<uint16_t> bits;
  for (float v : values) bits.push_back(dtype == DataType::kFloat16 ? FloatToHalf(v) : FloatToBFloat16(v));
  return bits;
}

TEST_CASE("float16 and bfloat16 user ops through MPI_Reduce_local", "[mpi]") {
  auto types = MakeTypes();
  for (DataType dtype : {DataType::kFloat16, DataType::kBFloat16}) {
    const auto enc = [dtype](const std::vector<float>& v) { return Encode(dtype, v); };
    const std::vector<uint16_t> in = enc({1.5f, -2.0f, 0.25f, 8.0f, -3.0f});
    const std::vector<uint16_t> inout = enc({2.0f, 3.0f, -0.5f, 0.125f, -3.0f});
    CheckReduceLocal(*types, dtype, ReduceOp::kSum, in, inout, enc({3.5f, 1.0f, -0.25f, 8.125f, -6.0f}));
    CheckReduceLocal(*types, dtype, ReduceOp::kAverage, in, inout, enc({3.5f, 1.0f, -0.25f, 8.125f, -6.0f}));
    CheckReduceLocal(*types, dtype, ReduceOp::kMin, in, inout, enc({1.5f, -2.0f, -0.5f, 0.125f, -3.0f}));
    CheckReduceLocal(*types, dtype, ReduceOp::kMax, in, inout, enc({2.0f, 3.0f, 0.25f, 8.0f, -3.0f}));
    CheckReduceLocal(*types, dtype, ReduceOp::kProduct, in, inout, enc({3.0f, -6.0f, -0.125f, 1.0f, 9.0f}));
  }
  // Rounding happens once, in float, with ties to even: float16 1 + 2^-11 -> 1,
  // 3 + 2^-10 -> 3; bfloat16 256 + 1 -> 256, 258 + 1 -> 260.
  const float e = std::ldexp(1.0f, -11);
  CheckReduceLocal(*types, DataType::kFloat16, ReduceOp::kSum, Encode(DataType::kFloat16, {e, 2 * e, 60000.0f}),
                   Encode(DataType::kFloat16, {1.0f, 3.0f, 60000.0f}), {FloatToHalf(1.0f), FloatToHalf(3.0f), 0x7C00});
  CheckReduceLocal(*types, DataType::kBFloat16, ReduceOp::kSum, Encode(DataType::kBFloat16, {1.0f, 1.0f}),
                   Encode(DataType::kBFloat16, {256.0f, 258.0f}), Encode(DataType::kBFloat16, {256.0f, 260.0f}));
}

TEST_CASE("float16 user op on a long buffer", "[mpi]") {
  auto types = MakeTypes();
  const int n = 100003;  // many 8-wide F16C blocks, and a tail
  std::vector<uint16_t> in(n), inout(n), expected(n);
  for (int i = 0; i < n; ++i) {
    in[i] = FloatToHalf(static_cast<float>(i % 101) - 50.0f);
    inout[i] = FloatToHalf(static_cast<float>(i % 37) * 0.5f);
    expected[i] = FloatToHalf(HalfToFloat(in[i]) + HalfToFloat(inout[i]));
  }
  CheckReduceLocal(*types, DataType::kFloat16, ReduceOp::kSum, in, inout, expected);
}

template <typename T>
std::vector<unsigned char> Bytes(const std::vector<double>& values) {
  std::vector<unsigned char> bytes(values.size() * sizeof(T));
  for (size_t i = 0; i < values.size(); ++i) {
    const T value = static_cast<T>(values[i]);
    std::memcpy(&bytes[i * sizeof(T)], &value, sizeof(T));
  }
  return bytes;
}

// `values` as a buffer of `dtype` (not float16/bfloat16).
std::vector<unsigned char> Bytes(DataType dtype, const std::vector<double>& values) {
  switch (dtype) {
    case DataType::kUInt8: return Bytes<uint8_t>(values);
    case DataType::kInt8: return Bytes<int8_t>(values);
    case DataType::kInt16: return Bytes<int16_t>(values);
    case DataType::kInt32: return Bytes<int32_t>(values);
    case DataType::kInt64: return Bytes<int64_t>(values);
    case DataType::kFloat32: return Bytes<float>(values);
    case DataType::kFloat64: return Bytes<double>(values);
    case DataType::kBool: return Bytes<bool>(values);
    default: return {};
  }
}

// Every other dtype uses MPI's built-in ops; they must agree with ReduceInto
// (on values that neither overflow nor involve NaN).
TEST_CASE("built-in MPI ops agree with ReduceInto for every other dtype", "[mpi]") {
  auto types = MakeTypes();
  const std::vector<double> a = {1, 5, 0, 9, 3, 1, 0, 1, -2, -7};
  const std::vector<double> b = {2, 3, 7, 9, 0, 1, 0, 0, 4, -1};
  for (DataType dtype : kAllTypes) {
    if (dtype == DataType::kFloat16 || dtype == DataType::kBFloat16) continue;
    const size_t size = DataTypeSize(dtype);
    // Negative values only where the type has them.
    const int64_t n = (dtype == DataType::kUInt8 || dtype == DataType::kBool) ? 8 : 10;
    const std::vector<double> a_n(a.begin(), a.begin() + n);
    const std::vector<double> b_n(b.begin(), b.begin() + n);
    const std::vector<unsigned char> in = Bytes(dtype, a_n);
    const std::vector<unsigned char> inout = Bytes(dtype, b_n);
    for (ReduceOp op : kReduceOps) {
      std::vector<unsigned char> got = inout;
      std::vector<unsigned char> reference = inout;
      REQUIRE(MPI_Reduce_local(in.data(), got.data(), static_cast<int>(n), types->Datatype(dtype),
                               types->Op(op, dtype)) == MPI_SUCCESS);
      ReduceInto(reference.data(), in.data(), n, dtype, op);
      for (int64_t i = 0; i < n; ++i) {
        if (std::memcmp(&got[i * size], &reference[i * size], size) != 0) {
          FAIL_CHECK(DataTypeName(dtype) << " " << ReduceOpName(op) << ": index " << i
                                         << ": MPI and ReduceInto differ on inputs " << a[i] << ", " << b[i]);
        }
      }
    }
  }
}

TEST_CASE("ACCORD_MPI_CHECK turns MPI errors into kInternal statuses", "[mpi]") {
  CHECK(ACCORD_MPI_CHECK(MPI_SUCCESS).ok());
  const Status status = MpiCheck(MPI_ERR_COUNT, "MPI_Send(buffer)", "some/file.cc", 42);
  CHECK(status.code() == StatusCode::kInternal);
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  REQUIRE(MPI_Error_string(MPI_ERR_COUNT, text, &length) == MPI_SUCCESS);
  const std::string message = status.message();
  INFO(message);
  CHECK(message.find("MPI_Send(buffer)") != std::string::npos);
  CHECK(message.find(std::string(text, length)) != std::string::npos);
  CHECK(message.find("some/file.cc:42") != std::string::npos);
  const Status from_macro = ACCORD_MPI_CHECK(MPI_ERR_ARG);
  CHECK(from_macro.code() == StatusCode::kInternal);
  CHECK(from_macro.message().find("mpi_types_test.cc:") != std::string::npos);
}

}  // namespace
}  // namespace accord
