#include "collectives.h"

#include <pybind11/stl.h>

#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "accord/accord.h"
#include "dlpack_export.h"
#include "dlpack_import.h"
#include "errors.h"
#include "py_handle.h"

namespace py = pybind11;
using namespace pybind11::literals;

namespace accord::python {

namespace {

using OptionalName = std::optional<std::string>;
using DtypeOverride = std::optional<std::string>;

ReduceOp ToReduceOp(int op) {
  if (op < static_cast<int>(ReduceOp::kAverage) || op > static_cast<int>(ReduceOp::kAdasum)) {
    ThrowRequestError("unknown reduce op " + std::to_string(op) +
                      "; use OP_AVERAGE, OP_SUM, OP_MIN, OP_MAX, OP_PRODUCT or OP_ADASUM");
  }
  return static_cast<ReduceOp>(op);
}

template <typename Options>
Options MakeOptions(OptionalName name, int process_set) {
  Options options;
  if (name) options.name = std::move(*name);
  options.process_set = process_set;
  return options;
}

template <typename Options>
Options MakeReduceOptions(OptionalName name, int op, double prescale, double postscale, int process_set) {
  auto options = MakeOptions<Options>(std::move(name), process_set);
  options.op = ToReduceOp(op);
  options.prescale_factor = prescale;
  options.postscale_factor = postscale;
  return options;
}

// "input" for the only tensor of a list, "input 2" for one of several.
TensorLabel Describe(const char* role, size_t index, size_t count) {
  return count == 1 ? TensorLabel(role) : TensorLabel(role, index);
}

// Imports a list of tensors.
std::vector<ImportedTensor> ImportAll(const py::list& objects, const char* role, const DtypeOverride& dtype_override,
                                      const StreamArg& stream) {
  std::vector<ImportedTensor> tensors;
  tensors.reserve(objects.size());
  for (size_t i = 0; i < objects.size(); ++i) {
    tensors.push_back(ImportTensor(objects[i], Describe(role, i, objects.size()), dtype_override, stream));
  }
  return tensors;
}

// A grouped allgather's dtype_override: None, one name for every input, or
// a list with one entry (a name or None) per input, so that a group can mix
// bool tensors (sent as uint8 views) with others and each keeps its dtype.
std::vector<DtypeOverride> OverridesFor(const py::list& inputs, const py::object& dtype_override) {
  if (dtype_override.is_none() || py::isinstance<py::str>(dtype_override)) {
    return std::vector<DtypeOverride>(inputs.size(), dtype_override.cast<DtypeOverride>());
  }
  auto overrides = dtype_override.cast<std::vector<DtypeOverride>>();
  if (overrides.size() != inputs.size()) {
    ThrowRequestError("dtype_override has " + std::to_string(overrides.size()) + " entries for " +
                      std::to_string(inputs.size()) + " tensors");
  }
  return overrides;
}

std::vector<TensorView> Views(const std::vector<ImportedTensor>& tensors) {
  std::vector<TensorView> views;
  views.reserve(tensors.size());
  for (const auto& t : tensors) views.push_back(t.view());
  return views;
}

// A store whose outputs are described like the inputs they came from;
// CUDA outputs come from `allocate` when it is not None (dlpack_export.h).
std::shared_ptr<OutputStore> StoreFor(const std::vector<ImportedTensor>& inputs, const py::object& allocate) {
  std::map<DataType, DLDataType> described_as;
  for (const auto& t : inputs) described_as.emplace(t.view().dtype, t.dl_dtype());
  return std::make_shared<OutputStore>(std::move(described_as), allocate);
}

// An output the bindings allocate like the input (on its device), for an
// allreduce given output None; Handle.outputs() hands it out.
TensorView NewOutputLike(OutputStore& store, const TensorView& input) {
  return ValueOrThrow(store.MakeAllocator()(input.dtype, input.shape, input.device));
}

template <typename Options>
Options WithStream(Options options, const StreamArg& stream) {
  options.stream = NativeStream(stream);
  return options;
}

// A new accord._core.Handle, or the error of a failed enqueue.
py::object MakeHandle(Result<Handle> handle, std::vector<ImportedTensor> tensors,
                      std::shared_ptr<OutputStore> store = nullptr) {
  return NewHandleObject(ValueOrThrow(std::move(handle)), std::move(tensors), std::move(store));
}

// Imports allreduce outputs: an output that is its input (the same Python
// object) reuses the input's import, so in-place works for bare capsules
// too, which can be consumed only once.
std::vector<ImportedTensor> ImportOutputs(const py::list& inputs, const py::list& outputs,
                                          std::vector<ImportedTensor>* imported_inputs, std::vector<TensorView>* views,
                                          const DtypeOverride& dtype_override, const StreamArg& stream,
                                          std::shared_ptr<OutputStore>* store) {
  std::vector<ImportedTensor> imported;
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (i < inputs.size() && outputs[i].is(inputs[i])) {
      views->push_back((*imported_inputs)[i].view());
    } else if (outputs[i].is_none() && i < inputs.size()) {
      if (!*store) *store = StoreFor(*imported_inputs, py::none());
      views->push_back(NewOutputLike(**store, (*imported_inputs)[i].view()));
    } else {
      imported.push_back(ImportTensor(outputs[i], Describe("output", i, outputs.size()), dtype_override, stream));
      views->push_back(imported.back().view());
    }
  }
  return imported;
}

py::object GroupedAllreduceAsync(const py::list& inputs, const py::list& outputs, const OptionalName& name, int op,
                                 double prescale, double postscale, int process_set,
                                 const DtypeOverride& dtype_override, const StreamArg& stream) {
  SweepOrphans();
  if (inputs.size() != outputs.size()) {
    ThrowRequestError("grouped_allreduce: " + std::to_string(inputs.size()) + " inputs but " +
                      std::to_string(outputs.size()) + " outputs");
  }
  auto options = WithStream(MakeReduceOptions<AllreduceOptions>(name, op, prescale, postscale, process_set), stream);
  std::vector<ImportedTensor> tensors = ImportAll(inputs, "input", dtype_override, stream);
  std::vector<TensorView> in_views = Views(tensors);
  std::vector<TensorView> out_views;
  std::shared_ptr<OutputStore> store;  // outputs given as None
  std::vector<ImportedTensor> outs =
      ImportOutputs(inputs, outputs, &tensors, &out_views, dtype_override, stream, &store);
  for (auto& t : outs) tensors.push_back(std::move(t));
  return MakeHandle(GroupedAllreduce(in_views, out_views, options), std::move(tensors), std::move(store));
}

// The single-tensor allreduce, the hottest path of the module: no lists, and
// an in-place call (output is input) imports its tensor once.
py::object AllreduceAsync(const py::object& input, const py::object& output, OptionalName name, int op, double prescale,
                          double postscale, int process_set, const DtypeOverride& dtype_override,
                          const StreamArg& stream) {
  SweepOrphans();
  auto options =
      WithStream(MakeReduceOptions<AllreduceOptions>(std::move(name), op, prescale, postscale, process_set), stream);
  std::vector<ImportedTensor> tensors;
  tensors.reserve(2);
  tensors.push_back(ImportTensor(input, "input", dtype_override, stream));
  if (output.is_none()) {
    auto store = StoreFor(tensors, py::none());
    const TensorView out = NewOutputLike(*store, tensors.front().view());
    Result<Handle> handle = Allreduce(tensors.front().view(), out, options);
    return MakeHandle(std::move(handle), std::move(tensors), std::move(store));
  }
  if (!output.is(input)) tensors.push_back(ImportTensor(output, "output", dtype_override, stream));
  Result<Handle> handle = Allreduce(tensors.front().view(), tensors.back().view(), options);
  return MakeHandle(std::move(handle), std::move(tensors));
}

py::object GatherAsync(const py::list& inputs, const OptionalName& name, int process_set,
                       const std::vector<DtypeOverride>& dtype_overrides, const StreamArg& stream,
                       const py::object& allocate, bool grouped) {
  SweepOrphans();
  auto options = WithStream(MakeOptions<CollectiveOptions>(name, process_set), stream);
  std::vector<ImportedTensor> tensors;
  tensors.reserve(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    tensors.push_back(ImportTensor(inputs[i], Describe("input", i, inputs.size()), dtype_overrides[i], stream));
  }
  auto store = StoreFor(tensors, allocate);
  Result<Handle> handle = grouped ? GroupedAllgather(Views(tensors), store->MakeAllocator(), options)
                                  : Allgather(tensors.at(0).view(), store->MakeAllocator(), options);
  return MakeHandle(std::move(handle), std::move(tensors), std::move(store));
}

py::object ReducescatterAsync(const py::list& inputs, const OptionalName& name, int op, double prescale,
                              double postscale, int process_set, const DtypeOverride& dtype_override,
                              const StreamArg& stream, const py::object& allocate, bool grouped) {
  SweepOrphans();
  auto options =
      WithStream(MakeReduceOptions<ReducescatterOptions>(name, op, prescale, postscale, process_set), stream);
  std::vector<ImportedTensor> tensors = ImportAll(inputs, "input", dtype_override, stream);
  auto store = StoreFor(tensors, allocate);
  Result<Handle> handle = grouped ? GroupedReducescatter(Views(tensors), store->MakeAllocator(), options)
                                  : Reducescatter(tensors.at(0).view(), store->MakeAllocator(), options);
  return MakeHandle(std::move(handle), std::move(tensors), std::move(store));
}

py::object BroadcastAsync(const py::object& input, const py::object& output, int root_rank, const OptionalName& name,
                          int process_set, const DtypeOverride& dtype_override, const StreamArg& stream) {
  SweepOrphans();
  auto options = WithStream(MakeOptions<CollectiveOptions>(name, process_set), stream);
  std::vector<ImportedTensor> tensors;
  tensors.push_back(ImportTensor(input, "input", dtype_override, stream));
  if (!output.is(input)) {
    tensors.push_back(ImportTensor(output, "output", dtype_override, stream));
    const TensorView& in = tensors[0].view();
    const TensorView& out = tensors[1].view();
    if (in.device.type == DeviceType::kCUDA || out.device.type == DeviceType::kCUDA) {
      ThrowRequestError(
          "broadcast of CUDA tensors is in place: pass the same tensor as input and output (copy the "
          "root's values into the output first)");
    }
    if (in.dtype != out.dtype || in.shape != out.shape) {
      ThrowRequestError(std::string("broadcast: the output (") + DataTypeName(out.dtype) + " " +
                        ShapeToString(out.shape) + ") must match the input (" + DataTypeName(in.dtype) + " " +
                        ShapeToString(in.shape) + ")");
    }
    // The core broadcasts in place: the root's data must be in the output
    // before the operation is enqueued. Other ranks' outputs are overwritten.
    const int set_rank = ValueOrThrow(ProcessSetRank(process_set));
    if (set_rank == root_rank && in.data != out.data) std::memcpy(out.data, in.data, in.size_bytes());
  }
  Result<Handle> handle = Broadcast(tensors.back().view(), root_rank, options);
  return MakeHandle(std::move(handle), std::move(tensors));
}

py::object AlltoallAsync(const py::object& input, const std::optional<std::vector<int64_t>>& splits,
                         const OptionalName& name, int process_set, const DtypeOverride& dtype_override,
                         const StreamArg& stream, const py::object& allocate) {
  SweepOrphans();
  auto options = WithStream(MakeOptions<CollectiveOptions>(name, process_set), stream);
  std::vector<ImportedTensor> tensors;
  tensors.push_back(ImportTensor(input, "input", dtype_override, stream));
  auto store = StoreFor(tensors, allocate);
  Result<Handle> handle =
      Alltoall(tensors[0].view(), splits.value_or(std::vector<int64_t>{}), store->MakeAllocator(), options);
  return MakeHandle(std::move(handle), std::move(tensors), std::move(store));
}

py::list One(const py::object& object) {
  py::list list;
  list.append(object);
  return list;
}

// allreduce_async is the call every framework adapter makes once per tensor,
// so it gets a CPython fast-call entry: a positional call whose arguments
// already have their exact types (str or None, int, float, float, int, None)
// is converted here; any other call (keywords, other types, a dtype
// override) goes to the pybind11 function, which converts and reports errors
// as every other function of the module does.
PyObject* allreduce_async_general = nullptr;  // the pybind11 function; never freed

constexpr const char* kAllreduceAsyncDoc =
    "allreduce_async(input, output, name=None, op=0, prescale_factor=1.0, postscale_factor=1.0, process_set=0, "
    "dtype_override=None, stream=None)\n--\n\n"
    "Enqueues an allreduce of `input` into `output` (which may be `input`: in place; None: a new tensor on the "
    "input's device, from Handle.outputs()[0]). For CUDA tensors, `stream` (an int cudaStream_t; None: the legacy "
    "default stream) is the stream that produces them. Returns a Handle.";

// An exact int in the range of a C int.
bool ExactInt(PyObject* object, int* value) {
  if (!PyLong_CheckExact(object)) return false;
  int overflow = 0;
  const long v = PyLong_AsLongAndOverflow(object, &overflow);
  if (overflow || v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max()) return false;
  *value = static_cast<int>(v);
  return true;
}

// None (no name) or an exact str, read into `name`. Anything else, or a str
// that is not valid UTF-8 (lone surrogates), is false with no error set.
bool ExactOptionalName(PyObject* object, OptionalName* name) {
  if (object == Py_None) return true;
  Py_ssize_t size = 0;
  const char* text = PyUnicode_CheckExact(object) ? PyUnicode_AsUTF8AndSize(object, &size) : nullptr;
  if (!text) {
    PyErr_Clear();
    return false;
  }
  name->emplace(text, static_cast<size_t>(size));
  return true;
}

PyObject* AllreduceAsyncFastCall(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  return CallGuarded([&]() -> PyObject* {
    int op = 0, process_set = 0;
    double scale[2] = {1.0, 1.0};
    OptionalName name;
    bool fast = nargs >= 2 && nargs <= 8 && (!kwnames || PyTuple_GET_SIZE(kwnames) == 0);
    // A name the fast path cannot read (e.g. a str with lone surrogates): the general path reports it.
    if (fast && nargs > 2) fast = ExactOptionalName(args[2], &name);
    if (fast && nargs > 3) fast = ExactInt(args[3], &op);
    for (Py_ssize_t i = 4; fast && i < 6 && i < nargs; ++i) {
      fast = PyFloat_CheckExact(args[i]);
      if (fast) scale[i - 4] = PyFloat_AS_DOUBLE(args[i]);
    }
    if (fast && nargs > 6) fast = ExactInt(args[6], &process_set);
    if (fast && nargs > 7) fast = args[7] == Py_None;
    if (!fast) return PyObject_Vectorcall(allreduce_async_general, args, static_cast<size_t>(nargs), kwnames);
    return AllreduceAsync(py::reinterpret_borrow<py::object>(args[0]), py::reinterpret_borrow<py::object>(args[1]),
                          std::move(name), op, scale[0], scale[1], process_set, std::nullopt, std::nullopt)
        .release()
        .ptr();
  });
}

// allreduce_async_ptr(owner, input_ptr, output_ptr, dtype, shape, name, op,
// prescale_factor, postscale_factor, process_set, device, stream): the torch
// adapter's fastest path, for a contiguous tensor whose address, accord
// dtype id, shape and device (-1: CPU, else the CUDA ordinal, with the int
// cudaStream_t producing it in `stream`) the adapter read itself (torch's
// DLPack export alone costs more than the rest of the enqueue). Internal:
// the caller vouches that `owner` keeps both addresses valid and that they
// hold `shape` elements of `dtype`; the handle holds `owner` until the
// operation completes. Every argument must have its exact type (shape: a
// tuple of ints).
constexpr const char* kAllreduceAsyncPtrDoc =
    "allreduce_async_ptr(owner, input_ptr, output_ptr, dtype, shape, name, op, prescale_factor, postscale_factor, "
    "process_set, device, stream)\n--\n\n"
    "Internal fast path of accord.torch: an allreduce of memory described by address, dtype id, shape and device "
    "(-1: CPU; else a CUDA ordinal produced on `stream`), kept alive by `owner`. Returns a Handle.";

// An exact int that fits in an unsigned pointer.
bool ExactAddress(PyObject* object, void** address) {
  if (!PyLong_CheckExact(object)) return false;
  const unsigned long long v = PyLong_AsUnsignedLongLong(object);
  if (v == static_cast<unsigned long long>(-1) && PyErr_Occurred()) return false;
  *address = reinterpret_cast<void*>(static_cast<uintptr_t>(v));
  return true;
}

PyObject* AllreduceAsyncPtrCall(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  return CallGuarded([&]() -> PyObject* {
    if (nargs != 12) ThrowTypeError("allreduce_async_ptr takes 12 positional arguments");
    TensorView in;
    void* out_data = nullptr;
    int dtype = 0, op = 0, process_set = 0;
    if (!ExactAddress(args[1], &in.data) || !ExactAddress(args[2], &out_data)) {
      PyErr_Clear();
      ThrowTypeError("allreduce_async_ptr: input_ptr and output_ptr must be ints (addresses)");
    }
    if (!ExactInt(args[3], &dtype) || dtype < 0 || dtype >= kNumDataTypes) {
      PyErr_Clear();
      ThrowRequestError("allreduce_async_ptr: dtype must be an accord dtype id");
    }
    in.dtype = static_cast<DataType>(dtype);
    if (!PyTuple_Check(args[4])) ThrowTypeError("allreduce_async_ptr: shape must be a tuple of ints");
    const Py_ssize_t ndim = PyTuple_GET_SIZE(args[4]);
    in.shape.resize(static_cast<size_t>(ndim));
    for (Py_ssize_t i = 0; i < ndim; ++i) {
      const long long d = PyLong_AsLongLong(PyTuple_GET_ITEM(args[4], i));
      if (d == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        ThrowTypeError("allreduce_async_ptr: shape must be a tuple of ints");
      }
      in.shape[static_cast<size_t>(i)] = d;
    }
    OptionalName name;
    if (!ExactOptionalName(args[5], &name)) ThrowTypeError("allreduce_async_ptr: name must be a str or None");
    int device = -1;
    void* stream = nullptr;
    if (!ExactInt(args[6], &op) || !PyFloat_CheckExact(args[7]) || !PyFloat_CheckExact(args[8]) ||
        !ExactInt(args[9], &process_set) || !ExactInt(args[10], &device) || !ExactAddress(args[11], &stream)) {
      PyErr_Clear();
      ThrowTypeError("allreduce_async_ptr: op, process_set, device and stream must be ints, the scale factors floats");
    }
    if (device >= 0) in.device = Device::CUDA(device);
    SweepOrphans();
    auto options = MakeReduceOptions<AllreduceOptions>(std::move(name), op, PyFloat_AS_DOUBLE(args[7]),
                                                       PyFloat_AS_DOUBLE(args[8]), process_set);
    options.stream = reinterpret_cast<uintptr_t>(stream) == 1 ? nullptr : stream;
    std::vector<ImportedTensor> tensors;
    tensors.push_back(ImportedTensor::Borrowed(py::reinterpret_borrow<py::object>(args[0])));
    auto enqueue = [&]() -> Result<Handle> {
      if (out_data == in.data) return Allreduce(in, in, options);  // in place: one copy of the shape
      TensorView out = in;
      out.data = out_data;
      return Allreduce(in, out, options);
    };
    return MakeHandle(enqueue(), std::move(tensors)).release().ptr();
  });
}

PyMethodDef allreduce_async_ptr_def = {
    "allreduce_async_ptr", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(AllreduceAsyncPtrCall)),
    METH_FASTCALL, kAllreduceAsyncPtrDoc};

