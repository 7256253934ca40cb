#include "py_handle.h"

#include <pybind11/stl.h>

#include <structmember.h>

#include <chrono>
#include <cmath>
#include <cstddef>
#include <new>
#include <optional>

#include "errors.h"

namespace py = pybind11;

namespace accord::python {

namespace {

struct Orphan {
  Handle handle;
  std::vector<ImportedTensor> tensors;
};

// Protected by the GIL. Deliberately leaked: it may still hold Python objects
// when static destructors run after the interpreter has gone.
std::vector<Orphan>& Orphans() {
  static auto* orphans = new std::vector<Orphan>();
  return *orphans;
}

// How often a waiting thread takes the GIL back to look for signals
// (Ctrl-C), so that a wait on a stuck collective can be interrupted.
constexpr std::chrono::milliseconds kSignalCheckInterval{100};

}  // namespace

PyHandle::PyHandle(Handle handle, std::vector<ImportedTensor> tensors, std::shared_ptr<OutputStore> store) noexcept
    : handle_(std::move(handle)), tensors_(std::move(tensors)), store_(std::move(store)) {}

PyHandle::~PyHandle() {
  if (tensors_.empty()) return;
  if (handle_.Done()) return;  // the members release them now
  Orphans().push_back(Orphan{handle_, std::move(tensors_)});
}

void PyHandle::ReleaseTensors() {
  std::vector<ImportedTensor> released = std::move(tensors_);
  tensors_.clear();
}

bool PyHandle::Poll() {
  if (!handle_.Poll()) return false;
  ReleaseTensors();
  return true;
}

void PyHandle::Wait(std::optional<double> timeout) {
  using Clock = std::chrono::steady_clock;
  std::optional<Clock::time_point> deadline;
  // Timeouts beyond ~30 years are "forever" (and would overflow the clock).
  constexpr double kForever = 1e9;
  if (timeout) {
    if (std::isnan(*timeout) || *timeout < 0)
      ThrowValueError("wait(): timeout must be a non-negative number of seconds");
    if (*timeout < kForever) {
      deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(*timeout));
    }
  }
  // Already done (the common case when many operations were enqueued before
  // the first wait): no GIL release, no clock.
  if (handle_.Done()) {
    ReleaseTensors();
    ThrowIfError(handle_.status());
    return;
  }
  Status status;
  while (true) {
    auto slice = kSignalCheckInterval;
    bool last_slice = false;
    if (deadline) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*deadline - Clock::now());
      if (left <= slice) {
        slice = std::max(left, std::chrono::milliseconds(0));
        last_slice = true;
      }
    }
    {
      py::gil_scoped_release release;
      status = handle_.Wait(slice);
    }
    if (status.code() != StatusCode::kTimeout) break;
    if (last_slice) {
      ThrowStatus(Status::Timeout("wait(): the operation did not complete within " + std::to_string(*timeout) +
                                  " s; it is still in flight"));
    }
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
  }
  ReleaseTensors();
  ThrowIfError(status);
}

void PyHandle::CheckCompleted(const char* method) {
  if (!handle_.Done()) {
    ThrowValueError(std::string(method) + " needs a completed operation: call wait() first");
  }
  ReleaseTensors();
  ThrowIfError(handle_.status());
}

py::list PyHandle::Outputs() {
  CheckCompleted("outputs()");
  if (outputs_) return *outputs_;
  py::list list;
  if (store_) {
    for (const TensorView& view : handle_.outputs()) {
      // A framework's own tensor (a CUDA output from the caller's
      // allocator), or memory the bindings allocated.
      py::object tensor = store_->TakeFrameworkTensor(view.data);
      if (!tensor.is_none()) {
        list.append(tensor);
        continue;
      }
      DLManagedTensor* managed = store_->Take(view.data);
      if (!managed) ThrowStatus(Status::Internal("an output of this operation was not allocated by accord's bindings"));
      list.append(py::cast(std::make_unique<DLPackTensor>(managed)));
    }
  }
  outputs_ = list;
  return list;
}

