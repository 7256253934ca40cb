// Helpers shared by the multi-rank test programs in tests/mpi/.
//
// The pattern every program follows:
//   1. each rank fills its inputs from a seed made of a data key and its own
//      rank (GenerateValues), so any rank can regenerate any other rank's
//      input without communicating;
//   2. it enqueues the collective(s) and waits (WaitFor);
//   3. it computes the expected output locally from every rank's regenerated
//      input (Reference*) and compares element by element (ExpectValues),
//      failing with rank, tensor name, index, expected and got.
//
// Values are small integers (|v| <= 8, products of at most four values in
// {-1, 1, 2}), so sums and products are exact in every dtype, float16 and
// bfloat16 included, and results compare exactly. Only a division
// (Average) or a non power-of-two scale can round; callers then pass a
// tolerance from Tolerance(dtype).
//
// Thread safety: call from the test's thread only (they use Catch2
// assertions), except where a function says otherwise.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "accord/accord.h"

namespace accord_test {

// This rank and the global size (accord::Rank()/Size(), cached by main).
int Rank();
int Size();
// Global ranks 0 .. Size()-1.
std::vector<int> AllRanks();
// The device of every TestTensor: the CPU, or cuda:0 when the environment
// has ACCORD_TEST_DEVICE=cuda. The suites run that way with
// ACCORD_CUDA_HOST_EMULATION=1, where "device" memory is host memory: the
// same checks then cover the GPU path (tests/CMakeLists.txt, "_cuda" runs).
accord::Device TestDevice();

// ------------------------------------------------------------------- values

enum class ValueKind {
  kSmall,    // integers in [-8, 8] ([0, 8] unsigned); bool true with p = 1/4
  kProduct,  // {-1, 1, 2} ({1, 2} unsigned); bool true with p = 3/4
};

// All ten dtypes, in enum order.
const std::vector<accord::DataType>& AllDataTypes();
bool IsSigned(accord::DataType dtype);

// A seed for (data key, rank): the same on every rank for the same inputs.
uint64_t Seed(const std::string& key, int rank);
// Value `index` of the stream for `seed`: a pure function, so huge inputs
// can be checked without materialising every rank's values.
double ValueAt(accord::DataType dtype, uint64_t seed, int64_t index, ValueKind kind = ValueKind::kSmall);
// n values of `kind` for `dtype`, deterministic in `seed`: ValueAt(seed, 0..n-1).
std::vector<double> GenerateValues(accord::DataType dtype, int64_t n, uint64_t seed,
                                   ValueKind kind = ValueKind::kSmall);
// The input rank `rank` uses for data key `key`: GenerateValues(Seed(key, rank)).
std::vector<double> RankValues(const std::string& key, int rank, accord::DataType dtype, int64_t n,
                               ValueKind kind = ValueKind::kSmall);

// `value` as it reads back after being stored in `dtype`: integers rounded
// toward zero (the tests stay far from overflow), float16/bfloat16/float32
// rounded to nearest-even, bool is value != 0.
double RoundToDataType(accord::DataType dtype, double value);

// Reads/writes element i of a CPU tensor as a double (with RoundToDataType
// semantics on write).
double ReadElement(const accord::TensorView& tensor, int64_t index);
void WriteElement(const accord::TensorView& tensor, int64_t index, double value);

// ------------------------------------------------------------- TestTensor

// A tensor that owns its bytes, with a TensorView onto them, on TestDevice(). Movable (the
// view stays valid: a moved vector keeps its buffer), not copyable.
class TestTensor {
 public:
  TestTensor() = default;
  TestTensor(accord::DataType dtype, accord::Shape shape);  // zero-filled
  TestTensor(accord::DataType dtype, accord::Shape shape, const std::vector<double>& values);
  TestTensor(TestTensor&&) = default;
  TestTensor& operator=(TestTensor&&) = default;
  TestTensor(const TestTensor&) = delete;
  TestTensor& operator=(const TestTensor&) = delete;

  const accord::TensorView& view() const { return view_; }
  accord::DataType dtype() const { return view_.dtype; }
  const accord::Shape& shape() const { return view_.shape; }
  int64_t num_elements() const { return view_.num_elements(); }