PyMethodDef allreduce_async_def = {"allreduce_async",
                                   reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(AllreduceAsyncFastCall)),
                                   METH_FASTCALL | METH_KEYWORDS, kAllreduceAsyncDoc};

}  // namespace

void DefineCollectives(py::module_& m) {
  py::cpp_function general(&AllreduceAsync, py::name("allreduce_async"), "input"_a, "output"_a, "name"_a = py::none(),
                           "op"_a = 0, "prescale_factor"_a = 1.0, "postscale_factor"_a = 1.0, "process_set"_a = 0,
                           "dtype_override"_a = py::none(), "stream"_a = py::none());
  allreduce_async_general = general.release().ptr();
  PyObject* fast = PyCFunction_NewEx(&allreduce_async_def, nullptr, m.attr("__name__").ptr());
  if (!fast) throw py::error_already_set();
  m.attr("allreduce_async") = py::reinterpret_steal<py::object>(fast);
  PyObject* by_address = PyCFunction_NewEx(&allreduce_async_ptr_def, nullptr, m.attr("__name__").ptr());
  if (!by_address) throw py::error_already_set();
  m.attr("allreduce_async_ptr") = py::reinterpret_steal<py::object>(by_address);
  m.def(
      "grouped_allreduce_async",
      [](const py::list& inputs, const py::list& outputs, const OptionalName& name, int op, double prescale,
         double postscale, int process_set, const DtypeOverride& dtype_override, const StreamArg& stream) {
        return GroupedAllreduceAsync(inputs, outputs, name, op, prescale, postscale, process_set, dtype_override,
                                     stream);
      },
      "inputs"_a, "outputs"_a, "name"_a = py::none(), "op"_a = 0, "prescale_factor"_a = 1.0, "postscale_factor"_a = 1.0,
      "process_set"_a = 0, "dtype_override"_a = py::none(), "stream"_a = py::none(),
      "Enqueues allreduces of every input into the matching output as one group. Returns a Handle.");
  m.def(
      "allgather_async",
      [](const py::object& input, const OptionalName& name, int process_set, const DtypeOverride& dtype_override,
         const StreamArg& stream, const py::object& allocate) {
        return GatherAsync(One(input), name, process_set, {dtype_override}, stream, allocate, false);
      },
      "input"_a, "name"_a = py::none(), "process_set"_a = 0, "dtype_override"_a = py::none(), "stream"_a = py::none(),
      "allocate"_a = py::none(), "Enqueues an allgather along dim 0; the output comes from Handle.outputs()[0].");
  m.def(
      "grouped_allgather_async",
      [](const py::list& inputs, const OptionalName& name, int process_set, const py::object& dtype_override,
         const StreamArg& stream, const py::object& allocate) {
        return GatherAsync(inputs, name, process_set, OverridesFor(inputs, dtype_override), stream, allocate, true);
      },
      "inputs"_a, "name"_a = py::none(), "process_set"_a = 0, "dtype_override"_a = py::none(), "stream"_a = py::none(),
      "allocate"_a = py::none(),
      "Enqueues allgathers of every input as one group; outputs in Handle.outputs(). dtype_override may be a list "
      "with one entry per input.");
  m.def("broadcast_async", &BroadcastAsync, "input"_a, "output"_a, "root_rank"_a, "name"_a = py::none(),
        "process_set"_a = 0, "dtype_override"_a = py::none(), "stream"_a = py::none(),
        "Enqueues a broadcast of root_rank's `input` into `output` (which may be `input`: in place) on every rank.");
  m.def("alltoall_async", &AlltoallAsync, "input"_a, "splits"_a = py::none(), "name"_a = py::none(),
        "process_set"_a = 0, "dtype_override"_a = py::none(), "stream"_a = py::none(), "allocate"_a = py::none(),
        "Enqueues an alltoall: splits[j] rows of dim 0 go to rank j (None: even split). The output comes from "
        "Handle.outputs()[0] and Handle.received_splits() says how many rows came from each rank.");
  m.def(
      "reducescatter_async",
      [](const py::object& input, const OptionalName& name, int op, double prescale, double postscale, int process_set,
         const DtypeOverride& dtype_override, const StreamArg& stream, const py::object& allocate) {
        return ReducescatterAsync(One(input), name, op, prescale, postscale, process_set, dtype_override, stream,
                                  allocate, false);
      },
      "input"_a, "name"_a = py::none(), "op"_a = 0, "prescale_factor"_a = 1.0, "postscale_factor"_a = 1.0,
      "process_set"_a = 0, "dtype_override"_a = py::none(), "stream"_a = py::none(), "allocate"_a = py::none(),
      "Enqueues a reducescatter (Sum or Average) along dim 0; this rank's block comes from Handle.outputs()[0].");
  m.def(
      "grouped_reducescatter_async",
      [](const py::list& inputs, const OptionalName& name, int op, double prescale, double postscale, int process_set,
         const DtypeOverride& dtype_override, const StreamArg& stream, const py::object& allocate) {
        return ReducescatterAsync(inputs, name, op, prescale, postscale, process_set, dtype_override, stream, allocate,
                                  true);
      },
      "inputs"_a, "name"_a = py::none(), "op"_a = 0, "prescale_factor"_a = 1.0, "postscale_factor"_a = 1.0,
      "process_set"_a = 0, "dtype_override"_a = py::none(), "stream"_a = py::none(), "allocate"_a = py::none(),
      "Enqueues reducescatters of every input as one group; outputs in Handle.outputs().");
  m.def(
      "barrier_async",
      [](int process_set) {
        SweepOrphans();
        return MakeHandle(Barrier(process_set), {});
      },
      "process_set"_a = 0, "Enqueues a barrier: the handle completes once every rank of the set has called it.");
  m.def(
      "join_async",
      [](int process_set) {
        SweepOrphans();
        return MakeHandle(Join(process_set), {});
      },
      "process_set"_a = 0, "Enqueues a join: this rank has no more work. Handle.value() is the last rank to join.");
}

}  // namespace accord::python