void PyHandle::WaitOnStream(const StreamArg& stream) {
  Status status;
  {
    py::gil_scoped_release release;
    status = handle_.WaitOnStream(NativeStream(stream));
  }
  ThrowIfError(status);
}

std::vector<int64_t> PyHandle::ReceivedSplits() {
  CheckCompleted("received_splits()");
  return handle_.received_splits();
}

int PyHandle::Value() {
  CheckCompleted("value()");
  return handle_.last_joined_rank();
}

void SweepOrphans() {
  auto& orphans = Orphans();
  if (orphans.empty()) return;
  std::vector<Orphan> done;
  for (auto it = orphans.begin(); it != orphans.end();) {
    if (it->handle.Done()) {
      done.push_back(std::move(*it));
      it = orphans.erase(it);
    } else {
      ++it;
    }
  }
  // `done` goes here, after the list is consistent again: a deleter may run
  // Python code that enqueues (and sweeps) again.
}

namespace {

// ------------------------------------------------- the accord._core.Handle type

struct HandleObject {
  PyObject_HEAD PyObject* weak_references;                   // Python's list of weak references to the handle
  alignas(PyHandle) unsigned char handle[sizeof(PyHandle)];  // a PyHandle, constructed by NewHandleObject
};

PyTypeObject* handle_type = nullptr;  // owned by the module for the life of the process

PyHandle& Of(PyObject* self) {
  return *std::launder(reinterpret_cast<PyHandle*>(reinterpret_cast<HandleObject*>(self)->handle));
}

PyObject* HandlePoll(PyObject* self, PyObject*) {
  return CallGuarded([&] { return PyBool_FromLong(Of(self).Poll()); });
}

// wait(timeout=None)
PyObject* HandleWait(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  return CallGuarded([&]() -> PyObject* {
    PyObject* timeout = nargs > 0 ? args[0] : nullptr;
    const Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    if (nargs > 1 || nargs + nkw > 1) {
      PyErr_SetString(PyExc_TypeError, "wait() takes at most one argument (timeout)");
      return nullptr;
    }
    if (nkw == 1) {
      if (PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, 0), "timeout") != 0) {
        PyErr_Format(PyExc_TypeError, "wait() got an unexpected keyword argument '%U'", PyTuple_GET_ITEM(kwnames, 0));
        return nullptr;
      }
      timeout = args[0];
    }
    std::optional<double> seconds;
    if (timeout && timeout != Py_None) {
      const double value = PyFloat_AsDouble(timeout);
      if (value == -1.0 && PyErr_Occurred()) return nullptr;
      seconds = value;
    }
    Of(self).Wait(seconds);
    Py_RETURN_NONE;
  });
}

// wait_on_stream(stream=None)
PyObject* HandleWaitOnStream(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  return CallGuarded([&]() -> PyObject* {
    if (nargs > 1) {
      PyErr_SetString(PyExc_TypeError, "wait_on_stream() takes at most one argument (stream)");
      return nullptr;
    }
    StreamArg stream;
    if (nargs == 1 && args[0] != Py_None) {
      const long long value = PyLong_AsLongLong(args[0]);
      if (value == -1 && PyErr_Occurred()) return nullptr;
      stream = value;
    }
    Of(self).WaitOnStream(stream);
    Py_RETURN_NONE;
  });
}

PyObject* HandleOutputs(PyObject* self, PyObject*) {
  return CallGuarded([&] { return Of(self).Outputs().release().ptr(); });
}

PyObject* HandleReceivedSplits(PyObject* self, PyObject*) {
  return CallGuarded([&] { return py::cast(Of(self).ReceivedSplits()).release().ptr(); });
}

PyObject* HandleValue(PyObject* self, PyObject*) {
  return CallGuarded([&] { return PyLong_FromLong(Of(self).Value()); });
}

