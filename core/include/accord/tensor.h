// The framework-neutral view of a tensor that the core works on.
//
// A TensorView does not own memory: the adapter (Python, LibTorch, a test)
// keeps the storage alive until the operation's Handle has completed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "accord/status.h"

namespace accord {

// The numeric values match DLPack-independent wire ids; never reorder.
enum class DataType : uint8_t {
  kUInt8 = 0,
  kInt8 = 1,
  kInt16 = 2,
  kInt32 = 3,
  kInt64 = 4,
  kFloat16 = 5,
  kBFloat16 = 6,
  kFloat32 = 7,
  kFloat64 = 8,
  kBool = 9,
};
inline constexpr int kNumDataTypes = 10;

// Size of one element in bytes (bool is one byte).
size_t DataTypeSize(DataType dtype);
// "float32", "int64", ...
const char* DataTypeName(DataType dtype);
bool IsFloatingPoint(DataType dtype);

enum class DeviceType : uint8_t { kCPU = 0, kCUDA = 1 };

struct Device {
  DeviceType type = DeviceType::kCPU;
  int ordinal = -1;  // CUDA device index; -1 for CPU

  static Device CPU() { return {}; }
  static Device CUDA(int ordinal) { return {DeviceType::kCUDA, ordinal}; }
  bool operator==(const Device& o) const { return type == o.type && ordinal == o.ordinal; }
  bool operator!=(const Device& o) const { return !(*this == o); }
  std::string ToString() const;  // "cpu" or "cuda:N"
};

using Shape = std::vector<int64_t>;
int64_t NumElements(const Shape& shape);
std::string ShapeToString(const Shape& shape);  // "[2, 3]"

// A dense, contiguous (row-major) tensor in memory owned by someone else.
struct TensorView {
  void* data = nullptr;
  DataType dtype = DataType::kFloat32;
  Shape shape;
  Device device;

  int64_t num_elements() const { return NumElements(shape); }
  size_t size_bytes() const { return static_cast<size_t>(num_elements()) * DataTypeSize(dtype); }
};

// Allocates an output whose shape is known only after negotiation (allgather,
// alltoall, reducescatter). Called on the coordinator thread; must not block on
// accord. The returned view must stay valid until the Handle completes.
using Allocator = std::function<Result<TensorView>(DataType dtype, const Shape& shape, Device device)>;

// An Allocator backed by plain heap memory, owned by the returned keep-alive
// object. Used when the caller passes no allocator (C++ users, tests).
Allocator HeapAllocator(std::shared_ptr<std::vector<std::shared_ptr<void>>> keep_alive);

}  // namespace accord
