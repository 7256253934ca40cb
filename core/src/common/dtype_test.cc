// Tests of dtype.cc: sizes, names and descriptions of data types, devices,
// shapes and reduce ops.
#include <catch2/catch.hpp>

#include <string>

#include "accord/accord.h"
#include "accord/tensor.h"

namespace accord {
namespace {

TEST_CASE("data type, device, shape and op descriptions", "[dtype]") {
  const struct {
    DataType dtype;
    size_t size;
    const char* name;
    bool floating;
  } kExpected[] = {{DataType::kUInt8, 1, "uint8", false},      {DataType::kInt8, 1, "int8", false},
                   {DataType::kInt16, 2, "int16", false},      {DataType::kInt32, 4, "int32", false},
                   {DataType::kInt64, 8, "int64", false},      {DataType::kFloat16, 2, "float16", true},
                   {DataType::kBFloat16, 2, "bfloat16", true}, {DataType::kFloat32, 4, "float32", true},
                   {DataType::kFloat64, 8, "float64", true},   {DataType::kBool, 1, "bool", false}};
  for (const auto& e : kExpected) {
    INFO("dtype " << e.name);
    CHECK(DataTypeSize(e.dtype) == e.size);
    CHECK(std::string(DataTypeName(e.dtype)) == e.name);
    CHECK(IsFloatingPoint(e.dtype) == e.floating);
  }
  // A byte off the wire that is no DataType: size 0, so callers can reject it.
  CHECK(DataTypeSize(static_cast<DataType>(200)) == 0);
  CHECK(std::string(DataTypeName(static_cast<DataType>(200))) == "unknown");

  CHECK(Device::CPU().ToString() == "cpu");
  CHECK(Device::CUDA(3).ToString() == "cuda:3");
  CHECK(NumElements({}) == 1);
  CHECK(NumElements({2, 3, 4}) == 24);
  CHECK(NumElements({5, 0}) == 0);
  CHECK(ShapeToString({}) == "[]");
  CHECK(ShapeToString({2, 3}) == "[2, 3]");
  CHECK(std::string(ReduceOpName(ReduceOp::kAverage)) == "Average");
  CHECK(std::string(ReduceOpName(ReduceOp::kSum)) == "Sum");
  CHECK(std::string(ReduceOpName(ReduceOp::kMin)) == "Min");
  CHECK(std::string(ReduceOpName(ReduceOp::kMax)) == "Max");
  CHECK(std::string(ReduceOpName(ReduceOp::kProduct)) == "Product");
}

}  // namespace
}  // namespace accord