PyObject* HandleNew(PyTypeObject*, PyObject*, PyObject*) {
  PyErr_SetString(PyExc_TypeError, "accord._core.Handle objects are made by the *_async functions");
  return nullptr;
}

void HandleDealloc(PyObject* self) {
  PyTypeObject* type = Py_TYPE(self);
  if (reinterpret_cast<HandleObject*>(self)->weak_references) PyObject_ClearWeakRefs(self);
  Of(self).~PyHandle();  // an operation still in flight leaves its tensors to the orphans
  type->tp_free(self);
  Py_DECREF(type);  // instances of heap types own a reference to their type
}

PyMethodDef handle_methods[] = {
    {"poll", HandlePoll, METH_NOARGS,
     "poll()\n--\n\nTrue once the operation has finished (successfully or not). Never blocks."},
    {"wait", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(HandleWait)), METH_FASTCALL | METH_KEYWORDS,
     "wait(timeout=None)\n--\n\nBlocks (GIL released) until the operation has finished and raises its error if it "
     "failed. `timeout` in seconds: TimeoutError if it passes (the operation stays in flight). A finished operation "
     "returns at once, without releasing the GIL."},
    {"wait_on_stream", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(HandleWaitOnStream)), METH_FASTCALL,
     "wait_on_stream(stream=None)\n--\n\nFor CUDA tensors: waits (GIL released) only until the operation is queued "
     "on the GPU, then makes `stream` (an int cudaStream_t; None: the legacy default stream) wait for it there, as "
     "torch.distributed's Work.wait() does for NCCL. Raises the error of a part that already failed. For CPU tensors "
     "it is wait()."},
    {"outputs", HandleOutputs, METH_NOARGS,
     "outputs()\n--\n\nThe outputs the core allocated (allgather, alltoall, reducescatter and their grouped forms) "
     "as DLPackTensor objects, one per tensor; the same list on every call. Empty for other operations."},
    {"received_splits", HandleReceivedSplits, METH_NOARGS,
     "received_splits()\n--\n\nalltoall: how many rows came from each rank."},
    {"value", HandleValue, METH_NOARGS, "value()\n--\n\njoin: the last rank to join."},
    {nullptr, nullptr, 0, nullptr},
};

PyMemberDef handle_members[] = {
    {"__weaklistoffset__", T_PYSSIZET, offsetof(HandleObject, weak_references), READONLY, nullptr},
    {nullptr, 0, 0, 0, nullptr},
};

}  // namespace

void DefineHandleType(py::module_& module) {
  static PyType_Slot slots[] = {
      {Py_tp_doc, const_cast<char*>("An enqueued operation (like torch.distributed's Work).")},
      {Py_tp_new, reinterpret_cast<void*>(HandleNew)},
      {Py_tp_dealloc, reinterpret_cast<void*>(HandleDealloc)},
      {Py_tp_methods, handle_methods},
      {Py_tp_members, handle_members},  // weak references, as pybind11 classes allow them
      {0, nullptr},
  };
  static PyType_Spec spec = {"accord._core.Handle", sizeof(HandleObject), 0, Py_TPFLAGS_DEFAULT, slots};
  PyObject* type = PyType_FromSpec(&spec);
  if (!type) throw py::error_already_set();
  handle_type = reinterpret_cast<PyTypeObject*>(type);
  module.attr("Handle") = py::handle(type);  // the module keeps a reference as well
}

py::object NewHandleObject(Handle handle, std::vector<ImportedTensor> tensors, std::shared_ptr<OutputStore> store) {
  PyObject* self = handle_type->tp_alloc(handle_type, 0);
  if (!self) throw py::error_already_set();
  new (reinterpret_cast<HandleObject*>(self)->handle)
      PyHandle(std::move(handle), std::move(tensors), std::move(store));  // does not throw
  return py::reinterpret_steal<py::object>(self);
}

void ClearOrphans() {
  std::vector<Orphan> all = std::move(Orphans());
  Orphans().clear();
}

}  // namespace accord::python
