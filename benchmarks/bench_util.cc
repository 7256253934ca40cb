// Options, statistics and reporting for accord_bench.
#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "bench.h"

namespace accord::bench {

namespace {

constexpr char kUsage[] =
    "usage: mpirun -np 2 --bind-to core accord_bench [--key=value ...]\n"
    "  --workloads=w1,w2,w3,c   which workloads to run (default: all)\n"
    "  --w1-iters=2000 --w1-warmup=200\n"
    "  --w2-sizes-mib=1,16,64 --w2-reps=20 --w2-warmup=1\n"
    "  --w3-tensors=256 --w3-elems=4096 --w3-steps=50 --w3-reps=5 --w3-warmup-steps=5\n"
    "  --matrix-n=256 --compute-ms=500 --compute-rounds=8 --compute-samples=2\n"
    "  --verbose=1              also print every compute sample\n"
    "  --reference=alone|beside run raw MPI with accord shut down (default) or idle beside it\n"
    "Figures are printed as a table and as 'ACCORD_BENCH {json}' lines on rank 0.\n";

std::vector<std::string> SplitCommas(const std::string& text) {
  std::vector<std::string> parts;
  std::stringstream stream(text);
  std::string part;
  while (std::getline(stream, part, ',')) {
    if (!part.empty()) parts.push_back(part);
  }
  return parts;
}

// Parses a whole decimal number >= `min`.
bool ParseInt(const std::string& text, int min, int* out) {
  char* end = nullptr;
  const long value = std::strtol(text.c_str(), &end, 10);
  if (end == text.c_str() || *end != '\0' || value < min || value > 1 << 30) return false;
  *out = static_cast<int>(value);
  return true;
}

// Applies one "key=value" pair; false if the key is unknown or the value bad.
bool ApplyFlag(const std::string& key, const std::string& value, Options* o) {
  const std::vector<IntFlag> int_flags = {
      {"w1-iters", &o->w1_iters, 1},
      {"w1-warmup", &o->w1_warmup, 0},
      {"w2-reps", &o->w2_reps, 1},
      {"w2-warmup", &o->w2_warmup, 0},
      {"w3-tensors", &o->w3_tensors, 1},
      {"w3-elems", &o->w3_elems, 1},
      {"w3-steps", &o->w3_steps, 1},
      {"w3-reps", &o->w3_reps, 1},
      {"w3-warmup-steps", &o->w3_warmup_steps, 0},
      {"matrix-n", &o->matrix_n, 1},
      {"compute-ms", &o->compute_ms, 1},
      {"compute-rounds", &o->compute_rounds, 1},
      {"compute-samples", &o->compute_samples, 1},
      {"verbose", &o->verbose, 0},
  };
  if (const std::optional<bool> parsed = ApplyIntFlag(int_flags, key, value)) return *parsed;
  if (key == "workloads") return ParseWorkloads(value, {"w1", "w2", "w3", "c"}, &o->workloads);
  if (key == "reference") {
    o->reference = value;
    return value == "alone" || value == "beside";
  }
  if (key == "w2-sizes-mib") {
    o->w2_sizes_mib.clear();
    for (const std::string& part : SplitCommas(value)) {
      int mib = 0;
      if (!ParseInt(part, 1, &mib) || mib > 1024) return false;
      o->w2_sizes_mib.push_back(mib);
    }
    return !o->w2_sizes_mib.empty();
  }
  return false;
}

}  // namespace

bool Options::Enabled(const std::string& workload) const {
  return std::find(workloads.begin(), workloads.end(), workload) != workloads.end();
}

bool ParseOptions(int argc, char** argv, Options* options) {
  return ParseFlags(argc, argv, kUsage, [options](const std::string& key, const std::string& value) {
    return ApplyFlag(key, value, options);
  });
}

bool ParseFlags(int argc, char** argv, const char* usage,
                const std::function<bool(const std::string& key, const std::string& value)>& apply) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const size_t eq = arg.find('=');
    if (arg.rfind("--", 0) != 0 || eq == std::string::npos) {
      std::fprintf(stderr, "%s", usage);
      return false;
    }
    if (!apply(arg.substr(2, eq - 2), arg.substr(eq + 1))) {
      std::fprintf(stderr, "bad flag '%s'\n%s", arg.c_str(), usage);
      return false;
    }
  }
  return true;
}

std::optional<bool> ApplyIntFlag(const std::vector<IntFlag>& flags, const std::string& key, const std::string& value) {
  for (const IntFlag& flag : flags) {
    if (key == flag.name) return ParseInt(value, flag.min, flag.field);
  }
  return std::nullopt;
}

