// Tests for the DLPack checks (dlpack_view.h) on DLTensors built by hand: what
// is accepted and how it is viewed, and every refusal, including the ones
// that tests/fuzz/dlpack_view_fuzz.cc finds within two minutes on the checks
// as they were before (negative and overflowing dimensions, device type codes
// past the header's enumerators, a null data pointer with elements or an
// offset, offsets that wrap around the address space).
#include "dlpack_view.h"

#include <catch2/catch.hpp>

#include <cstring>
#include <limits>
#include <vector>

namespace accord::python {
namespace {

// A DLTensor over `shape` (and `strides`, if any), which it points into.
struct Tensor {
  explicit Tensor(std::vector<int64_t> dims, std::vector<int64_t> strides_in = {})
      : shape(std::move(dims)), strides(std::move(strides_in)) {
    t.data = storage;
    t.device = {kDLCPU, 0};
    t.ndim = static_cast<int32_t>(shape.size());
    t.dtype = {kDLFloat, 32, 1};
    t.shape = shape.data();
    t.strides = strides.empty() ? nullptr : strides.data();
  }
  Result<TensorView> View(const std::optional<std::string>& dtype_override = std::nullopt) const {
    return ViewOfDLTensor(t, "input", dtype_override);
  }
  std::string Error(const std::optional<std::string>& dtype_override = std::nullopt) const {
    Result<TensorView> view = View(dtype_override);
    REQUIRE_FALSE(view.ok());
    CHECK(view.status().code() == StatusCode::kInvalidArgument);
    return view.status().message();
  }

  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
  char storage[64] = {};
  DLTensor t{};
};

constexpr int64_t kHuge = int64_t{1} << 40;

TEST_CASE("dlpack: a row-major CPU tensor is viewed as it is", "[dlpack]") {
  Tensor x({4, 3});
  x.t.byte_offset = 8;
  Result<TensorView> view = x.View();
  REQUIRE(view.ok());
  CHECK(view->data == x.storage + 8);
  CHECK(view->dtype == DataType::kFloat32);
  CHECK(view->shape == Shape{4, 3});
  CHECK(view->device == Device::CPU());
}

TEST_CASE("dlpack: CUDA, managed and page-locked memory map to accord devices", "[dlpack]") {
  Tensor x({2});
  x.t.device = {kDLCUDA, 3};
  REQUIRE(x.View().ok());
  CHECK(x.View()->device == Device::CUDA(3));
  x.t.device = {kDLCUDAManaged, 1};
  CHECK(x.View()->device == Device::CUDA(1));
  x.t.device = {kDLCUDAHost, 0};
  CHECK(x.View()->device == Device::CPU());
  x.t.device = {kDLVulkan, 0};
  CHECK_THAT(x.Error(), Catch::Contains("input is on vulkan:0"));
}

// A producer built against a newer DLPack (kDLHexagon = 16, kDLMAIA = 17)
// stores a code that is out of range for the 0.6 header's enum: it must be
// refused as an unknown device, without loading it as that enum.
TEST_CASE("dlpack: device type codes past the header's enumerators are unknown devices", "[dlpack]") {
  for (int32_t code : {0, 16, 17, 1000, -1}) {
    Tensor x({2});
    std::memcpy(&x.t.device.device_type, &code, sizeof(code));
    INFO("device type code " << code);
    CHECK_THAT(x.Error(), Catch::Contains("input is on an unknown device"));
  }
}

TEST_CASE("dlpack: rows may be strided only where it does not matter", "[dlpack]") {
  CHECK(Tensor({4, 1, 3}, {3, 99, 1}).View().ok());  // a size-1 dim carries any stride
  CHECK(Tensor({0, 5}, {7, 3}).View().ok());         // no elements, no layout
  CHECK_THAT(Tensor({4, 3}, {1, 4}).Error(), Catch::Contains("is not contiguous (shape [4, 3], strides [1, 4])"));
}

TEST_CASE("dlpack: a malformed shape is refused", "[dlpack]") {
  Tensor x({2, 2});
  x.t.ndim = -1;
  CHECK_THAT(x.Error(), Catch::Contains("malformed DLPack shape"));
  x.t.ndim = 2;
  x.t.shape = nullptr;
  CHECK_THAT(x.Error(), Catch::Contains("malformed DLPack shape"));
  Tensor scalar({});
  scalar.t.shape = nullptr;  // allowed for a 0-d tensor
  REQUIRE(scalar.View().ok());
  CHECK(scalar.View()->shape.empty());
}

// Negative dimensions used to pass the import (the core refused them later,
// after IsRowMajor had multiplied them).
TEST_CASE("dlpack: a negative dimension is refused", "[dlpack]") {
  CHECK_THAT(Tensor({2, -3}).Error(), Catch::Contains("input has a negative dimension (shape [2, -3])"));
  CHECK_THAT(Tensor({-1, 4}, {4, 1}).Error(), Catch::Contains("negative dimension"));
}

// Dims whose product overflowed an int64: undefined behaviour in IsRowMajor,
// and later in NumElements and every size computed from the view.
TEST_CASE("dlpack: dimensions whose product overflows are refused", "[dlpack]") {
  CHECK_THAT(Tensor({kHuge, kHuge}).Error(), Catch::Contains("number of elements does not fit in 64 bits"));
  CHECK_THAT(Tensor({kHuge, kHuge}, {kHuge, 1}).Error(), Catch::Contains("does not fit in 64 bits"));
  // No elements, but the core still multiplies the other dims.
  CHECK_THAT(Tensor({0, kHuge, kHuge}).Error(), Catch::Contains("does not fit in 64 bits"));
  // The elements fit, their bytes do not.
  CHECK_THAT(Tensor({int64_t{1} << 62}).Error(), Catch::Contains("size in bytes does not fit in 64 bits"));
  Tensor bytes_fit({int64_t{1} << 60});
  bytes_fit.t.dtype = {kDLUInt, 8, 1};
  CHECK(bytes_fit.View().ok());
}

// A null data pointer plus a byte offset was pointer arithmetic on null (and
// a non-null result that the core's own null check let through), and an
// offset past the end of the address space wrapped around.
TEST_CASE("dlpack: data pointer and byte offset", "[dlpack]") {
  Tensor x({3});
  x.t.data = nullptr;
  CHECK_THAT(x.Error(), Catch::Contains("input has no data pointer but 3 elements"));
  Tensor empty({0});
  empty.t.data = nullptr;
  REQUIRE(empty.View().ok());
  CHECK(empty.View()->data == nullptr);
  empty.t.byte_offset = 16;
  CHECK_THAT(empty.Error(), Catch::Contains("no data pointer but 0 elements and a byte offset of 16"));
  Tensor wraps({1});
  wraps.t.byte_offset = std::numeric_limits<uint64_t>::max();
  CHECK_THAT(wraps.Error(), Catch::Contains("runs past the end of the address space"));
}

TEST_CASE("dlpack: dtypes and overrides", "[dlpack]") {
  Tensor x({4});
  x.t.dtype = {kDLFloat, 32, 4};
  CHECK_THAT(x.Error(), Catch::Contains("has dtype float32x4, which accord does not support"));
  x.t.dtype = {kDLComplex, 64, 1};
  CHECK_THAT(x.Error(), Catch::Contains("has dtype complex64"));
  x.t.dtype = {kDLUInt, 8, 1};
  REQUIRE(x.View("bool").ok());
  CHECK(x.View("bool")->dtype == DataType::kBool);
  CHECK_THAT(x.Error("float32"),
             Catch::Contains("dtype_override 'float32' has 4-byte elements but the tensor is uint8"));
  CHECK_THAT(x.Error("float128"), Catch::Contains("unknown dtype 'float128'"));
  x.t.dtype = {kDLBoolCode, 8, 1};
  CHECK(x.View()->dtype == DataType::kBool);
}

TEST_CASE("dlpack: dtype names", "[dlpack]") {
  for (int i = 0; i < kNumDataTypes; ++i) {
    const auto dtype = static_cast<DataType>(i);
    Result<DataType> parsed = DataTypeFromName(DataTypeName(dtype));
    REQUIRE(parsed.ok());
    CHECK(*parsed == dtype);
  }
  CHECK(DataTypeFromName("Float32").status().code() == StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace accord::python
