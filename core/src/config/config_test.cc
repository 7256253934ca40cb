// Tests for Config: defaults, every knob by its ACCORD_* and HOROVOD_* names,
// precedence, and every kind of malformed value, through FromLookup.
#include "config/config.h"

#include <catch2/catch.hpp>

#include <cstdlib>
#include <map>
#include <string>
#include <vector>

namespace accord {
namespace {

using Env = std::map<std::string, std::string>;

Config::Lookup LookupIn(const Env& env) {
  return [env](const char* name) -> std::optional<std::string> {
    auto it = env.find(name);
    if (it == env.end()) return std::nullopt;
    return it->second;
  };
}

// Parses `env`, failing the test (with the Status) if that fails.
Config MustParse(const Env& env) {
  Result<Config> config = Config::FromLookup(LookupIn(env));
  INFO("FromLookup failed: " << config.status());
  REQUIRE(config.ok());
  return config.value();
}

// Fails the test unless parsing `env` gives InvalidArgument naming each of `mentions`.
void CheckRejected(const Env& env, const std::vector<std::string>& mentions) {
  Result<Config> config = Config::FromLookup(LookupIn(env));
  for (const auto& [name, value] : env) UNSCOPED_INFO(name << "=\"" << value << "\"");
  REQUIRE_FALSE(config.ok());
  CHECK(config.status().code() == StatusCode::kInvalidArgument);
  const std::string& message = config.status().message();
  for (const std::string& mention : mentions) {
    INFO("message \"" << message << "\" should mention \"" << mention << "\"");
    CHECK(message.find(mention) != std::string::npos);
  }
}

// One knob: its variables, a valid non-default value, and how to read it back.
struct KnobCase {
  const char* name;
  const char* horovod_name;  // nullptr if none
  const char* text;
  std::string expected;  // the field as ToString() prints it
  std::string (*get)(const Config&);
  bool integral;
};

std::string Printed(const Config& config, const std::string& key) {
  std::string line = " " + config.ToString() + " ";
  size_t at = line.find(" " + key + "=");
  if (at == std::string::npos) return "<missing " + key + ">";
  size_t begin = at + key.size() + 2;
  return line.substr(begin, line.find(' ', begin) - begin);
}

const std::vector<KnobCase>& Knobs() {
  static const std::vector<KnobCase> kCases = {
      {"ACCORD_FUSION_THRESHOLD", "HOROVOD_FUSION_THRESHOLD", "1048576", "1048576",
       [](const Config& c) { return std::to_string(c.fusion_threshold_bytes); }, true},
      {"ACCORD_STAGING_WINDOW_BYTES", nullptr, "0", "0",
       [](const Config& c) { return std::to_string(c.staging_window_bytes); }, true},
      {"ACCORD_LONE_ALLREDUCE", nullptr, " In_Place ", "in_place",
       [](const Config& c) { return std::string(LoneAllreduceName(c.lone_allreduce)); }, false},
      {"ACCORD_MPI_MAX_COUNT", nullptr, "1", "1", [](const Config& c) { return std::to_string(c.mpi_max_count); },
       true},
      {"ACCORD_HIERARCHICAL_ALLREDUCE", "HOROVOD_HIERARCHICAL_ALLREDUCE", "1", "1",
       [](const Config& c) { return std::string(c.hierarchical_allreduce ? "1" : "0"); }, false},
      {"ACCORD_HIERARCHICAL_ALLGATHER", "HOROVOD_HIERARCHICAL_ALLGATHER", "yes", "1",
       [](const Config& c) { return std::string(c.hierarchical_allgather ? "1" : "0"); }, false},
      {"ACCORD_CACHE_CAPACITY", "HOROVOD_CACHE_CAPACITY", "17", "17",
       [](const Config& c) { return std::to_string(c.cache_capacity); }, true},
      {"ACCORD_CYCLE_TIME_MS", "HOROVOD_CYCLE_TIME", "2.5", "2.5",
       [](const Config& c) { return Printed(c, "cycle_time_ms"); }, false},
      {"ACCORD_IDLE_TIMEOUT_US", nullptr, "250", "250",
       [](const Config& c) { return std::to_string(c.idle_timeout_us); }, true},
      {"ACCORD_IDLE_BACKOFF_MAX_US", nullptr, "0", "0",
       [](const Config& c) { return std::to_string(c.idle_backoff_max_us); }, true},
      {"ACCORD_POLL_SPIN_US", nullptr, "0", "0", [](const Config& c) { return std::to_string(c.poll_spin_us); }, true},
      {"ACCORD_POLL_WAITED_SPIN_US", nullptr, "0", "0",
       [](const Config& c) { return std::to_string(c.poll_waited_spin_us); }, true},
      {"ACCORD_POLL_MAX_SLEEP_US", nullptr, "64", "64",
       [](const Config& c) { return std::to_string(c.poll_max_sleep_us); }, true},
      {"ACCORD_DEVICE_SPIN_US", nullptr, "0", "0", [](const Config& c) { return std::to_string(c.device_spin_us); },
       true},
      {"ACCORD_COORDINATOR_SLICE_US", nullptr, "0", "0",
       [](const Config& c) { return std::to_string(c.coordinator_slice_us); }, true},
      {"ACCORD_FAST_PATH", nullptr, "off", "0", [](const Config& c) { return std::string(c.fast_path ? "1" : "0"); },
       false},
      {"ACCORD_CARRY_SMALL_ALLREDUCE", nullptr, "no", "0",
       [](const Config& c) { return std::string(c.carry_small_allreduce ? "1" : "0"); }, false},
      {"ACCORD_LOG_LEVEL", "HOROVOD_LOG_LEVEL", "debug", "debug",
       [](const Config& c) { return std::string(LogLevelName(c.log_level)); }, false},
      {"ACCORD_LOG_HIDE_TIME", "HOROVOD_LOG_HIDE_TIME", "true", "1",
       [](const Config& c) { return std::string(c.log_hide_time ? "1" : "0"); }, false},
      {"ACCORD_STALL_CHECK_TIME_SECONDS", "HOROVOD_STALL_CHECK_TIME_SECONDS", "0.5", "0.5",
       [](const Config& c) { return Printed(c, "stall_check_time_seconds"); }, false},
      {"ACCORD_STALL_SHUTDOWN_TIME_SECONDS", "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "0", "0",
       [](const Config& c) { return Printed(c, "stall_shutdown_time_seconds"); }, false},
      {"ACCORD_STALL_CHECK_DISABLE", "HOROVOD_STALL_CHECK_DISABLE", "1", "1",
       [](const Config& c) { return std::string(c.stall_check_disable ? "1" : "0"); }, false},
      {"ACCORD_COLLECTIVE_TIMEOUT_SECONDS", nullptr, "12.5", "12.5",
       [](const Config& c) { return Printed(c, "collective_timeout_seconds"); }, false},
      {"ACCORD_GPU_OPERATIONS", "HOROVOD_GPU_OPERATIONS", "MPI", "mpi",
       [](const Config& c) { return std::string(GpuOperationsName(c.gpu_operations)); }, false},
      {"ACCORD_CUDA_HOST_EMULATION", nullptr, "on", "1",
       [](const Config& c) { return std::string(c.cuda_host_emulation ? "1" : "0"); }, false},
  };
  return kCases;
}

TEST_CASE("Config defaults when nothing is set", "[config]") {
  Config config = MustParse({});
  CHECK(config.fusion_threshold_bytes == 64 * 1024 * 1024);
  CHECK(config.staging_window_bytes == 1024 * 1024);
  CHECK(config.mpi_max_count == 2147483647);
  CHECK(config.cache_capacity == 1024);
  CHECK(config.cycle_time_ms == 0.0);
  CHECK(config.idle_timeout_us == 1000);
  CHECK(config.poll_spin_us == 20);
  CHECK(config.poll_waited_spin_us == 1000);
  CHECK(config.poll_max_sleep_us == 500);
  CHECK(config.device_spin_us == 50);
  CHECK(config.log_level == LogLevel::kWarning);
  CHECK_FALSE(config.log_hide_time);
  CHECK(config.stall_check_time_seconds == 60.0);
  CHECK(config.stall_shutdown_time_seconds == 600.0);
  CHECK_FALSE(config.stall_check_disable);
  CHECK(config.collective_timeout_seconds == 300.0);
  CHECK(config.gpu_operations == GpuOperations::kAuto);
  CHECK_FALSE(config.cuda_host_emulation);
  CHECK(config.lone_allreduce == LoneAllreduce::kAuto);
  CHECK(config.ToString() ==
        "fusion_threshold_bytes=67108864 staging_window_bytes=auto lone_allreduce=auto mpi_max_count=2147483647 "
        "hierarchical_allreduce=auto hierarchical_allgather=0 cache_capacity=1024 "
        "cycle_time_ms=0 "
        "idle_timeout_us=1000 idle_backoff_max_us=10000 poll_spin_us=20 poll_waited_spin_us=1000 poll_max_sleep_us=500 "
        "device_spin_us=50 coordinator_slice_us=100 fast_path=1 carry_small_allreduce=1 log_level=warning "
        "log_hide_time=0 stall_check_time_seconds=60 stall_shutdown_time_seconds=600 stall_check_disable=0 "
        "collective_timeout_seconds=300 gpu_operations=auto cuda_host_emulation=0");
  // A default-constructed Config holds the same defaults.
  CHECK(Config().ToString() == config.ToString());
}

TEST_CASE("Config reads each knob by its ACCORD name", "[config]") {
  for (const KnobCase& knob : Knobs()) {
    INFO(knob.name << "=\"" << knob.text << "\"");
    Config config = MustParse({{knob.name, knob.text}});
    CHECK(knob.get(config) == knob.expected);
  }
}

TEST_CASE("Config reads each knob by its Horovod name", "[config]") {
  for (const KnobCase& knob : Knobs()) {
    if (knob.horovod_name == nullptr) continue;
    INFO(knob.horovod_name << "=\"" << knob.text << "\"");
    Config config = MustParse({{knob.horovod_name, knob.text}});
    CHECK(knob.get(config) == knob.expected);
  }
}

TEST_CASE("Config: knobs without a Horovod name ignore HOROVOD_ look-alikes", "[config]") {
  Config config = MustParse({{"HOROVOD_IDLE_TIMEOUT_US", "7"}, {"HOROVOD_POLL_SPIN_US", "7"}});
  CHECK(config.idle_timeout_us == 1000);
  CHECK(config.poll_spin_us == 20);
}

TEST_CASE("Config: ACCORD names win over HOROVOD names", "[config]") {
  Config config = MustParse({{"ACCORD_FUSION_THRESHOLD", "100"},
                             {"HOROVOD_FUSION_THRESHOLD", "200"},
                             {"ACCORD_CACHE_CAPACITY", "5"},
                             {"HOROVOD_CACHE_CAPACITY", "6"},
                             {"ACCORD_CYCLE_TIME_MS", "1.5"},
                             {"HOROVOD_CYCLE_TIME", "9"},
                             {"ACCORD_LOG_LEVEL", "error"},
                             {"HOROVOD_LOG_LEVEL", "trace"}});
  CHECK(config.fusion_threshold_bytes == 100);
  CHECK(config.cache_capacity == 5);
  CHECK(config.cycle_time_ms == 1.5);
  CHECK(config.log_level == LogLevel::kError);
}

TEST_CASE("Config: an empty value counts as unset", "[config]") {
  SECTION("empty ACCORD value falls back to HOROVOD") {
    Config config = MustParse({{"ACCORD_FUSION_THRESHOLD", ""}, {"HOROVOD_FUSION_THRESHOLD", "200"}});
    CHECK(config.fusion_threshold_bytes == 200);
  }
  SECTION("all-whitespace ACCORD value falls back to HOROVOD") {
    Config config = MustParse({{"ACCORD_CACHE_CAPACITY", "  \t"}, {"HOROVOD_CACHE_CAPACITY", "3"}});
    CHECK(config.cache_capacity == 3);
  }
  SECTION("both empty gives the default") {
    Config config = MustParse({{"ACCORD_LOG_LEVEL", ""}, {"HOROVOD_LOG_LEVEL", ""}});
    CHECK(config.log_level == LogLevel::kWarning);
  }
  SECTION("every knob empty gives every default") {
    Env env;
    for (const KnobCase& knob : Knobs()) {
      env[knob.name] = "";
      if (knob.horovod_name != nullptr) env[knob.horovod_name] = "";
    }
    CHECK(MustParse(env).ToString() == Config().ToString());
  }
}

TEST_CASE("Config: surrounding whitespace is ignored", "[config]") {
  Config config = MustParse(
      {{"ACCORD_FUSION_THRESHOLD", " 42 "}, {"ACCORD_CYCLE_TIME_MS", "\t0.25\n"}, {"ACCORD_LOG_LEVEL", " info "}});
  CHECK(config.fusion_threshold_bytes == 42);
  CHECK(config.cycle_time_ms == 0.25);
  CHECK(config.log_level == LogLevel::kInfo);
}

TEST_CASE("Config: zero disables fusion and the cache", "[config]") {
  Config config = MustParse({{"ACCORD_FUSION_THRESHOLD", "0"}, {"ACCORD_CACHE_CAPACITY", "0"}});
  CHECK(config.fusion_threshold_bytes == 0);
  CHECK(config.cache_capacity == 0);
}

TEST_CASE("Config: values at the ends of each range are accepted", "[config]") {
  Config config = MustParse({{"ACCORD_FUSION_THRESHOLD", "9223372036854775807"},
                             {"ACCORD_CACHE_CAPACITY", "2147483647"},
                             {"ACCORD_CYCLE_TIME_MS", "60000"},
                             {"ACCORD_IDLE_TIMEOUT_US", "0"},
                             {"ACCORD_POLL_SPIN_US", "1000000"},
                             {"ACCORD_POLL_MAX_SLEEP_US", "1"},
                             {"ACCORD_DEVICE_SPIN_US", "1000000"},
                             {"ACCORD_COORDINATOR_SLICE_US", "100000"}});
  CHECK(config.fusion_threshold_bytes == INT64_MAX);
  CHECK(config.cache_capacity == 2147483647);
  CHECK(config.cycle_time_ms == 60000.0);
  CHECK(config.idle_timeout_us == 0);
  CHECK(config.poll_spin_us == 1000000);
  CHECK(config.poll_max_sleep_us == 1);
  CHECK(config.device_spin_us == 1000000);
  CHECK(config.coordinator_slice_us == 100000);
}

TEST_CASE("Config: every log level name, in any case", "[config]") {
  const std::vector<std::pair<std::string, LogLevel>> levels = {
      {"trace", LogLevel::kTrace},     {"DEBUG", LogLevel::kDebug}, {"Info", LogLevel::kInfo},
      {"warning", LogLevel::kWarning}, {"error", LogLevel::kError}, {"FATAL", LogLevel::kFatal}};
  for (const auto& [text, level] : levels) {
    INFO("ACCORD_LOG_LEVEL=\"" << text << "\"");
    CHECK(MustParse({{"ACCORD_LOG_LEVEL", text}}).log_level == level);
  }
}

TEST_CASE("Config rejects malformed numbers for every numeric knob", "[config]") {
  const std::vector<std::string> malformed = {"abc", "12x", "x12", "1 2", "0x10", "--1", "+"};
  for (const KnobCase& knob : Knobs()) {
    if (knob.name == std::string("ACCORD_LOG_LEVEL")) continue;
    for (const std::string& text : malformed) {
      CheckRejected({{knob.name, text}}, {knob.name, "\"" + text + "\"", "not valid", "expected"});
      if (knob.horovod_name != nullptr) {
        CheckRejected({{knob.horovod_name, text}},
                      {knob.horovod_name, "\"" + text + "\"", std::string("fallback for ") + knob.name});
      }
    }
    if (knob.integral) {  // fractions and exponents are not integers
      CheckRejected({{knob.name, "1.5"}}, {knob.name, "\"1.5\"", "an integer"});
      CheckRejected({{knob.name, "1e3"}}, {knob.name, "\"1e3\"", "an integer"});
    }
  }
}

TEST_CASE("Config rejects negative and out-of-range numbers", "[config]") {
  for (const KnobCase& knob : Knobs()) {
    // Not numbers (their own tests reject bad values).
    if (knob.name == std::string("ACCORD_LOG_LEVEL") || knob.name == std::string("ACCORD_LOG_HIDE_TIME") ||
        knob.name == std::string("ACCORD_STALL_CHECK_DISABLE") || knob.name == std::string("ACCORD_GPU_OPERATIONS") ||
        knob.name == std::string("ACCORD_CUDA_HOST_EMULATION") || knob.name == std::string("ACCORD_FAST_PATH") ||
        knob.name == std::string("ACCORD_CARRY_SMALL_ALLREDUCE") || knob.name == std::string("ACCORD_LONE_ALLREDUCE") ||
        knob.name == std::string("ACCORD_HIERARCHICAL_ALLREDUCE") ||
        knob.name == std::string("ACCORD_HIERARCHICAL_ALLGATHER")) {
      continue;
    }
    CheckRejected({{knob.name, "-1"}}, {knob.name, "\"-1\"", "out of range", "from "});
    // Does not fit in int64 (nor in a double's finite range for the cycle time).
    const std::string huge = knob.integral ? "99999999999999999999" : "1e999";
    CheckRejected({{knob.name, huge}}, {knob.name, "\"" + huge + "\"", "out of range"});
  }
  // int knobs: one past INT_MAX fits in int64 but not in the field.
  CheckRejected({{"ACCORD_CACHE_CAPACITY", "2147483648"}},
                {"ACCORD_CACHE_CAPACITY", "\"2147483648\"", "out of range", "from 0 to 2147483647"});
  CheckRejected({{"HOROVOD_CACHE_CAPACITY", "-5"}}, {"HOROVOD_CACHE_CAPACITY", "\"-5\"", "out of range"});
  CheckRejected({{"HOROVOD_FUSION_THRESHOLD", "-1"}}, {"HOROVOD_FUSION_THRESHOLD", "out of range"});
  CheckRejected({{"ACCORD_FUSION_THRESHOLD", "9223372036854775808"}}, {"ACCORD_FUSION_THRESHOLD", "out of range"});
  // Knob-specific bounds.
  CheckRejected({{"ACCORD_CYCLE_TIME_MS", "60000.5"}}, {"ACCORD_CYCLE_TIME_MS", "from 0 to 60000"});
  CheckRejected({{"ACCORD_IDLE_TIMEOUT_US", "1000001"}}, {"ACCORD_IDLE_TIMEOUT_US", "out of range"});
  CheckRejected({{"ACCORD_POLL_SPIN_US", "1000001"}}, {"ACCORD_POLL_SPIN_US", "out of range"});
  CheckRejected({{"ACCORD_POLL_MAX_SLEEP_US", "0"}},
                {"ACCORD_POLL_MAX_SLEEP_US", "\"0\"", "out of range", "from 1 to 1000000"});
  CheckRejected({{"ACCORD_POLL_MAX_SLEEP_US", "1000001"}}, {"ACCORD_POLL_MAX_SLEEP_US", "out of range"});
  CheckRejected({{"ACCORD_DEVICE_SPIN_US", "-1"}}, {"ACCORD_DEVICE_SPIN_US", "out of range"});
  CheckRejected({{"ACCORD_DEVICE_SPIN_US", "1000001"}}, {"ACCORD_DEVICE_SPIN_US", "out of range"});
  CheckRejected({{"ACCORD_COORDINATOR_SLICE_US", "100001"}},
                {"ACCORD_COORDINATOR_SLICE_US", "out of range", "from 0 to 100000"});
}

TEST_CASE("Config rejects NaN and infinite cycle times", "[config]") {
  for (const std::string text : {"nan", "NaN", "inf", "-inf", "infinity"}) {
    CheckRejected({{"ACCORD_CYCLE_TIME_MS", text}}, {"ACCORD_CYCLE_TIME_MS", "\"" + text + "\""});
    CheckRejected({{"HOROVOD_CYCLE_TIME", text}}, {"HOROVOD_CYCLE_TIME", "\"" + text + "\""});
  }
}

TEST_CASE("Config rejects unknown log levels", "[config]") {
  for (const std::string text : {"verbose", "warn", "3", "debug2"}) {
    CheckRejected({{"ACCORD_LOG_LEVEL", text}},
                  {"ACCORD_LOG_LEVEL", "\"" + text + "\"", "trace, debug, info, warning, error, fatal"});
    CheckRejected({{"HOROVOD_LOG_LEVEL", text}}, {"HOROVOD_LOG_LEVEL", "\"" + text + "\""});
  }
}

TEST_CASE("Config: a malformed ACCORD value is an error even when HOROVOD is valid", "[config]") {
  CheckRejected({{"ACCORD_FUSION_THRESHOLD", "abc"}, {"HOROVOD_FUSION_THRESHOLD", "1024"}},
                {"ACCORD_FUSION_THRESHOLD", "\"abc\""});
}

TEST_CASE("Config: a malformed HOROVOD value is ignored when ACCORD is set", "[config]") {
  Config config = MustParse({{"ACCORD_FUSION_THRESHOLD", "1024"}, {"HOROVOD_FUSION_THRESHOLD", "abc"}});
  CHECK(config.fusion_threshold_bytes == 1024);
}

TEST_CASE("Config::ToString prints every field", "[config]") {
  Config config = MustParse({{"ACCORD_FUSION_THRESHOLD", "1"},
                             {"ACCORD_STAGING_WINDOW_BYTES", "10"},
                             {"ACCORD_LONE_ALLREDUCE", "staged"},
                             {"ACCORD_MPI_MAX_COUNT", "11"},
                             {"ACCORD_HIERARCHICAL_ALLREDUCE", "on"},
                             {"ACCORD_CACHE_CAPACITY", "2"},
                             {"ACCORD_CYCLE_TIME_MS", "0.1"},
                             {"ACCORD_IDLE_TIMEOUT_US", "3"},
                             {"ACCORD_IDLE_BACKOFF_MAX_US", "6"},
                             {"ACCORD_POLL_SPIN_US", "4"},
                             {"ACCORD_POLL_WAITED_SPIN_US", "9"},
                             {"ACCORD_POLL_MAX_SLEEP_US", "5"},
                             {"ACCORD_DEVICE_SPIN_US", "12"},
                             {"ACCORD_COORDINATOR_SLICE_US", "13"},
                             {"ACCORD_LOG_LEVEL", "trace"},
                             {"ACCORD_LOG_HIDE_TIME", "1"},
                             {"ACCORD_STALL_CHECK_TIME_SECONDS", "7.5"},
                             {"ACCORD_STALL_SHUTDOWN_TIME_SECONDS", "8"},
                             {"ACCORD_STALL_CHECK_DISABLE", "yes"},
                             {"ACCORD_COLLECTIVE_TIMEOUT_SECONDS", "0"},
                             {"ACCORD_GPU_OPERATIONS", "Nccl"},
                             {"ACCORD_CUDA_HOST_EMULATION", "1"}});
  CHECK(config.ToString() ==
        "fusion_threshold_bytes=1 staging_window_bytes=10 lone_allreduce=staged mpi_max_count=11 "
        "hierarchical_allreduce=1 "
        "hierarchical_allgather=0 cache_capacity=2 cycle_time_ms=0.1 "
        "idle_timeout_us=3 "
        "idle_backoff_max_us=6 poll_spin_us=4 poll_waited_spin_us=9 poll_max_sleep_us=5 device_spin_us=12 "
        "coordinator_slice_us=13 fast_path=1 carry_small_allreduce=1 "
        "log_level=trace "
        "log_hide_time=1 stall_check_time_seconds=7.5 stall_shutdown_time_seconds=8 stall_check_disable=1 "
        "collective_timeout_seconds=0 gpu_operations=nccl cuda_host_emulation=1");
}

TEST_CASE("Config: the staging window of a set on one host and of one across hosts", "[config]") {
  // Unset: the default on one host, no windows across hosts.
  Config unset = MustParse({});
  CHECK_FALSE(unset.staging_window_set);
  CHECK(unset.StagingWindowBytes(false) == 1024 * 1024);
  CHECK(unset.StagingWindowBytes(true) == 0);
  CHECK(Printed(unset, "staging_window_bytes") == "auto");
  // Given (even as the default, even empty-then-set): honoured everywhere.
  for (const char* text : {"1048576", "4096", "0"}) {
    INFO("ACCORD_STAGING_WINDOW_BYTES=" << text);
    Config set = MustParse({{"ACCORD_STAGING_WINDOW_BYTES", text}});
    CHECK(set.staging_window_set);
    CHECK(set.StagingWindowBytes(false) == std::stoll(text));
    CHECK(set.StagingWindowBytes(true) == std::stoll(text));
    CHECK(Printed(set, "staging_window_bytes") == text);
  }
  // An empty value counts as unset (rule 2).
  CHECK_FALSE(MustParse({{"ACCORD_STAGING_WINDOW_BYTES", " "}}).staging_window_set);
}

TEST_CASE("Config: the hierarchical collectives as given, and the allreduce's default by layout", "[config]") {
  Config config = MustParse({});
  CHECK_FALSE(config.hierarchical_allreduce_set);
  CHECK_FALSE(config.hierarchical_allgather);
  // Unset: two levels across hosts of equally many ranks, two or more.
  CHECK(config.HierarchicalAllreduce(2, 2));
  CHECK(config.HierarchicalAllreduce(3, 8));
  CHECK_FALSE(config.HierarchicalAllreduce(2, 1));  // one rank per host: nothing to do within a host
  CHECK_FALSE(config.HierarchicalAllreduce(2, 0));  // hosts of unequal numbers of ranks
  CHECK_FALSE(config.HierarchicalAllreduce(1, 4));  // one host
  CHECK(Printed(config, "hierarchical_allreduce") == "auto");
  config = MustParse({{"HOROVOD_HIERARCHICAL_ALLREDUCE", "1"}, {"ACCORD_HIERARCHICAL_ALLGATHER", "true"}});
  CHECK(config.hierarchical_allreduce_set);
  CHECK(config.hierarchical_allreduce);
  CHECK(config.hierarchical_allgather);
  CHECK(config.HierarchicalAllreduce(2, 2));
  CHECK(config.HierarchicalAllreduce(2, 0));
  // One rank on every host: flat, asked or not (the same ring, in place).
  CHECK_FALSE(config.HierarchicalAllreduce(2, 1));
  CHECK_FALSE(config.HierarchicalAllreduce(5, 1));
  CHECK_FALSE(config.HierarchicalAllreduce(1, 4));
  config = MustParse({{"ACCORD_HIERARCHICAL_ALLREDUCE", "0"}, {"HOROVOD_HIERARCHICAL_ALLREDUCE", "1"}});
  CHECK(config.hierarchical_allreduce_set);
  CHECK_FALSE(config.hierarchical_allreduce);
  CHECK_FALSE(config.HierarchicalAllreduce(2, 2));
  CHECK(Printed(config, "hierarchical_allreduce") == "0");  // given, though it is the field's default
  // An empty value counts as unset (rule 2).
  CHECK_FALSE(MustParse({{"ACCORD_HIERARCHICAL_ALLREDUCE", ""}}).hierarchical_allreduce_set);
  CheckRejected({{"ACCORD_HIERARCHICAL_ALLREDUCE", "2"}}, {"ACCORD_HIERARCHICAL_ALLREDUCE=\"2\"", "not valid"});
  CheckRejected({{"HOROVOD_HIERARCHICAL_ALLGATHER", "maybe"}},
                {"HOROVOD_HIERARCHICAL_ALLGATHER", "ACCORD_HIERARCHICAL_ALLGATHER", "not valid"});
}

TEST_CASE("Config: the GPU path's knobs", "[config]") {
  CHECK(MustParse({{"HOROVOD_GPU_OPERATIONS", "NCCL"}}).gpu_operations == GpuOperations::kNccl);
  CHECK(MustParse({{"ACCORD_GPU_OPERATIONS", " auto "}, {"HOROVOD_GPU_OPERATIONS", "MPI"}}).gpu_operations ==
        GpuOperations::kAuto);
  CheckRejected({{"ACCORD_GPU_OPERATIONS", "gloo"}},
                {"ACCORD_GPU_OPERATIONS=\"gloo\"", "not valid", "auto, nccl or mpi"});
  CheckRejected({{"ACCORD_LONE_ALLREDUCE", "inplace"}},
                {"ACCORD_LONE_ALLREDUCE=\"inplace\"", "not valid", "auto, in_place or staged"});
  CheckRejected({{"HOROVOD_GPU_OPERATIONS", "ddl"}}, {"HOROVOD_GPU_OPERATIONS", "ACCORD_GPU_OPERATIONS", "not valid"});
  CheckRejected({{"ACCORD_COLLECTIVE_TIMEOUT_SECONDS", "-1"}}, {"ACCORD_COLLECTIVE_TIMEOUT_SECONDS", "out of range"});
  CheckRejected({{"ACCORD_CUDA_HOST_EMULATION", "maybe"}}, {"ACCORD_CUDA_HOST_EMULATION", "not valid"});
}

TEST_CASE("Config: the stall inspector's knobs", "[config]") {
  SECTION("fractional seconds, and Horovod's names as fallbacks") {
    Config config = MustParse({{"HOROVOD_STALL_CHECK_TIME_SECONDS", "0.25"},
                               {"ACCORD_STALL_SHUTDOWN_TIME_SECONDS", "1.5"},
                               {"HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "99"},
                               {"HOROVOD_STALL_CHECK_DISABLE", "0"}});
    CHECK(config.stall_check_time_seconds == 0.25);
    CHECK(config.stall_shutdown_time_seconds == 1.5);
    CHECK_FALSE(config.stall_check_disable);
  }
  SECTION("the disable flag takes the usual spellings, in any case") {
    for (const char* yes : {"1", "true", "TRUE", "yes", "On"}) {
      INFO(yes);
      CHECK(MustParse({{"ACCORD_STALL_CHECK_DISABLE", yes}}).stall_check_disable);
    }
    for (const char* no : {"0", "false", "No", "off"}) {
      INFO(no);
      CHECK_FALSE(MustParse({{"ACCORD_STALL_CHECK_DISABLE", no}}).stall_check_disable);
    }
  }
  SECTION("bad values are named") {
    CheckRejected({{"ACCORD_STALL_CHECK_DISABLE", "2"}}, {"ACCORD_STALL_CHECK_DISABLE=\"2\"", "not valid", "0, false"});
    CheckRejected({{"ACCORD_STALL_CHECK_TIME_SECONDS", "0"}}, {"ACCORD_STALL_CHECK_TIME_SECONDS", "out of range"});
    CheckRejected({{"ACCORD_STALL_CHECK_TIME_SECONDS", "soon"}}, {"ACCORD_STALL_CHECK_TIME_SECONDS", "not valid"});
    CheckRejected({{"HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "-1"}},
                  {"HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "out of range", "ACCORD_STALL_SHUTDOWN_TIME_SECONDS"});
  }
}

TEST_CASE("Config::FromEnv reads the process environment", "[config]") {
  // Save and restore, so the test leaves the environment as it found it.
  const char* names[] = {"ACCORD_CACHE_CAPACITY", "HOROVOD_CYCLE_TIME", "ACCORD_CYCLE_TIME_MS"};
  std::map<std::string, std::optional<std::string>> saved;
  for (const char* name : names) {
    const char* value = std::getenv(name);
    saved[name] = value ? std::optional<std::string>(value) : std::nullopt;
    unsetenv(name);
  }
  setenv("ACCORD_CACHE_CAPACITY", "77", 1);
  setenv("HOROVOD_CYCLE_TIME", "3.5", 1);
  Result<Config> good = Config::FromEnv();
  setenv("ACCORD_CACHE_CAPACITY", "seventy", 1);
  Result<Config> bad = Config::FromEnv();
  for (const auto& [name, value] : saved) {
    if (value) {
      setenv(name.c_str(), value->c_str(), 1);
    } else {
      unsetenv(name.c_str());
    }
  }
  INFO(good.status());
  REQUIRE(good.ok());
  CHECK(good->cache_capacity == 77);
  CHECK(good->cycle_time_ms == 3.5);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().code() == StatusCode::kInvalidArgument);
  CHECK(bad.status().message().find("ACCORD_CACHE_CAPACITY=\"seventy\"") != std::string::npos);
}

TEST_CASE("Config: the timeline's knobs", "[config]") {
  const Config defaults = MustParse({});
  CHECK(defaults.timeline_path.empty());
  CHECK_FALSE(defaults.timeline_mark_cycles);
  CHECK(defaults.timeline_max_mb == 1024);
  const Config set = MustParse(
      {{"ACCORD_TIMELINE", " /tmp/t l.json "}, {"ACCORD_TIMELINE_MARK_CYCLES", "on"}, {"ACCORD_TIMELINE_MAX_MB", "5"}});
  CHECK(set.timeline_path == "/tmp/t l.json");
  CHECK(set.timeline_mark_cycles);
  CHECK(set.timeline_max_mb == 5);
  const Config horovod = MustParse({{"HOROVOD_TIMELINE", "/tmp/h.json"}, {"HOROVOD_TIMELINE_MARK_CYCLES", "1"}});
  CHECK(horovod.timeline_path == "/tmp/h.json");
  CHECK(horovod.timeline_mark_cycles);
  CHECK(MustParse({{"ACCORD_TIMELINE", "/a"}, {"HOROVOD_TIMELINE", "/b"}}).timeline_path == "/a");
  CheckRejected({{"ACCORD_TIMELINE_MAX_MB", "0"}}, {"ACCORD_TIMELINE_MAX_MB", "out of range"});
  CheckRejected({{"ACCORD_TIMELINE_MARK_CYCLES", "maybe"}}, {"ACCORD_TIMELINE_MARK_CYCLES"});
  // Not part of the one-line summary.
  CHECK(set.ToString() == defaults.ToString());
}

TEST_CASE("Config: the autotuner's knobs", "[config]") {
  const Config defaults = MustParse({});
  CHECK_FALSE(defaults.autotune);
  CHECK(defaults.autotune_warmup_samples == 3);
  CHECK(defaults.autotune_steps_per_sample == 10);
  CHECK(defaults.autotune_max_samples == 20);
  CHECK(defaults.autotune_log_path.empty());
  const Config set = MustParse({{"ACCORD_AUTOTUNE", "yes"},
                                {"ACCORD_AUTOTUNE_WARMUP_SAMPLES", "0"},
                                {"ACCORD_AUTOTUNE_STEPS_PER_SAMPLE", " 4 "},
                                {"ACCORD_AUTOTUNE_MAX_SAMPLES", "7"},
                                {"ACCORD_AUTOTUNE_LOG", " /tmp/tune.csv "}});
  CHECK(set.autotune);
  CHECK(set.autotune_warmup_samples == 0);
  CHECK(set.autotune_steps_per_sample == 4);
  CHECK(set.autotune_max_samples == 7);
  CHECK(set.autotune_log_path == "/tmp/tune.csv");
  const Config horovod = MustParse({{"HOROVOD_AUTOTUNE", "1"},
                                    {"HOROVOD_AUTOTUNE_WARMUP_SAMPLES", "2"},
                                    {"HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", "5"},
                                    {"HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES", "9"},
                                    {"HOROVOD_AUTOTUNE_LOG", "/tmp/h.csv"}});
  CHECK(horovod.autotune);
  CHECK(horovod.autotune_warmup_samples == 2);
  CHECK(horovod.autotune_steps_per_sample == 5);
  CHECK(horovod.autotune_max_samples == 9);
  CHECK(horovod.autotune_log_path == "/tmp/h.csv");
  CHECK_FALSE(MustParse({{"ACCORD_AUTOTUNE", "0"}, {"HOROVOD_AUTOTUNE", "1"}}).autotune);
  CheckRejected({{"ACCORD_AUTOTUNE", "maybe"}}, {"ACCORD_AUTOTUNE"});
  CheckRejected({{"ACCORD_AUTOTUNE_STEPS_PER_SAMPLE", "0"}}, {"ACCORD_AUTOTUNE_STEPS_PER_SAMPLE", "out of range"});
  CheckRejected({{"ACCORD_AUTOTUNE_MAX_SAMPLES", "0"}}, {"ACCORD_AUTOTUNE_MAX_SAMPLES", "out of range"});
  CheckRejected({{"ACCORD_AUTOTUNE_WARMUP_SAMPLES", "-1"}}, {"ACCORD_AUTOTUNE_WARMUP_SAMPLES", "out of range"});
  // Not part of the one-line summary.
  CHECK(set.ToString() == defaults.ToString());
}

}  // namespace
}  // namespace accord
