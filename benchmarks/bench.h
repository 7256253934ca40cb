// Shared pieces of accord_bench: options, statistics, result reporting, and
// the workloads (declared here, defined in comm_workloads.cc and
// cpu_workloads.cc).
//
// accord_bench is single-threaded on its side: the main thread enqueues into
// accord and also calls raw MPI, but only on its own communicator
// (Bench::comm, a dup of MPI_COMM_WORLD), which accord's coordinator never
// touches. That needs MPI_THREAD_MULTIPLE, which main() checks. accord is
// shut down and initialised again during the run (UseReference/UseAccord);
// MPI stays initialised throughout, so Bench::comm does too.
#pragma once

#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <accord/accord.h>

namespace accord::bench {

// Command-line options; every field has the default that the docs quote.
struct Options {
  std::vector<std::string> workloads = {"w1", "w2", "w3", "c"};
  int w1_iters = 2000;
  int w1_warmup = 200;  // untimed ops per side before the first block
  std::vector<int> w2_sizes_mib = {1, 16, 64};
  int w2_reps = 20;   // timed ops per side, in rounds of 4
  int w2_warmup = 1;  // untimed ops per side per round
  int w3_tensors = 256;
  int w3_elems = 4096;
  int w3_steps = 50;
  int w3_reps = 5;          // rounds; each times w3_steps steps per variant
  int w3_warmup_steps = 5;  // untimed steps per variant per round
  int matrix_n = 256;       // C: the compute loop multiplies n x n float matrices
  int compute_ms = 500;     // C: length of one timed compute sample (shorter is noise-bound on a shared VM)
  int compute_rounds = 8;   // C: rounds of (base, Init, C1, C2, Shutdown)
  int compute_samples = 2;  // C: samples per condition per round
  int verbose = 0;          // 1: also print every C sample
  // "alone": raw MPI references run while accord is shut down; "beside":
  // while accord is initialised and idle (its coordinator polling beside).
  std::string reference = "alone";

  bool Enabled(const std::string& workload) const;
};

// Parses --key=value flags; prints usage and returns false on --help or an
// unknown flag.
bool ParseOptions(int argc, char** argv, Options* options);

// Flag parsing that gpu_bench shares.
//
// Calls apply(key, value) for each "--key=value" argument; prints `usage`
// and returns false at the first argument that is not one or that apply
// refuses.
bool ParseFlags(int argc, char** argv, const char* usage,
                const std::function<bool(const std::string& key, const std::string& value)>& apply);
// A flag whose value is a whole decimal number >= min.
struct IntFlag {
  const char* name;
  int* field;
  int min;  // counts of timed work must be positive; warm-ups may be 0
};
// If `key` names one of `flags`, sets its field from `value` and returns
// whether that parsed; std::nullopt if it names none.
std::optional<bool> ApplyIntFlag(const std::vector<IntFlag>& flags, const std::string& key, const std::string& value);
// A comma-separated list of workload names, lower-cased, each one of
// `known`; false (and *out unchanged) otherwise.
bool ParseWorkloads(const std::string& value, const std::vector<std::string>& known, std::vector<std::string>* out);

// The 1-minute load average of the machine (from /proc/loadavg; -1 if it
// cannot be read). Recorded with every figure: on a machine shared with other
// users' jobs, the figures are only worth comparing when it is low.
double LoadAverage();

// Voluntary and involuntary context switches of every thread of this
// process so far (getrusage RUSAGE_SELF).
long ProcessContextSwitches();

// Seconds on a monotonic clock.
inline double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The q-quantile (0..1) of `samples` (nearest rank). Takes a copy.
double Quantile(std::vector<double> samples, double q);
inline double Median(std::vector<double> samples) { return Quantile(std::move(samples), 0.5); }

// The figures of merit compare accord with a reference measured next to it
// in time. `a` and `b` hold samples taken in rounds of `per_round`, round k
// of `a` just before or after round k of `b`. Returns the median over rounds
// of median(a's round) / median(b's round), so that slow drift of the shared
// machine cancels instead of landing on whichever ran during a busy spell.
double PairedRatio(const std::vector<double>& a, const std::vector<double>& b, int per_round);
// The same pairing for an absolute cost: the median over rounds of
// median(a's round) - median(b's round).
double PairedDifference(const std::vector<double>& a, const std::vector<double>& b, int per_round);

// One figure: accord's value beside the raw MPI reference, with the target
// accord must meet. Kinds of target: a ratio lower bound ("ratio >= x"), an
// absolute upper bound on accord's value ("accord <= x"), or none.
struct Figure {
  std::string workload;   // "W1", "W2", ...
  std::string metric;     // "median_us", "busbw_GBps", ...
  std::string reference;  // what `raw` is: "mpi_allreduce", "hand_packed", "base", ...
  double accord = 0;
  double raw = 0;      // 0 when there is no reference
  double ratio = 0;    // accord / raw, paired (PairedRatio); 0 without a reference
  std::string target;  // human-readable, "" when none
  bool has_target = false;
  bool met = false;
};

// A figure with ratio = accord / raw (0 when raw is 0) and no target yet.
Figure MakeFigure(std::string workload, std::string metric, std::string reference, double accord, double raw);

// Collects figures on rank 0 and prints them: one JSON line each as they
// arrive ("ACCORD_BENCH {...}", easy to grep), and a table at the end.
class Reporter {
 public:
  // `reference_mode` is Options::reference, recorded in every JSON line;
  // `program` heads the table.
  Reporter(int rank, int size, std::string reference_mode, std::string program = "accord_bench")
      : rank_(rank), size_(size), reference_mode_(std::move(reference_mode)), program_(std::move(program)) {}
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
  std::string reference_mode_;
  std::string program_;
  std::vector<Figure> figures_;
};

// Everything a workload needs.
struct Bench {
  Options options;
  MPI_Comm comm = MPI_COMM_NULL;  // raw MPI's own communicator
  int rank = 0;
  int size = 1;
  Reporter* reporter = nullptr;
  int failures = 0;  // correctness failures seen on this rank
  // Initialise / shut down accord (set by main). start_accord fills in comm,
  // rank and size the first time.
  std::function<void()> start_accord;
  std::function<void()> stop_accord;
};

// Before a raw-MPI reference: shuts accord down if --reference=alone.
void UseReference(Bench* bench);
// Before accord's turn: initialises accord if it is not.
void UseAccord(Bench* bench);

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

// The CPU-interference workloads. The base rate needs accord not
// initialised, so RunCompute cycles accord: `compute_rounds` rounds of
//   base samples -> start_accord() -> C1 samples, C2 samples -> stop_accord().
// Interleaving keeps the machine's drift out of the ratios: C1's and C2's
// ratios are medians over rounds of the ratio to the same round's base.
// Rates are products/s, rank 0's.
struct ComputeState {
  struct Condition {
    std::vector<double> rates;           // products/s of wall time
    std::vector<double> other_shares;    // CPU of the other threads / wall time
    std::vector<double> modelled_rates;  // see cpu_workloads.cc
    std::vector<double> other_wakeups;   // the other threads' wake-ups per second
  };
  int products_per_sample = 0;  // calibrated on this rank to ~compute_ms
  Condition base, c1, c2;
};
// Runs the rounds. Before the first start_accord() bench->comm is
// MPI_COMM_NULL (MPI does not exist yet) and the ranks do not line up their
// base samples.
void RunCompute(Bench* bench, ComputeState* state);
void ReportCompute(Bench* bench, const ComputeState& state);

}  // namespace accord::bench
