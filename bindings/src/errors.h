// The one place where a Status from the core becomes a Python exception.
//
//   kInvalidArgument, kPreconditionFailed  -> ValueError
//   kUnimplemented                         -> NotImplementedError
//   kTimeout                               -> TimeoutError
//   everything else (kMismatch, kShutDown,
//   kAborted, kInternal)                   -> accord._core.AccordError
//
// AccordError derives from RuntimeError and carries the core's status code
// name (e.g. "MISMATCH") in its `code` attribute.
//
// Thread safety: call with the GIL held.
#pragma once

#include <pybind11/pybind11.h>

#include <string>

#include "accord/status.h"

namespace accord::python {

// Creates accord._core.AccordError and adds it to `module`. Called once at import.
void RegisterExceptions(pybind11::module_& module);

// Throws the exception that `status` maps to (pybind11::error_already_set).
[[noreturn]] void ThrowStatus(const Status& status);

inline void ThrowIfError(const Status& status) {
  if (!status.ok()) ThrowStatus(status);
}

template <typename T>
T ValueOrThrow(Result<T> result) {
  if (!result.ok()) ThrowStatus(result.status());
  return std::move(result).value();
}

// Raises ValueError / TypeError with `message`.
[[noreturn]] void ThrowValueError(const std::string& message);
[[noreturn]] void ThrowTypeError(const std::string& message);

}  // namespace accord::python
