// Argument checking for the public API, all in one place. Each function
// returns kInvalidArgument (or kUnimplemented for a device this build cannot
// use) with a message that names the tensor and the problem. Pure functions.
#pragma once

#include <string>
#include <vector>

#include "accord/accord.h"

namespace accord {

Status CheckTensor(const TensorView& t, const std::string& name);
Status CheckReduction(const TensorView& t, ReduceOp op, double prescale, double postscale, const std::string& name);
Status CheckSameLayout(const TensorView& input, const TensorView& output, const std::string& name);
Status CheckAtLeast1d(const TensorView& t, const std::string& name, const char* op);
Status CheckSplits(const TensorView& t, const std::vector<int64_t>& splits, int set_size, const std::string& name);
Status CheckProcessSetRanks(const std::vector<int>& ranks, int world_size);

}  // namespace accord
