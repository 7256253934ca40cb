// How accord's collectives map onto NCCL's calls: data types and reduction
// ops, the per-rank blocks of uneven layouts, and the version string.
//
// Pure functions over NCCL's types (no NCCL calls, no GPU), so the unit
// tests check every decision on any machine. Any thread.
//
// The choices, and why:
//   - Reductions: NCCL has no 16-bit integers, so int16 cannot be reduced
//     (the caller hands it to its fallback). bool travels as uint8 (0 or 1),
//     where Max is logical OR and Min logical AND: Sum and Max become Max,
//     Min and Product become Min, like the CPU path's MPI_LOR / MPI_LAND.
//   - Data movement (allgather, broadcast, alltoall) never looks at values,
//     so every dtype, int16 included, moves as bytes (ncclUint8).
//   - NCCL 2.28 has no allgatherv or reduce-scatter-v: equal counts use
//     ncclAllGather / ncclReduceScatter; uneven ones become one broadcast or
//     reduce per rank's block inside a group, skipping empty blocks. The
//     decision depends only on the counts, which every rank agrees on.
#pragma once

#include <nccl.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "accord/accord.h"
#include "accord/status.h"
#include "accord/tensor.h"

namespace accord {

struct NcclReduction {
  ncclDataType_t type;
  ncclRedOp_t op;
};

// The NCCL type and op that reduce `dtype` with `op`: kUnimplemented for a
// dtype NCCL cannot reduce (int16), naming it; kInvalidArgument for an
// integer Average (the ops layer reduces it as Sum and divides, rounding
// toward zero). A floating Average is ncclAvg (NCCL 2.10 and later).
Result<NcclReduction> NcclReductionFor(DataType dtype, ReduceOp op);

// ncclAvg's first version, in NCCL's version code (NCCL_VERSION(2, 10, 0)).
inline constexpr int kNcclAvgVersionCode = 21000;

// Whether an Average of `dtype` runs as ncclAvg with the NCCL of version
// `nccl_version_code` (ncclGetVersion): floating types, NCCL 2.10 and
// later. ncclAvg multiplies each rank's values by 1/size (rounded to the
// type) before it sums them, which is how Horovod's GPU path averages: a
// float16 Average then gives Horovod's bits (docs/decisions.md).
bool NcclAverages(DataType dtype, int nccl_version_code);

// `count` elements of `dtype` as the number of ncclUint8 elements that move
// them.
size_t NcclBytes(int64_t count, DataType dtype);

// Checks that a per-rank count vector has one non-negative entry per rank
// of a set of `size` (kInvalidArgument naming `what` otherwise).
Status CheckCounts(const std::vector<int64_t>& counts, int size, const char* what);

// The count every rank has, or nullopt when they differ or there are none
// (then the grouped, per-block form is used).
std::optional<int64_t> EqualCount(const std::vector<int64_t>& counts);

// Rank `rank`'s block of a layout where the blocks follow each other in
// rank order: it starts `offset` elements in and holds `count` elements.
struct NcclBlock {
  int rank;
  int64_t offset;
  int64_t count;
};
// The non-empty blocks of `counts`, in rank order.
std::vector<NcclBlock> NonEmptyBlocks(const std::vector<int64_t>& counts);

// "NCCL 2.28.9" for a version code from ncclGetVersion or NCCL_VERSION_CODE
// (major*10000 + minor*100 + patch since 2.9, major*1000 + minor*100 +
// patch before).
std::string NcclVersionString(int code);

}  // namespace accord
