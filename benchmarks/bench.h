// Shared pieces of accord_bench: options, statistics, result reporting, and
// the workloads (declared here, defined in comm_workloads.cc and
// cpu_workloads.cc).
//
// accord_bench is single-threaded on its side: the main thread enqueues into
// accord and also calls raw MPI, but only on its own communicator
// (Bench::comm, a dup of MPI_COMM_WORLD), which accord's coordinator never
// touches. That needs MPI_THREAD_MULTIPLE, which main() checks.
#pragma once

#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include <accord/accord.h>

namespace accord::bench {

// Command-line options; every field has the default that the docs quote.
struct Options {
  std::vector<std::string> workloads = {"w1", "w2", "w3", "c"};
  int w1_iters = 2000;
  int w1_warmup = 200;
  std::vector<int> w2_sizes_mib = {1, 16, 64};
  int w2_reps = 10;
  int w2_warmup = 2;
  int w3_tensors = 256;
  int w3_elems = 4096;
  int w3_steps = 50;
  int w3_reps = 3;
  int w3_warmup_steps = 5;
  int matrix_n = 256;      // C: the compute loop multiplies n x n float matrices
  int compute_ms = 150;    // C: length of one timed compute sample
  int compute_samples = 9; // C: samples per condition; the median is reported

  bool Enabled(const std::string& workload) const;
};

// Parses --key=value flags; prints usage and returns false on --help or an
// unknown flag.
bool ParseOptions(int argc, char** argv, Options* options);

// Seconds on a monotonic clock.
inline double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The q-quantile (0..1) of `samples` (nearest rank). Takes a copy.
double Quantile(std::vector<double> samples, double q);
inline double Median(std::vector<double> samples) { return Quantile(std::move(samples), 0.5); }

// One figure: accord's value beside the raw MPI reference, with the target
// the lead must meet. Kinds of target: a ratio lower bound ("ratio >= x"), an
// absolute upper bound on accord's value ("accord <= x"), or none.
struct Figure {
  std::string workload;   // "W1", "W2", ...
  std::string metric;     // "median_us", "busbw_GBps", ...
  std::string reference;  // what `raw` is: "mpi_allreduce", "hand_packed", "base", ...
  double accord = 0;
  double raw = 0;         // 0 when there is no reference
  double ratio = 0;       // accord / raw (0 when there is no reference)
  std::string target;     // human-readable, "" when none
  bool has_target = false;
  bool met = false;
};

// A figure with ratio = accord / raw (0 when raw is 0) and no target yet.
Figure MakeFigure(std::string workload, std::string metric, std::string reference, double accord,
                  double raw);

// Collects figures on rank 0 and prints them: one JSON line each as they
// arrive ("ACCORD_BENCH {...}", easy to grep), and a table at the end.
class Reporter {
 public:
  Reporter(int rank, int size) : rank_(rank), size_(size) {}
  // Records a figure with an optional ratio target (ratio >= min_ratio).
  void AddRatio(Figure figure, double min_ratio);
  // Records a figure whose accord value must stay <= max_value.
  void AddUpperBound(Figure figure, double max_value);
  void Add(Figure figure);
  void PrintTable() const;

 private:
  void Emit(const Figure& figure);
  int rank_;
  int size_;
  std::vector<Figure> figures_;
};

// Everything a workload needs.
struct Bench {
  Options options;
  MPI_Comm comm = MPI_COMM_NULL;  // raw MPI's own communicator
  int rank = 0;
  int size = 1;
  Reporter* reporter = nullptr;
  int failures = 0;               // correctness failures seen on this rank
};

// Prints `what` and the status with this rank and aborts the job: a failed
// collective leaves the other ranks waiting, so there is no clean way on.
void DieIfError(const Status& status, const char* what);
void DieIfMpiError(int mpi_code, const char* what);

// Fills `data` with `value`.
void Fill(float* data, int64_t n, float value);
// Returns the number of elements != expected, printing the first few with
// rank, label, index, expected and got.
int64_t CountMismatches(const char* label, int rank, const float* data, int64_t n, float expected);

// A float32 view of `n` elements at `data`.
TensorView FloatView(float* data, int64_t n);

// Workloads. Each records its figures through bench->reporter (on rank 0)
// and adds correctness failures to bench->failures.
void RunW1(Bench* bench);
void RunW2(Bench* bench);
void RunW3(Bench* bench);

// The CPU-interference workloads are split around accord's lifetime:
// MeasureComputeBase runs while accord is not initialised (MPI may or may not
// be), RunC1C2 while it is. CalibrateCompute picks how many products make one
// sample of about Options::compute_ms on this rank.
struct ComputeState {
  int products_per_sample = 0;
  std::vector<double> base_rates;       // products/s, measured before Init
  std::vector<double> base_rates_after; // products/s, measured after Shutdown
  std::vector<double> c1_rates;
  std::vector<double> c2_rates;
};
void CalibrateCompute(const Options& options, ComputeState* state);
// Appends `compute_samples` rates (products/s) of samples of `products`
// products; `comm` may be MPI_COMM_NULL (before MPI exists), otherwise the
// ranks start each sample together.
void MeasureComputeBase(const Options& options, int products, MPI_Comm comm,
                        std::vector<double>* rates);
void RunC1C2(Bench* bench, ComputeState* state);
// Reports base, C1 and C2 (on rank 0, from rank 0's rates).
void ReportCompute(Bench* bench, const ComputeState& state);

}  // namespace accord::bench
