#include "errors.h"

namespace py = pybind11;

namespace accord::python {

namespace {

// Owned by the module for the life of the process (exception types are never freed).
PyObject* accord_error_type = nullptr;
PyObject* request_error_type = nullptr;

// The core's messages name its C++ entry point; from Python the call is init().
std::string ForPython(std::string message) {
  static const std::string kCppInit = "accord::Init()";
  for (size_t at = message.find(kCppInit); at != std::string::npos; at = message.find(kCppInit, at)) {
    message.replace(at, kCppInit.size(), kPythonInit);
    at += sizeof(kPythonInit) - 1;
  }
  return message;
}

[[noreturn]] void Raise(PyObject* type, const std::string& message) {
  PyErr_SetString(type, message.c_str());
  throw py::error_already_set();
}

}  // namespace

void RegisterExceptions(py::module_& module) {
  accord_error_type =
      PyErr_NewExceptionWithDoc("accord._core.AccordError",
                                "A collective failed: ranks disagreed about it (dtype, shape, op, root, a name\n"
                                "submitted twice), a rank failed or left, its process set was removed, or accord\n"
                                "was shut down. The message names the tensor and the ranks involved; the `code`\n"
                                "attribute holds the core's status code (e.g. 'MISMATCH', 'SHUT_DOWN').",
                                PyExc_RuntimeError, nullptr);
  if (!accord_error_type) throw py::error_already_set();
  module.attr("AccordError") = py::handle(accord_error_type);  // the module keeps a reference

  // Horovod refuses some requests with ValueError and others (an op a
  // collective does not support, a scalar to reducescatter, a collective
  // before init) with RuntimeError, and scripts written for it catch either.
  // accord's refusals are ValueErrors that are RuntimeErrors too.
  py::tuple bases = py::make_tuple(py::handle(PyExc_ValueError), py::handle(PyExc_RuntimeError));
  request_error_type = PyErr_NewExceptionWithDoc(
      "accord._core.RequestError",
      "A request refused when it was made: an invalid argument, an operation the collective does\n"
      "not support, or accord not initialised. A ValueError, and a RuntimeError as well, so that\n"
      "code written for Horovod, which raises either for such requests, catches it.",
      bases.ptr(), nullptr);
  if (!request_error_type) throw py::error_already_set();
  module.attr("RequestError") = py::handle(request_error_type);
}

void ThrowStatus(const Status& status) {
  switch (status.code()) {
    case StatusCode::kOk: Raise(PyExc_SystemError, "accord: ThrowStatus called with an OK status");
    case StatusCode::kInvalidArgument:
    case StatusCode::kPreconditionFailed: Raise(request_error_type, ForPython(status.message()));
    case StatusCode::kUnimplemented: Raise(PyExc_NotImplementedError, status.message());
    case StatusCode::kTimeout: Raise(PyExc_TimeoutError, status.message());
    default: {
      py::object error = py::reinterpret_borrow<py::object>(accord_error_type)(ForPython(status.message()));
      error.attr("code") = StatusCodeName(status.code());
      PyErr_SetObject(accord_error_type, error.ptr());
      throw py::error_already_set();
    }
  }
}

void ThrowValueError(const std::string& message) { Raise(PyExc_ValueError, message); }
void ThrowRequestError(const std::string& message) { Raise(request_error_type, message); }
void ThrowTypeError(const std::string& message) { Raise(PyExc_TypeError, message); }

}  // namespace accord::python
