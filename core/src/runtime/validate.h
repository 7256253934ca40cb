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
// Adasum's own rules (ops/adasum.h): a floating dtype (else
// kInvalidArgument), a CPU tensor and a process set of 2^k ranks (else
// kUnimplemented, as Horovod raises NotImplementedError for both).
Status CheckAdasum(const TensorView& t, int set_size, const std::string& name);
Status CheckSameLayout(const TensorView& input, const TensorView& output, const std::string& name);
Status CheckAtLeast1d(const TensorView& t, const std::string& name, const char* op);
// An allreduce writes its outputs window by window while later windows still
// read inputs (ops/staging.h): an output may be its own input (in place) but
// must not overlap any other input or output of the call. `names[i]` names
// tensor i.
Status CheckOutputsApart(const TensorView* inputs, const TensorView* outputs, size_t count,
                         const std::vector<const std::string*>& names);
// The same for one tensor: the output is the input or apart from it.
Status CheckOutputApart(const TensorView& input, const TensorView& output, const std::string& name);
Status CheckSplits(const TensorView& t, const std::vector<int64_t>& splits, int set_size, const std::string& name);
Status CheckProcessSetRanks(const std::vector<int>& ranks, int world_size);

}  // namespace accord
