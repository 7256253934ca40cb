// The size in bytes of one element of each accord dtype, for host and GPU
// code alike (accord::DataTypeSize in accord/tensor.h returns this; the
// pack/unpack kernel, device/copy_plan.h, calls it on the GPU).
#pragma once

#include <cstddef>

#include "accord/tensor.h"
#include "common/nvcc_annotations.h"

namespace accord {

// 0 for a value that is not a DataType (callers validate wire values first).
ACCORD_HOST_DEVICE inline size_t ElementBytes(DataType dtype) {
  switch (dtype) {
    case DataType::kUInt8:
    case DataType::kInt8:
    case DataType::kBool: return 1;
    case DataType::kInt16:
    case DataType::kFloat16:
    case DataType::kBFloat16: return 2;
    case DataType::kInt32:
    case DataType::kFloat32: return 4;
    case DataType::kInt64:
    case DataType::kFloat64: return 8;
  }
  return 0;
}

}  // namespace accord
