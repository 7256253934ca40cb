// The small free functions declared in accord/tensor.h and accord/accord.h
// that describe data types, devices, shapes and reduce ops.
#include <sstream>

#include "accord/accord.h"
#include "accord/tensor.h"
#include "common/dtype_size.h"

namespace accord {

size_t DataTypeSize(DataType dtype) { return ElementBytes(dtype); }

const char* DataTypeName(DataType dtype) {
  switch (dtype) {
    case DataType::kUInt8: return "uint8";
    case DataType::kInt8: return "int8";
    case DataType::kInt16: return "int16";
    case DataType::kInt32: return "int32";
    case DataType::kInt64: return "int64";
    case DataType::kFloat16: return "float16";
    case DataType::kBFloat16: return "bfloat16";
    case DataType::kFloat32: return "float32";
    case DataType::kFloat64: return "float64";
    case DataType::kBool: return "bool";
  }
  return "unknown";
}

bool IsFloatingPoint(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat16:
    case DataType::kBFloat16:
    case DataType::kFloat32:
    case DataType::kFloat64: return true;
    default: return false;
  }
}

std::string Device::ToString() const {
  if (type == DeviceType::kCUDA) return "cuda:" + std::to_string(ordinal);
  return "cpu";
}

int64_t NumElements(const Shape& shape) {
  int64_t count = 1;
  for (int64_t dim : shape) count *= dim;
  return count;
}

std::string ShapeToString(const Shape& shape) {
  std::ostringstream out;
  out << '[';
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) out << ", ";
    out << shape[i];
  }
  out << ']';
  return out.str();
}

const char* ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kAverage: return "Average";
    case ReduceOp::kSum: return "Sum";
    case ReduceOp::kMin: return "Min";
    case ReduceOp::kMax: return "Max";
    case ReduceOp::kProduct: return "Product";
    case ReduceOp::kAdasum: return "Adasum";
  }
  return "Unknown";
}

}  // namespace accord
