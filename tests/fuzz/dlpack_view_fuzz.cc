// Fuzzes the checks that turn a DLPack producer's DLTensor into accord's
// TensorView (bindings/src/dlpack_view.h), on DLTensors built from the input
// as a producer could fill them in.
//
// Input layout (little-endian, packed; see dlpack_view_input.h):
//   int32 ndim, uint8 flags, int32 device type, int32 device id, uint8 dtype
//   code, uint8 dtype bits, uint16 lanes, uint64 byte offset, uint8 dtype
//   override, then ndim int64 dims and, with strides, ndim int64 strides.
// The DLPack contract says shape (and strides) hold ndim entries; where the
// input is too short for them the tensor gets no shape (or no strides).
// Properties: a view or an InvalidArgument Status, never a crash or
// undefined behaviour; an accepted view has the tensor's ndim and dims, none
// negative, whose product (zeros left out) in bytes fits in an int64, a supported dtype of the
// producer's element size, and data = the producer's data + byte offset.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "dlpack_view.h"
#include "dlpack_view_input.h"
#include "fuzz_check.h"

namespace {

// Never dereferenced: the checks only do arithmetic on the data pointer.
alignas(64) char g_storage[64];

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace accord;
  using namespace accord::fuzz;
  DLPackInput in;
  if (size < sizeof(in)) return 0;
  std::memcpy(&in, data, sizeof(in));
  const size_t rest = size - sizeof(in);
  const uint8_t* extra = data + sizeof(in);

  DLTensor t{};
  t.data = (in.flags & kNullData) ? nullptr : g_storage;
  // Any int32 a producer stores, including codes past the enumerators of
  // the header (newer DLPack versions have them).
  std::memcpy(&t.device.device_type, &in.device_type, sizeof(in.device_type));
  t.device.device_id = in.device_id;
  t.ndim = in.ndim;
  t.dtype.code = in.dtype_code;
  t.dtype.bits = in.dtype_bits;
  t.dtype.lanes = in.dtype_lanes;
  t.byte_offset = in.byte_offset;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
  if (in.ndim > 0 && static_cast<size_t>(in.ndim) <= rest / sizeof(int64_t)) {
    shape.resize(in.ndim);
    std::memcpy(shape.data(), extra, shape.size() * sizeof(int64_t));
    t.shape = shape.data();
    if ((in.flags & kStrides) && static_cast<size_t>(in.ndim) <= rest / sizeof(int64_t) / 2) {
      strides.resize(in.ndim);
      std::memcpy(strides.data(), extra + shape.size() * sizeof(int64_t), strides.size() * sizeof(int64_t));
      t.strides = strides.data();
    }
  } else if (in.ndim == 0) {
    t.shape = (in.flags & kNullShape) ? nullptr : shape.data();
  }
  std::optional<std::string> dtype_override;
  if (in.dtype_override < kNumDataTypes) {
    dtype_override = DataTypeName(static_cast<DataType>(in.dtype_override));
  } else if (in.dtype_override == kUnknownOverride) {
    dtype_override = "float128";
  }

  Result<TensorView> view = python::ViewOfDLTensor(t, "input", dtype_override);
  if (!view.ok()) {
    FUZZ_CHECK(view.status().code() == StatusCode::kInvalidArgument, "a refusal is InvalidArgument");
    FUZZ_CHECK(view.status().message().rfind("input", 0) == 0 || view.status().message().rfind("unknown dtype", 0) == 0,
               "a refusal names the tensor (or the unknown dtype)");
    return 0;
  }
  FUZZ_CHECK(t.ndim >= 0 && view->shape.size() == static_cast<size_t>(t.ndim), "the view has the tensor's ndim");
  int64_t bytes = static_cast<int64_t>(DataTypeSize(view->dtype));
  for (int i = 0; i < t.ndim; ++i) {
    FUZZ_CHECK(view->shape[i] == t.shape[i], "the view has the tensor's dims");
    FUZZ_CHECK(view->shape[i] >= 0, "no negative dimension");
    if (view->shape[i] == 0) continue;
    FUZZ_CHECK(!__builtin_mul_overflow(bytes, view->shape[i], &bytes),
               "the byte size of the non-zero dims fits in an int64");
  }
  FUZZ_CHECK(static_cast<int>(view->dtype) < kNumDataTypes, "a supported dtype");
  FUZZ_CHECK(t.dtype.lanes == 1 && DataTypeSize(view->dtype) * 8 == t.dtype.bits, "the producer's element size");
  FUZZ_CHECK(reinterpret_cast<uintptr_t>(view->data) == reinterpret_cast<uintptr_t>(t.data) + t.byte_offset,
             "data is the producer's data plus the byte offset");
  FUZZ_CHECK(view->data != nullptr || view->num_elements() == 0, "a tensor with elements has data");
  FUZZ_CHECK(view->device.type ==
                 (in.device_type == kDLCUDA || in.device_type == kDLCUDAManaged ? DeviceType::kCUDA : DeviceType::kCPU),
             "the device follows the producer's device type");
  return 0;
}