 private:
  std::vector<uint8_t> bytes_;
  accord::TensorView view_;
};

// --------------------------------------------------------------- references

struct ReduceSpec {
  accord::ReduceOp op = accord::ReduceOp::kSum;
  double prescale = 1.0;
  double postscale = 1.0;
};

// Reduces per-rank value vectors (all the same length) the way accord
// defines it: op over (x * prescale), Average divides by inputs.size(), then
// * postscale, then RoundToDataType.
std::vector<double> Reduce(accord::DataType dtype, const std::vector<std::vector<double>>& inputs,
                           const ReduceSpec& spec);

// The expected allreduce result over `ranks` (global ranks of the process
// set), each contributing RankValues(key, r, dtype, n, kind).
std::vector<double> ReferenceAllreduce(const std::string& key, const std::vector<int>& ranks, accord::DataType dtype,
                                       int64_t n, ValueKind kind, const ReduceSpec& spec);

// Rows of dim 0 that set rank `set_rank` of `set_size` keeps in a
// reducescatter of `rows` rows: the first rows % set_size ranks get one more.
int64_t ReducescatterRows(int64_t rows, int set_size, int set_rank);
int64_t ReducescatterFirstRow(int64_t rows, int set_size, int set_rank);

// Elements per row (product of dims 1..), 1 for a 1-D shape.
int64_t RowElements(const accord::Shape& shape);

// ------------------------------------------------------------- comparisons

// Relative tolerance for a result that went through one rounding division:
// a couple of units in the last place of `dtype`; 0 for integers and bool.
double Tolerance(accord::DataType dtype);

// Checks `got` (dtype `dtype`, shape `shape`) against `expected` element by
// element; |got - want| <= tolerance * max(1, |want|) passes. Fails the
// current test case with up to five messages naming the rank, `what`, the
// index, the expected and the received value. Returns true if all matched.
bool ExpectValues(const std::string& what, const accord::TensorView& got, accord::DataType dtype,
                  const accord::Shape& shape, const std::vector<double>& expected, double tolerance = 0.0);

// ExpectValues with the expected value of element i computed on demand.
bool ExpectValuesFn(const std::string& what, const accord::TensorView& got, accord::DataType dtype,
                    const accord::Shape& shape, const std::function<double(int64_t)>& expected, double tolerance = 0.0);

// ------------------------------------------------------------- handles

// How long WaitFor waits before declaring a hang (ACCORD_TEST_WAIT_TIMEOUT_S,
// default 100 s).
// Options of an allreduce Sum named `name`.
accord::AllreduceOptions SumOptions(const std::string& name);
// A Sum allreduce of `n` float32 over all ranks, waited for and checked.
void CheckSumAllreduce(const std::string& name, int64_t n);

std::chrono::milliseconds HangTimeout();

// The handle of an enqueue that must succeed: CHECKs the Result and returns
// its handle, or an invalid Handle (which WaitFor reports) if it failed.
accord::Handle Enqueued(accord::Result<accord::Handle> result, const std::string& what);

// Waits for `handle` up to HangTimeout() and returns its Status. An invalid
// handle returns kInternal. A timeout is treated as a hang: the rank prints
// `what` and exits non-zero at once, so mpirun stops the job (continuing
// could free memory a stuck operation still points at).
accord::Status WaitFor(const accord::Handle& handle, const std::string& what);
// WaitFor, then CHECK that the status is OK; returns whether it was.
bool WaitOk(const accord::Handle& handle, const std::string& what);

// Records a handle that is expected to stay pending until main's final
// accord::Shutdown() and then complete with kShutDown. The tensors keep the
// operation's memory alive until then. Call from the test thread.
void ExpectShutDownAtExit(accord::Handle handle, std::vector<TestTensor> tensors, const std::string& what);
// Called by main after Shutdown(): checks every recorded handle completed
// with kShutDown, prints what did not, and returns the number of failures.
int CheckShutDownAtExitHandles();

// Prints `message` (prefixed with the rank), then this rank's Catch log if
// it was redirected, and exits with status 3. For hangs and fatal signals.
[[noreturn]] void DieWithLog(const std::string& message);
// Set by main: the file this rank's stdout (and so Catch's report) goes to,
// "" when it is the real stdout (rank 0).
void SetCatchLogPath(const std::string& path);
// Prints the file at `path` to stderr, "[rank k] " before every line.
void PrintLogPrefixed(const std::string& path);
void SetRankAndSize(int rank, int size);
// A program whose cases call accord's internals below the runtime (which
// must then not run: it owns MPI's datatypes and communicators) calls this
// from a namespace-scope initializer, e.g.
//   const bool kNoRuntime = accord_test::RunWithoutRuntime();
// main then initialises and finalises MPI itself instead of calling
// accord::Init() and accord::Shutdown(). Returns true.
bool RunWithoutRuntime();
bool WithoutRuntime();

}  // namespace accord_test
