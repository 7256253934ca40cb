#include "errors.h"

namespace py = pybind11;

namespace accord::python {

namespace {

// Owned by the module for the life of the process (exception types are never freed).
PyObject* accord_error_type = nullptr;

[[noreturn]] void Raise(PyObject* type, const std::string& message) {
  PyErr_SetString(type, message.c_str());
  throw py::error_already_set();
}

}  // namespace

void RegisterExceptions(py::module_& module) {
  accord_error_type = PyErr_NewExceptionWithDoc(
      "accord._core.AccordError",
      "A collective failed: ranks disagreed about it (dtype, shape, op, root, a name\n"
      "submitted twice), a rank failed or left, its process set was removed, or accord\n"
      "was shut down. The message names the tensor and the ranks involved; the `code`\n"
      "attribute holds the core's status code (e.g. 'MISMATCH', 'SHUT_DOWN').",
      PyExc_RuntimeError, nullptr);
  if (!accord_error_type) throw py::error_already_set();
  module.attr("AccordError") = py::handle(accord_error_type);  // the module keeps a reference
}

void ThrowStatus(const Status& status) {
  switch (status.code()) {
    case StatusCode::kOk:
      Raise(PyExc_SystemError, "accord: ThrowStatus called with an OK status");
    case StatusCode::kInvalidArgument:
    case StatusCode::kPreconditionFailed:
      Raise(PyExc_ValueError, status.message());
    case StatusCode::kUnimplemented:
      Raise(PyExc_NotImplementedError, status.message());
    case StatusCode::kTimeout:
      Raise(PyExc_TimeoutError, status.message());
    default: {
      py::object error = py::reinterpret_borrow<py::object>(accord_error_type)(status.message());
      error.attr("code") = StatusCodeName(status.code());
      PyErr_SetObject(accord_error_type, error.ptr());
      throw py::error_already_set();
    }
  }
}

void ThrowValueError(const std::string& message) { Raise(PyExc_ValueError, message); }
void ThrowTypeError(const std::string& message) { Raise(PyExc_TypeError, message); }

}  // namespace accord::python
