// Operations whose TensorHandle was destroyed while they were still in
// flight. Their tensors must outlive the operation (the coordinator thread
// reads and writes them), so they wait here until it completes: every
// enqueue and shutdown() release those that have.
//
// Thread safety: any thread.
#pragma once

#include <memory>

#include "accord/torch/collectives.h"

namespace accord {
namespace torch {
namespace internal {

void AddOrphan(std::unique_ptr<TensorHandle::Operation> operation);
// Releases every orphan whose operation has completed.
void SweepOrphans();

}  // namespace internal
}  // namespace torch
}  // namespace accord
