// The Python-side Handle: an accord::Handle plus what must outlive the
// operation (the imported inputs and outputs, and the store of allocated
// outputs).
//
// Lifetimes: the imported tensors are released (their DLPack deleters run,
// the producer objects are dereferenced) the first time Python sees the
// handle complete: in poll(), wait() or outputs(). If the Python object is
// dropped while the operation is still in flight, they move to a list of
// orphans that every enqueue (and shutdown) sweeps, so the coordinator never
// touches freed memory and nothing is released without the GIL.
//
// Thread safety: every method needs the GIL; wait() releases it while it
// blocks. Several Python threads may poll or wait on one handle.
#pragma once

#include <pybind11/pybind11.h>

#include <memory>
#include <optional>
#include <vector>

#include "accord/handle.h"
#include "dlpack_export.h"
#include "dlpack_import.h"

namespace accord::python {

class PyHandle {
 public:
  // `store` is null for operations that write into the caller's memory.
  PyHandle(Handle handle, std::vector<ImportedTensor> tensors, std::shared_ptr<OutputStore> store) noexcept;
  ~PyHandle();
  PyHandle(const PyHandle&) = delete;
  PyHandle& operator=(const PyHandle&) = delete;

  bool Poll();
  // Waits (GIL released) until the operation completes, then raises its
  // error if it failed. `timeout` in seconds; TimeoutError if it passes.
  void Wait(std::optional<double> timeout);
  // Handle::WaitOnStream with the GIL released.
  void WaitOnStream(const StreamArg& stream);
  // The outputs the core allocated (the same list on every call): the
  // framework tensors of a caller's allocator, else DLPackTensor wrappers;
  // empty for allreduce, broadcast, barrier and join.
  pybind11::list Outputs();
  std::vector<int64_t> ReceivedSplits();
  int Value();

 private:
  void CheckCompleted(const char* method);
  void ReleaseTensors();

  Handle handle_;
  std::vector<ImportedTensor> tensors_;
  std::shared_ptr<OutputStore> store_;
  std::optional<pybind11::list> outputs_;
};

// accord._core.Handle, the Python object around a PyHandle. It is a plain
// CPython type rather than a pybind11 class: one is made and dropped per
// operation, and pybind11 enters every instance in a global registry (and
// looks it up and removes it again), a noticeable share of an enqueue.
// Python cannot create one; the enqueue functions do, with NewHandleObject.
void DefineHandleType(pybind11::module_& module);
pybind11::object NewHandleObject(Handle handle, std::vector<ImportedTensor> tensors,
                                 std::shared_ptr<OutputStore> store);

// Drops the tensors of orphaned handles that have completed. GIL held.
void SweepOrphans();
// Drops every orphan; for after Shutdown(), which completes every handle.
void ClearOrphans();

}  // namespace accord::python
