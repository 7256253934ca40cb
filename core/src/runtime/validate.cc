#include "runtime/validate.h"

#include <cmath>

namespace accord {

Status CheckTensor(const TensorView& t, const std::string& name) {
  for (int64_t d : t.shape) {
    if (d < 0) return Status::InvalidArgument("tensor '" + name + "' has a negative dimension: " + ShapeToString(t.shape));
  }
  if (static_cast<int>(t.dtype) >= kNumDataTypes) {
    return Status::InvalidArgument("tensor '" + name + "' has an unknown dtype id " +
                                   std::to_string(static_cast<int>(t.dtype)));
  }
  if (!t.data && t.num_elements() > 0) {
    return Status::InvalidArgument("tensor '" + name + "' has no data pointer but " +
                                   std::to_string(t.num_elements()) + " elements");
  }
  if (t.device.type == DeviceType::kCUDA) {
    return Status::Unimplemented("tensor '" + name + "' is on " + t.device.ToString() +
                                 ", but this build of accord runs collectives on CPU tensors only");
  }
  return Status::OK();
}

Status CheckReduction(const TensorView& t, ReduceOp op, double prescale, double postscale, const std::string& name) {
  if (static_cast<int>(op) > static_cast<int>(ReduceOp::kProduct)) {
    return Status::InvalidArgument("tensor '" + name + "': unknown reduce op id " + std::to_string(static_cast<int>(op)));
  }
  if (!std::isfinite(prescale) || !std::isfinite(postscale)) {
    return Status::InvalidArgument("tensor '" + name + "': scale factors must be finite");
  }
  if (t.dtype == DataType::kBool && (op == ReduceOp::kAverage || prescale != 1.0 || postscale != 1.0)) {
    return Status::InvalidArgument("tensor '" + name +
                                   "' is bool: Average and scale factors are not defined for bool (use Sum, Min, "
                                   "Max or Product)");
  }
  return Status::OK();
}

Status CheckSameLayout(const TensorView& input, const TensorView& output, const std::string& name) {
  if (input.dtype != output.dtype || input.shape != output.shape || input.device != output.device) {
    return Status::InvalidArgument("tensor '" + name + "': the output (" + DataTypeName(output.dtype) + " " +
                                   ShapeToString(output.shape) + " on " + output.device.ToString() +
                                   ") must match the input (" + DataTypeName(input.dtype) + " " +
                                   ShapeToString(input.shape) + " on " + input.device.ToString() + ")");
  }
  return Status::OK();
}

Status CheckAtLeast1d(const TensorView& t, const std::string& name, const char* op) {
  if (t.shape.empty()) {
    return Status::InvalidArgument(std::string(op) + " of tensor '" + name +
                                   "' needs at least one dimension (it works along dim 0); got a scalar");
  }
  return Status::OK();
}

Status CheckSplits(const TensorView& t, const std::vector<int64_t>& splits, int set_size, const std::string& name) {
  if (splits.empty()) {
    if (t.shape[0] % set_size != 0) {
      return Status::InvalidArgument("alltoall of tensor '" + name + "' without splits needs dim 0 (" +
                                     std::to_string(t.shape[0]) + ") to divide by the process set size (" +
                                     std::to_string(set_size) + "); pass splits for an uneven exchange");
    }
    return Status::OK();
  }
  std::string text;
  int64_t sum = 0;
  bool negative = false;
  for (int64_t s : splits) {
    text += (text.empty() ? "" : ", ") + std::to_string(s);
    sum += s;
    negative |= s < 0;
  }
  if (static_cast<int>(splits.size()) != set_size || negative || sum != t.shape[0]) {
    return Status::InvalidArgument("alltoall of tensor '" + name + "': splits [" + text +
                                   "] must have one non-negative entry per rank of the process set (" +
                                   std::to_string(set_size) + ") adding up to dim 0 (" + std::to_string(t.shape[0]) +
                                   ")");
  }
  return Status::OK();
}

Status CheckProcessSetRanks(const std::vector<int>& ranks, int world_size) {
  if (ranks.empty()) return Status::InvalidArgument("a process set needs at least one rank");
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] < 0 || ranks[i] >= world_size) {
      return Status::InvalidArgument("process set rank " + std::to_string(ranks[i]) + " is outside [0, " +
                                     std::to_string(world_size) + ")");
    }
    if (i > 0 && ranks[i] <= ranks[i - 1]) {
      return Status::InvalidArgument("process set ranks must be sorted and unique");
    }
  }
  return Status::OK();
}

}  // namespace accord
