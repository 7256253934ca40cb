#include "backends/nccl/nccl_mapping.h"

#include <string>

namespace accord {

namespace {

// The NCCL type that reduces `dtype`, or nullopt when NCCL has none.
std::optional<ncclDataType_t> ReduceType(DataType dtype) {
  switch (dtype) {
    case DataType::kUInt8: return ncclUint8;
    case DataType::kInt8: return ncclInt8;
    case DataType::kInt16: return std::nullopt;
    case DataType::kInt32: return ncclInt32;
    case DataType::kInt64: return ncclInt64;
    case DataType::kFloat16: return ncclFloat16;
    case DataType::kBFloat16: return ncclBfloat16;
    case DataType::kFloat32: return ncclFloat32;
    case DataType::kFloat64: return ncclFloat64;
    case DataType::kBool: return ncclUint8;
  }
  return std::nullopt;
}

}  // namespace

bool NcclAverages(DataType dtype, int nccl_version_code) {
  return IsFloatingPoint(dtype) && nccl_version_code >= kNcclAvgVersionCode;
}

Result<NcclReduction> NcclReductionFor(DataType dtype, ReduceOp op) {
  if (op == ReduceOp::kAverage && !IsFloatingPoint(dtype)) {
    return Status::InvalidArgument(
        "NCCL reduction: an integer Average reaches the backend only as Sum (the ops layer divides afterwards)");
  }
  const std::optional<ncclDataType_t> type = ReduceType(dtype);
  if (!type) {
    return Status::Unimplemented(std::string("NCCL cannot reduce ") + DataTypeName(dtype) +
                                 " (it has no 16-bit integer type)");
  }
  if (dtype == DataType::kBool) {
    const bool any = op == ReduceOp::kSum || op == ReduceOp::kMax;
    return NcclReduction{*type, any ? ncclMax : ncclMin};
  }
  switch (op) {
    case ReduceOp::kSum: return NcclReduction{*type, ncclSum};
    case ReduceOp::kMin: return NcclReduction{*type, ncclMin};
    case ReduceOp::kMax: return NcclReduction{*type, ncclMax};
    case ReduceOp::kProduct: return NcclReduction{*type, ncclProd};
    case ReduceOp::kAverage: return NcclReduction{*type, ncclAvg};
    case ReduceOp::kAdasum: return Status::Unimplemented("NCCL reduction: Adasum runs on CPU tensors only");
  }
  return Status::InvalidArgument("NCCL reduction: unknown reduce op " + std::to_string(static_cast<int>(op)));
}

size_t NcclBytes(int64_t count, DataType dtype) { return static_cast<size_t>(count) * DataTypeSize(dtype); }

Status CheckCounts(const std::vector<int64_t>& counts, int size, const char* what) {
  if (counts.size() != static_cast<size_t>(size)) {
    return Status::InvalidArgument(std::string(what) + ": " + std::to_string(counts.size()) + " counts for a set of " +
                                   std::to_string(size) + " ranks");
  }
  for (size_t r = 0; r < counts.size(); ++r) {
    if (counts[r] < 0) {
      return Status::InvalidArgument(std::string(what) + ": negative count " + std::to_string(counts[r]) +
                                     " for rank " + std::to_string(r));
    }
  }
  return Status::OK();
}

std::optional<int64_t> EqualCount(const std::vector<int64_t>& counts) {
  if (counts.empty()) return std::nullopt;
  for (int64_t count : counts) {
    if (count != counts.front()) return std::nullopt;
  }
  return counts.front();
}

std::vector<NcclBlock> NonEmptyBlocks(const std::vector<int64_t>& counts) {
  std::vector<NcclBlock> blocks;
  int64_t offset = 0;
  for (size_t r = 0; r < counts.size(); ++r) {
    if (counts[r] > 0) blocks.push_back({static_cast<int>(r), offset, counts[r]});
    offset += counts[r];
  }
  return blocks;
}

std::string NcclVersionString(int code) {
  // NCCL_VERSION(X,Y,Z) switched encodings after 2.8, when minor versions
  // reached two digits.
  const int major = code >= 10000 ? code / 10000 : code / 1000;
  const int minor = code >= 10000 ? code % 10000 / 100 : code % 1000 / 100;
  const int patch = code % 100;
  return "NCCL " + std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
}

}  // namespace accord
