// accord._core: the pybind11 module over accord's C++ API.
//
// The module is not compiled against any framework: tensors cross through
// DLPack (see dlpack_import.h and dlpack_export.h), handles keep them alive
// (py_handle.h), and Status codes become exceptions in one place (errors.h).
// The Python package `accord` and `accord.torch` are built on top of it.
#include <mpi.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdio>
#include <cstdlib>

#include "accord/accord.h"
#include "collectives.h"
#include "errors.h"
#include "py_handle.h"

namespace py = pybind11;
using namespace pybind11::literals;

namespace accord::python {
namespace {

constexpr const char* kModuleDoc = R"doc(accord's low-level Python module.

Tensors: every tensor argument is an object with ``__dlpack__`` (numpy.ndarray,
torch.Tensor, ...) or a "dltensor" capsule. It must be a C-contiguous CPU tensor
of dtype uint8, int8, int16, int32, int64, float16, bfloat16, float32, float64 or
bool; ``dtype_override`` (e.g. "bool") reinterprets elements of the same size,
which is how bool data travels through producers whose DLPack export refuses
bool. The module imports a tensor by calling ``__dlpack__()`` and renaming the
capsule "used_dltensor"; it keeps the producer object and the DLPack tensor
alive until the operation's Handle has completed.

Enqueue functions (``*_async``) never block on the network and return a Handle.
``Handle.wait()`` releases the GIL while it blocks.

Outputs the core allocates (allgather, alltoall, reducescatter) are returned by
``Handle.outputs()`` as ``DLPackTensor`` objects: each has ``__dlpack__()`` and
``__dlpack_device__()``, so ``numpy.from_dlpack(t)`` and
``torch.utils.dlpack.from_dlpack(t)`` take the memory without a copy. A
DLPackTensor can be exported once. Its dtype is the input's DLPack dtype (a
uint8 view passed with dtype_override="bool" gives uint8 outputs). It also has
``__array_interface__``: ``numpy.asarray(t)`` views the memory without a copy
and, unlike ``numpy.from_dlpack`` in numpy 1.24, gives a writeable array; the
wrapper then stays alive as the array's base (and refuses ``__dlpack__``).

Errors: invalid arguments raise ValueError, a feature this build lacks
NotImplementedError, a wait that times out TimeoutError, and a failed,
mismatched or shut-down collective AccordError (a RuntimeError).
)doc";

bool at_exit_registered = false;

void ShutdownAndRelease() {
  Status status;
  {
    py::gil_scoped_release release;
    status = Shutdown();
  }
  // Shutdown completed every handle, so the orphans' tensors are free to go.
  ClearOrphans();
  ThrowIfError(status);
}

void InitAccord(const std::vector<std::vector<int>>& process_sets) {
  InitOptions options;
  options.process_sets = process_sets;
  Status status;
  {
    py::gil_scoped_release release;
    status = Init(options);
  }
  ThrowIfError(status);
  // Shut down at interpreter exit, while Python objects (the tensors of
  // handles still in flight) can still be released. Registered at the first
  // init rather than at import so that it runs before the MPI_Finalize of an
  // mpi4py imported earlier (atexit handlers run last-in first-out).
  if (!at_exit_registered) {
    py::module_::import("atexit").attr("register")(py::cpp_function([] {
      if (IsInitialized()) ShutdownAndRelease();
    }));
    at_exit_registered = true;
  }
}