bool ParseWorkloads(const std::string& value, const std::vector<std::string>& known, std::vector<std::string>* out) {
  std::vector<std::string> workloads = SplitCommas(value);
  for (std::string& w : workloads) {
    std::transform(w.begin(), w.end(), w.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (std::find(known.begin(), known.end(), w) == known.end()) return false;
  }
  *out = std::move(workloads);
  return true;
}

double LoadAverage() {
  double load = -1;
  if (FILE* file = std::fopen("/proc/loadavg", "r")) {
    if (std::fscanf(file, "%lf", &load) != 1) load = -1;
    std::fclose(file);
  }
  return load;
}

void UseReference(Bench* bench) {
  if (bench->options.reference == "alone" && IsInitialized()) bench->stop_accord();
}

void UseAccord(Bench* bench) {
  if (!IsInitialized()) bench->start_accord();
}

double Quantile(std::vector<double> samples, double q) {
  if (samples.empty()) return 0;
  std::sort(samples.begin(), samples.end());
  const size_t index = static_cast<size_t>(std::ceil(q * samples.size()));
  return samples[std::min(samples.size() - 1, index == 0 ? 0 : index - 1)];
}

namespace {

// The median over rounds of combine(median(a's round), median(b's round)).
template <typename Combine>
double PairedMedian(const std::vector<double>& a, const std::vector<double>& b, int per_round, Combine combine) {
  std::vector<double> per_round_values;
  const size_t n = std::min(a.size(), b.size());
  for (size_t first = 0; first + per_round <= n; first += per_round) {
    const std::vector<double> a_round(a.begin() + first, a.begin() + first + per_round);
    const std::vector<double> b_round(b.begin() + first, b.begin() + first + per_round);
    per_round_values.push_back(combine(Median(a_round), Median(b_round)));
  }
  return Median(per_round_values);
}

}  // namespace

double PairedRatio(const std::vector<double>& a, const std::vector<double>& b, int per_round) {
  return PairedMedian(a, b, per_round, [](double x, double y) { return x / y; });
}

double PairedDifference(const std::vector<double>& a, const std::vector<double>& b, int per_round) {
  return PairedMedian(a, b, per_round, [](double x, double y) { return x - y; });
}

Figure MakeFigure(std::string workload, std::string metric, std::string reference, double accord, double raw) {
  Figure figure;
  figure.workload = std::move(workload);
  figure.metric = std::move(metric);
  figure.reference = std::move(reference);
  figure.accord = accord;
  figure.raw = raw;
  figure.ratio = raw != 0 ? accord / raw : 0;
  return figure;
}

void Reporter::AddRatio(Figure figure, double min_ratio) {
  figure.has_target = true;
  char text[64];
  std::snprintf(text, sizeof(text), "ratio >= %.2f", min_ratio);
  figure.target = text;
  figure.met = figure.ratio >= min_ratio;
  Emit(figure);
}

long ProcessContextSwitches() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_nvcsw + usage.ru_nivcsw;
}

void Reporter::AddUpperBound(Figure figure, double max_value) {
  figure.has_target = true;
  char text[64];
  std::snprintf(text, sizeof(text), "accord <= %g", max_value);
  figure.target = text;
  figure.met = figure.accord <= max_value;
  Emit(figure);
}

void Reporter::Add(Figure figure) { Emit(figure); }

void Reporter::Emit(const Figure& figure) {
  if (rank_ != 0) return;
  figures_.push_back(figure);
  std::printf(
      "ACCORD_BENCH {\"workload\":\"%s\",\"metric\":\"%s\",\"np\":%d,\"accord\":%.6g,"
      "\"reference\":\"%s\",\"reference_mode\":\"%s\",\"raw\":%.6g,\"ratio\":%.4f,"
      "\"target\":\"%s\",\"met\":%s,\"load1\":%.2f}\n",
      figure.workload.c_str(), figure.metric.c_str(), size_, figure.accord, figure.reference.c_str(),
      reference_mode_.c_str(), figure.raw, figure.ratio, figure.target.c_str(),
      !figure.has_target ? "null" : (figure.met ? "true" : "false"), LoadAverage());
  std::fflush(stdout);
}

void Reporter::PrintTable() const {
  if (rank_ != 0) return;
  std::printf("\n%s, np=%d, references run %s (ratio = accord / reference, paired)\n", program_.c_str(), size_,
              reference_mode_ == "alone" ? "with accord shut down" : "beside idle accord");
  std::printf("load average now %.2f (other users' jobs on the machine distort every figure)\n", LoadAverage());
  std::printf("%-4s %-28s %12s %-16s %12s %8s  %-16s %s\n", "id", "metric", "accord", "reference", "reference", "ratio",
              "target", "");
  for (const Figure& f : figures_) {
    char raw[32] = "-", ratio[32] = "-";
    if (f.raw != 0) {
      std::snprintf(raw, sizeof(raw), "%.4g", f.raw);
      std::snprintf(ratio, sizeof(ratio), "%.3f", f.ratio);
    }
    std::printf("%-4s %-28s %12.4g %-16s %12s %8s  %-16s %s\n", f.workload.c_str(), f.metric.c_str(), f.accord,
                f.reference.empty() ? "-" : f.reference.c_str(), raw, ratio, f.target.empty() ? "-" : f.target.c_str(),
                !f.has_target ? "" : (f.met ? "met" : "MISSED"));
  }
  std::fflush(stdout);
}

void DieIfError(const Status& status, const char* what) {
  if (status.ok()) return;
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::fprintf(stderr, "rank %d: %s failed: %s\n", rank, what, status.ToString().c_str());
  MPI_Abort(MPI_COMM_WORLD, 2);
}

void DieIfMpiError(int mpi_code, const char* what) {
  if (mpi_code == MPI_SUCCESS) return;
  char message[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(mpi_code, message, &length);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::fprintf(stderr, "rank %d: %s failed: %s\n", rank, what, message);
  MPI_Abort(MPI_COMM_WORLD, 2);
}

void Fill(float* data, int64_t n, float value) { std::fill(data, data + n, value); }

int64_t CountMismatches(const char* label, int rank, const float* data, int64_t n, float expected) {
  int64_t mismatches = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (data[i] == expected) continue;
    if (++mismatches <= 3) {
      std::fprintf(stderr, "rank %d: %s[%lld]: expected %g, got %g\n", rank, label, static_cast<long long>(i), expected,
                   data[i]);
    }
  }
  return mismatches;
}

TensorView FloatView(float* data, int64_t n) {
  TensorView view;
  view.data = data;
  view.dtype = DataType::kFloat32;
  view.shape = {n};
  return view;
}

}  // namespace accord::bench
