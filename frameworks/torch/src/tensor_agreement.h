// Checking, before a series of broadcasts, that every rank of a process set
// holds the same tensors: the same names with the same dtypes and shapes.
// Without it, a rank with a tensor that the others lack waits for a broadcast
// that never comes (until the stall report or another rank's shutdown) while
// the others return as if all were well.
//
// The protocol, on every rank of the set (accord.torch does the same in
// frameworks/torch/python/tensor_agreement.py, and words its errors alike):
//   1. describe each tensor as (name, dtype, shape) in the order given,
//      serialize the list (sorted by name when the tensors are matched by
//      name, so that their order does not matter; as given when they are
//      matched by position) and hash it (FNV-1a, 64 bits);
//   2. allgather [digest, length of the serialized list]: one small
//      collective, the whole cost when the digests are equal;
//   3. otherwise (only then) allgather every rank's list, each in its given
//      order, and build, on every rank alike, a message naming the first
//      differing tensors and the ranks that hold each version; every rank
//      throws Error(kInvalidArgument) with it.
//
// Thread safety: CheckSameTensors is a collective of the process set, called
// from the training thread; ExplainDifferences is a pure function.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

#include "accord/accord.h"
#include "accord/tensor.h"

namespace accord {
namespace torch {
namespace internal {

// One tensor as the check sees it.
struct Described {
  std::string name;   // what the ranks match it by: its name, or "#<position>"
  std::string dtype;  // as torch spells it: "float32", "int64", ...
  Shape shape;
};

// `tensor` described under `name` (an undefined tensor: dtype "undefined").
Described Describe(std::string name, const at::Tensor& tensor);

struct AgreementCheck {
  std::string caller;      // begins the message: "broadcast_parameters"
  std::string collective;  // names the collectives: "<collective>", and "<collective>.lists" on a difference
  bool by_name = true;     // matched by name (their order does not matter), else by position
  ProcessSetId process_set = kGlobalProcessSet;
};

// Returns when every rank of the set passed the same list; otherwise throws,
// on every rank, Error(kInvalidArgument): "<caller>: the ranks' tensors
// differ: " and ExplainDifferences' text. Throws the collectives' own Error
// if they fail.
void CheckSameTensors(const std::vector<Described>& tensors, const AgreementCheck& check);

// What differs between the lists (lists[i] is global rank ranks[i]'s), e.g.
//   'fc3.weight' is missing on rank 1 (present on ranks 0, 2 as float32 [10, 20]);
//   'fc2.weight' is float32 [20, 50] on ranks 0, 2 and float32 [30, 50] on rank 1
// The first three differing names in the order of the lowest rank that holds
// them (each in that rank's order), then "and N more".
std::string ExplainDifferences(const std::vector<std::vector<Described>>& lists, const std::vector<int>& ranks);

}  // namespace internal
}  // namespace torch
}  // namespace accord