void Abort(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

void DefineLifecycle(py::module_& m) {
  m.def("init", &InitAccord, "process_sets"_a = std::vector<std::vector<int>>{},
        "Initialises accord (collective: every rank calls it). `process_sets` are lists of global ranks that "
        "become process sets 1, 2, ... . Does nothing if accord is already running.");
  m.def("shutdown", &ShutdownAndRelease,
        "Shuts accord down on every rank; pending operations fail with AccordError. init() may be called again.");
  m.def("is_initialized", &IsInitialized);
  m.def("rank", &Rank, "This process's global rank (-1 before init).");
  m.def("size", &Size, "The number of processes (-1 before init).");
  m.def("local_rank", &LocalRank, "Rank among the processes on this host (-1 before init).");
  m.def("local_size", &LocalSize);
  m.def("cross_rank", &CrossRank, "Rank among the processes with this local rank (-1 before init).");
  m.def("cross_size", &CrossSize);
  m.def("mpi_threads_supported", &MpiThreadsSupported, "Whether MPI provides MPI_THREAD_MULTIPLE.");
  m.def("mpi_thread_level", &MpiThreadLevel, "The MPI thread level provided (MPI_THREAD_*), -1 before init.");
  m.def(
      "build_info",
      [] {
        const BuildInfo info = GetBuildInfo();
        return py::dict("version"_a = ACCORD_VERSION_STRING, "mpi"_a = info.mpi, "cuda"_a = info.cuda,
                        "nccl"_a = info.nccl, "cuda_version"_a = info.cuda_version,
                        "nccl_version"_a = info.nccl_version);
      },
      "What this build of accord contains: {'version', 'mpi', 'cuda', 'nccl', 'cuda_version', 'nccl_version'}; "
      "a version is '' when not built (e.g. 'CUDA 13.0 (driver 12.8)', 'NCCL 2.28.9').");
  m.def(
      "metrics",
      [] {
        const Metrics m = GetMetrics();
        return py::dict("collectives"_a = m.collectives, "tensors"_a = m.tensors, "bytes"_a = m.bytes,
                        "fusion_ratio"_a = m.fusion_ratio, "negotiation_rounds"_a = m.negotiation_rounds,
                        "cache_hits"_a = m.cache_hits, "cache_misses"_a = m.cache_misses,
                        "cache_hit_rate"_a = m.cache_hit_rate, "negotiation_seconds"_a = m.negotiation_seconds,
                        "collective_seconds"_a = m.collective_seconds, "driven_iterations"_a = m.driven_iterations,
                        "carried_allreduces"_a = m.carried_allreduces);
      },
      "This process's counters since the last init() (see accord::Metrics in accord.h).");
  m.def(
      "start_timeline",
      [](const std::string& path, bool mark_cycles) { ThrowIfError(StartTimeline(path, mark_cycles)); }, "path"_a,
      "mark_cycles"_a = false, "Rank 0 starts writing a Chrome trace-event timeline to `path` (other ranks: no-op).");
  m.def(
      "stop_timeline", [] { ThrowIfError(StopTimeline()); }, "Flushes and closes the timeline.");
  m.def("abort", &Abort, "code"_a = 1,
        "Ends every rank of the job at once (MPI_Abort): for a test harness whose rank failed while others may "
        "be waiting for it in a collective.");
}

void DefineProcessSets(py::module_& m) {
  m.def(
      "add_process_set",
      [](const std::vector<int>& ranks) {
        auto add = [&] {
          py::gil_scoped_release release;  // blocks until every rank has agreed
          return AddProcessSet(ranks);
        };
        return ValueOrThrow(add());
      },
      "ranks"_a,
      "Adds a process set of the given global ranks (sorted, unique) and returns its id. Collective: every rank "
      "calls it with the same ranks, in the same order relative to other additions and removals.");
  m.def(
      "remove_process_set",
      [](int id) {
        Status status;
        {
          py::gil_scoped_release release;
          status = RemoveProcessSet(id);
        }
        ThrowIfError(status);
      },
      "id"_a, "Removes a process set (collective, like add_process_set); its pending operations fail.");
  m.def(
      "process_set_ranks", [](int id) { return ValueOrThrow(ProcessSetRanks(id)); }, "id"_a,
      "The global ranks of a process set.");
  m.def(
      "process_set_rank", [](int id) { return ValueOrThrow(ProcessSetRank(id)); }, "id"_a,
      "This process's rank within the set, or -1 if it is not a member.");
  m.def("process_set_ids", &ProcessSetIds, "Ids of every process set, the global one (0) included.");
}

void DefineTypes(py::module_& m) {
  DefineHandleType(m);

  py::class_<DLPackTensor>(m, "DLPackTensor",
                           "A CPU tensor allocated by accord, handed over through DLPack without a copy. "
                           "Pass it to numpy.from_dlpack or torch.utils.dlpack.from_dlpack (once).")
      .def("__dlpack__", &DLPackTensor::ToCapsule, py::kw_only(), "stream"_a = py::none())
      .def("__dlpack_device__", &DLPackTensor::Device)
      .def_property_readonly("__array_interface__", &DLPackTensor::ArrayInterface,
                             "numpy's array interface: numpy.asarray(t) views the memory (writeable, no copy) "
                             "and keeps `t` alive as the array's base. Afterwards __dlpack__ refuses.")
      .def_property_readonly("shape", [](const DLPackTensor& t) { return py::tuple(py::cast(t.shape())); })
      .def_property_readonly("dtype", &DLPackTensor::dtype, "The DLPack element type, e.g. 'float32', 'uint8'.")
      .def_property_readonly("data_ptr", &DLPackTensor::data_ptr, "The address of the first element.")
      .def_property_readonly("consumed", &DLPackTensor::consumed, "Whether __dlpack__ has been called.")
      .def("__repr__", [](const DLPackTensor& t) {
        std::string shape;
        for (int64_t d : t.shape()) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
        return "<accord DLPackTensor " + t.dtype() + " [" + shape + "]" + (t.consumed() ? " (consumed)" : "") + ">";
      });
}

}  // namespace
}  // namespace accord::python

PYBIND11_MODULE(_core, m) {
  using namespace accord::python;
  m.doc() = kModuleDoc;
  RegisterExceptions(m);
  m.attr("OP_AVERAGE") = static_cast<int>(accord::ReduceOp::kAverage);
  m.attr("OP_SUM") = static_cast<int>(accord::ReduceOp::kSum);
  m.attr("OP_MIN") = static_cast<int>(accord::ReduceOp::kMin);
  m.attr("OP_MAX") = static_cast<int>(accord::ReduceOp::kMax);
  m.attr("OP_PRODUCT") = static_cast<int>(accord::ReduceOp::kProduct);
  m.attr("OP_ADASUM") = static_cast<int>(accord::ReduceOp::kAdasum);
  m.attr("GLOBAL_PROCESS_SET") = static_cast<int>(accord::kGlobalProcessSet);
  py::dict dtype_ids;  // accord dtype name -> id (allreduce_async_ptr's `dtype`)
  for (int i = 0; i < accord::kNumDataTypes; ++i) {
    dtype_ids[accord::DataTypeName(static_cast<accord::DataType>(i))] = i;
  }
  m.attr("DTYPE_IDS") = dtype_ids;
  m.attr("__version__") = ACCORD_VERSION_STRING;
  DefineLifecycle(m);
  DefineProcessSets(m);
  DefineTypes(m);
  DefineCollectives(m);
}
