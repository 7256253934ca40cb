// The one place where a Status from the core becomes a Python exception.
//
//   kInvalidArgument, kPreconditionFailed  -> accord._core.RequestError
//   kUnimplemented                         -> NotImplementedError
//   kTimeout                               -> TimeoutError
//   everything else (kMismatch, kShutDown,
//   kAborted, kInternal)                   -> accord._core.AccordError
//
// RequestError derives from ValueError and RuntimeError (Horovod raises
// either for the requests accord refuses; docs/python.md). AccordError
// derives from RuntimeError and carries the core's status code name (e.g.
// "MISMATCH") in its `code` attribute. Messages that tell a C++ user to call
// accord::Init() name Python's init() instead (kPythonInit).
//
// Thread safety: call with the GIL held.
#pragma once

#include <pybind11/pybind11.h>

#include <new>
#include <stdexcept>
#include <string>

#include "accord/status.h"

namespace accord::python {

// How a message tells a Python user to initialise accord.
inline constexpr char kPythonInit[] = "hvd.init() (accord.init())";

// Creates accord._core.AccordError and RequestError and adds them to
// `module`. Called once at import.
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

// Raises ValueError / RequestError / TypeError with `message`.
[[noreturn]] void ThrowValueError(const std::string& message);
[[noreturn]] void ThrowRequestError(const std::string& message);
[[noreturn]] void ThrowTypeError(const std::string& message);

// For functions and methods written against the CPython API rather than
// pybind11 (the hottest paths): runs `body`, which returns a new reference or
// nullptr with a Python error set, and turns a C++ exception into the Python
// error pybind11 would raise for it.
template <typename Body>
PyObject* CallGuarded(Body&& body) noexcept {
  try {
    return body();
  } catch (pybind11::error_already_set& e) {
    e.restore();
  } catch (const pybind11::builtin_exception& e) {
    e.set_error();
  } catch (const std::bad_alloc&) {
    PyErr_NoMemory();
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  }
  return nullptr;
}

}  // namespace accord::python
