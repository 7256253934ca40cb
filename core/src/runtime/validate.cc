#include "runtime/validate.h"

#include <algorithm>
#include <cmath>

namespace accord {

Status CheckTensor(const TensorView& t, const std::string& name) {
  for (int64_t d : t.shape) {
    if (d < 0)
      return Status::InvalidArgument("tensor '" + name + "' has a negative dimension: " + ShapeToString(t.shape));
  }
  if (static_cast<int>(t.dtype) >= kNumDataTypes) {
    return Status::InvalidArgument("tensor '" + name + "' has an unknown dtype id " +
                                   std::to_string(static_cast<int>(t.dtype)));
  }
  if (!t.data && t.num_elements() > 0) {
    return Status::InvalidArgument("tensor '" + name + "' has no data pointer but " + std::to_string(t.num_elements()) +
                                   " elements");
  }
  return Status::OK();
}

Status CheckReduction(const TensorView& t, ReduceOp op, double prescale, double postscale, const std::string& name) {
  if (static_cast<int>(op) > static_cast<int>(ReduceOp::kAdasum)) {
    return Status::InvalidArgument("tensor '" + name + "': unknown reduce op id " +
                                   std::to_string(static_cast<int>(op)));
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

Status CheckAdasum(const TensorView& t, int set_size, const std::string& name) {
  if (!IsFloatingPoint(t.dtype)) {
    return Status::InvalidArgument("tensor '" + name + "' is " + DataTypeName(t.dtype) +
                                   ": Adasum reduces float16, bfloat16, float32 and float64 tensors only");
  }
  if (t.device.type != DeviceType::kCPU) {
    return Status::Unimplemented("tensor '" + name + "' is on " + t.device.ToString() +
                                 ": Adasum is implemented for CPU tensors only");
  }
  if (set_size < 1 || (set_size & (set_size - 1)) != 0) {
    return Status::Unimplemented("Adasum of tensor '" + name + "' needs a power-of-two number of ranks, and its " +
                                 "process set has " + std::to_string(set_size));
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

namespace {

Status PartialOverlap(const std::string& name) {
  return Status::InvalidArgument("tensor '" + name +
                                 "': the output overlaps the input without being the same memory; pass the same "
                                 "tensor (in place) or separate memory");
}

}  // namespace

Status CheckOutputApart(const TensorView& input, const TensorView& output, const std::string& name) {
  const uintptr_t in = reinterpret_cast<uintptr_t>(input.data);
  const uintptr_t out = reinterpret_cast<uintptr_t>(output.data);
  const uintptr_t bytes = input.size_bytes();  // the output's too (checked before)
  if (in != out && bytes > 0 && in < out + bytes && out < in + bytes) return PartialOverlap(name);
  return Status::OK();
}

Status CheckOutputsApart(const TensorView* inputs, const TensorView* outputs, size_t count,
                         const std::vector<const std::string*>& names) {
  // The tensors' memory as intervals; an in-place pair is one (written) interval.
  struct Interval {
    uintptr_t begin, end;
    size_t index;
    bool output;
  };
  std::vector<Interval> intervals;
  intervals.reserve(2 * count);
  for (size_t i = 0; i < count; ++i) {
    const uintptr_t in = reinterpret_cast<uintptr_t>(inputs[i].data);
    const uintptr_t out = reinterpret_cast<uintptr_t>(outputs[i].data);
    if (inputs[i].size_bytes() == 0) continue;  // outputs have the inputs' layout (checked before)
    if (in != out) intervals.push_back({in, in + inputs[i].size_bytes(), i, false});
    intervals.push_back({out, out + outputs[i].size_bytes(), i, true});
  }
  std::sort(intervals.begin(), intervals.end(), [](const Interval& a, const Interval& b) { return a.begin < b.begin; });
  // In address order, an interval overlaps an earlier one exactly when it
  // starts before the furthest end seen so far (of any interval, or of an
  // output).
  const Interval* furthest = nullptr;
  const Interval* furthest_output = nullptr;
  for (const Interval& cur : intervals) {
    const Interval* hit = nullptr;
    if (furthest_output && cur.begin < furthest_output->end) {
      hit = furthest_output;
    } else if (cur.output && furthest && cur.begin < furthest->end) {
      hit = furthest;
    }
    if (hit) {
      const Interval& written = hit->output ? *hit : cur;
      const Interval& other = hit->output ? cur : *hit;
      if (written.index == other.index) return PartialOverlap(*names[written.index]);
      return Status::InvalidArgument("tensor '" + *names[written.index] + "': its output overlaps the " +
                                     (other.output ? "output" : "input") + " of tensor '" + *names[other.index] +
                                     "'; an output may share memory only with its own input (in place)");
    }
    if (!furthest || cur.end > furthest->end) furthest = &cur;
    if (cur.output && (!furthest_output || cur.end > furthest_output->end)) furthest_output = &cur;
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
  bool overflow = false;  // splits such as [2^62] * 4 would wrap around to a sum that matches
  for (int64_t s : splits) {
    text += (text.empty() ? "" : ", ") + std::to_string(s);
    overflow |= __builtin_add_overflow(sum, s, &sum);
    negative |= s < 0;
  }
  if (static_cast<int>(splits.size()) != set_size || negative || overflow || sum != t.shape[0]) {
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
