// The head of a dlpack_view_fuzz input, shared with make_corpus.cc so that
// the seeds it writes are read the same way. Host-endian, packed.
#pragma once

#include <cstdint>

namespace accord::fuzz {

enum DLPackInputFlags : uint8_t {
  kStrides = 1,    // strides follow the dims
  kNullData = 2,   // the tensor has no data pointer
  kNullShape = 4,  // a 0-d tensor with a null shape (which DLPack allows)
};

// dtype_override: an accord dtype id (0 .. kNumDataTypes-1), this value for
// a name accord does not know, anything else for none.
inline constexpr uint8_t kUnknownOverride = 200;

#pragma pack(push, 1)
struct DLPackInput {
  int32_t ndim = 0;
  uint8_t flags = 0;
  int32_t device_type = 1;  // kDLCPU
  int32_t device_id = 0;
  uint8_t dtype_code = 2;  // kDLFloat
  uint8_t dtype_bits = 32;
  uint16_t dtype_lanes = 1;
  uint64_t byte_offset = 0;
  uint8_t dtype_override = 255;
};
#pragma pack(pop)

}  // namespace accord::fuzz
