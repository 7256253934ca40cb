// The enqueue functions of accord._core (allreduce_async, allgather_async, ...).
//
// Each imports its tensors through DLPack, calls the core's enqueue (which
// never blocks on the network, so the GIL stays held) and returns a Handle
// that keeps the tensors alive until the operation completes.
#pragma once

#include <pybind11/pybind11.h>

namespace accord::python {

void DefineCollectives(pybind11::module_& module);

}  // namespace accord::python
