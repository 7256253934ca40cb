// Tests for the tuning flags: every flag's variable, conversion, range and
// note, and the checks across flags.
#include "tuning.h"

#include <catch2/catch.hpp>

#include <map>
#include <set>

namespace accord::launcher {
namespace {

using Given = std::vector<std::pair<std::string, std::string>>;

TuningResult MustTune(const Given& given) {
  Result<TuningResult> result = TuningEnvironment(given);
  INFO("TuningEnvironment failed: " << result.status());
  REQUIRE(result.ok());
  return *result;
}

std::string TuneError(const Given& given) {
  Result<TuningResult> result = TuningEnvironment(given);
  REQUIRE_FALSE(result.ok());
  CHECK(result.status().code() == StatusCode::kInvalidArgument);
  return result.status().message();
}

std::string ValueOf(const Given& given, const std::string& variable) {
  TuningResult result = MustTune(given);
  for (const EnvVar& var : result.env) {
    if (var.name == variable) return var.value;
  }
  FAIL("no " << variable);
  return "";
}

TEST_CASE("Every tuning flag sets an ACCORD_ variable and documents itself") {
  std::set<std::string> flags;
  for (const TuningFlag& flag : TuningFlags()) {
    INFO(flag.flag);
    CHECK(flags.insert(flag.flag).second);
    CHECK(flag.flag.rfind("--", 0) == 0);
    CHECK(flag.variable.rfind("ACCORD_", 0) == 0);
    CHECK_FALSE(flag.help.empty());
    CHECK_FALSE(flag.default_text.empty());
    CHECK(flag.value_name.empty() == (flag.kind == TuningKind::kSwitch));
  }
  for (const char* expected : {"--fusion-threshold-mb",
                               "--cycle-time-ms",
                               "--cache-capacity",
                               "--disable-cache",
                               "--log-level",
                               "--timeline-filename",
                               "--timeline-mark-cycles",
                               "--no-stall-check",
                               "--stall-check-warning-time-seconds",
                               "--stall-check-shutdown-time-seconds",
                               "--collective-timeout-seconds",
                               "--hierarchical-allreduce",
                               "--no-hierarchical-allreduce",
                               "--hierarchical-allgather",
                               "--no-hierarchical-allgather",
                               "--autotune",
                               "--autotune-log-file",
                               "--autotune-warmup-samples",
                               "--autotune-steps-per-sample",
                               "--autotune-bayes-opt-max-samples"}) {
    INFO(expected);
    CHECK(flags.count(expected) == 1);
  }
}

TEST_CASE("Defaults shown for the built knobs are the core's") {
  std::map<std::string, std::string> defaults;
  for (const TuningFlag& flag : TuningFlags()) defaults[flag.flag] = flag.default_text;
  CHECK(defaults["--fusion-threshold-mb"] == "64");
  CHECK(defaults["--cycle-time-ms"] == "0");
  CHECK(defaults["--cache-capacity"] == "1024");
  CHECK(defaults["--log-level"] == "warning");
}

TEST_CASE("--fusion-threshold-mb is converted to bytes") {
  CHECK(ValueOf({{"--fusion-threshold-mb", "32"}}, "ACCORD_FUSION_THRESHOLD") == "33554432");
  CHECK(ValueOf({{"--fusion-threshold-mb", "0"}}, "ACCORD_FUSION_THRESHOLD") == "0");
  CHECK(ValueOf({{"--fusion-threshold-mb", "0.5"}}, "ACCORD_FUSION_THRESHOLD") == "524288");
  CHECK(ValueOf({{"--fusion-threshold-mb", " 128 "}}, "ACCORD_FUSION_THRESHOLD") == "134217728");
  CHECK(ValueOf({{"--fusion-threshold-mb", "1e3"}}, "ACCORD_FUSION_THRESHOLD") == "1048576000");
  CHECK(TuneError({{"--fusion-threshold-mb", "-1"}})
            .rfind("--fusion-threshold-mb \"-1\" is not valid: expected a number from 0 to", 0) == 0);
  CHECK(TuneError({{"--fusion-threshold-mb", "64MB"}}).find("is not valid") != std::string::npos);
  CHECK(TuneError({{"--fusion-threshold-mb", ""}}).find("is not valid") != std::string::npos);
  CHECK(TuneError({{"--fusion-threshold-mb", "nan"}}).find("is not valid") != std::string::npos);
  CHECK(TuneError({{"--fusion-threshold-mb", "1e300"}}).find("is not valid") != std::string::npos);
}

TEST_CASE("--cycle-time-ms, --cache-capacity, --disable-cache and --log-level") {
  CHECK(ValueOf({{"--cycle-time-ms", "5"}}, "ACCORD_CYCLE_TIME_MS") == "5");
  CHECK(ValueOf({{"--cycle-time-ms", "2.5"}}, "ACCORD_CYCLE_TIME_MS") == "2.5");
  CHECK(TuneError({{"--cycle-time-ms", "60001"}}) ==
        "--cycle-time-ms \"60001\" is not valid: expected a number from 0 to 60000");
  CHECK(TuneError({{"--cycle-time-ms", "-0.1"}}).find("is not valid") != std::string::npos);

  CHECK(ValueOf({{"--cache-capacity", "0"}}, "ACCORD_CACHE_CAPACITY") == "0");
  CHECK(ValueOf({{"--cache-capacity", "4096"}}, "ACCORD_CACHE_CAPACITY") == "4096");
  CHECK(TuneError({{"--cache-capacity", "1.5"}}) ==
        "--cache-capacity \"1.5\" is not valid: expected a whole number from 0 to 2147483647");
  CHECK(TuneError({{"--cache-capacity", "-1"}}).find("is not valid") != std::string::npos);
  CHECK(TuneError({{"--cache-capacity", "2147483648"}}).find("is not valid") != std::string::npos);

  CHECK(ValueOf({{"--disable-cache", ""}}, "ACCORD_CACHE_CAPACITY") == "0");
  CHECK(TuneError({{"--cache-capacity", "5"}, {"--disable-cache", ""}}) ==
        "--disable-cache cannot be combined with --cache-capacity");

  CHECK(ValueOf({{"--log-level", "DEBUG"}}, "ACCORD_LOG_LEVEL") == "debug");
  CHECK(ValueOf({{"--log-level", "Warning"}}, "ACCORD_LOG_LEVEL") == "warning");
  CHECK(TuneError({{"--log-level", "loud"}}) ==
        "--log-level \"loud\" is not valid: expected one of trace, debug, info, warning, error, fatal");
}

TEST_CASE("Built knobs add no note") {
  TuningResult result = MustTune(
      {{"--fusion-threshold-mb", "1"}, {"--cycle-time-ms", "1"}, {"--cache-capacity", "1"}, {"--log-level", "info"}});
  CHECK(result.notes.empty());
  REQUIRE(result.env.size() == 4);
  CHECK(result.env[0] == EnvVar{"ACCORD_FUSION_THRESHOLD", "1048576"});
  CHECK(result.env[1] == EnvVar{"ACCORD_CYCLE_TIME_MS", "1"});
  CHECK(result.env[2] == EnvVar{"ACCORD_CACHE_CAPACITY", "1"});
  CHECK(result.env[3] == EnvVar{"ACCORD_LOG_LEVEL", "info"});
  CHECK(result.sources ==
        std::vector<std::string>{"--fusion-threshold-mb", "--cycle-time-ms", "--cache-capacity", "--log-level"});
}

TEST_CASE("Timeline flags set their variables without a note") {
  TuningResult result = MustTune({{"--timeline-filename", "/tmp/t.json"}, {"--timeline-mark-cycles", ""}});
  REQUIRE(result.env.size() == 2);
  CHECK(result.env[0] == EnvVar{"ACCORD_TIMELINE", "/tmp/t.json"});
  CHECK(result.env[1] == EnvVar{"ACCORD_TIMELINE_MARK_CYCLES", "1"});
  CHECK(result.notes.empty());
  CHECK(TuneError({{"--timeline-mark-cycles", ""}}) == "--timeline-mark-cycles needs --timeline-filename");
  CHECK(TuneError({{"--timeline-filename", " "}}).find("expected a file name") != std::string::npos);
}

TEST_CASE("--collective-timeout-seconds sets the watchdog's variable and refuses a negative time") {
  TuningResult result = MustTune({{"--collective-timeout-seconds", "7.5"}});
  REQUIRE(result.env.size() == 1);
  CHECK(result.env[0] == EnvVar{"ACCORD_COLLECTIVE_TIMEOUT_SECONDS", "7.5"});
  CHECK(TuneError({{"--collective-timeout-seconds", "-1"}}).find("--collective-timeout-seconds") != std::string::npos);
}

TEST_CASE("Stall check flags set their variables and add no note") {
  TuningResult result =
      MustTune({{"--stall-check-warning-time-seconds", "120"}, {"--stall-check-shutdown-time-seconds", "600"}});
  REQUIRE(result.env.size() == 2);
  CHECK(result.env[0] == EnvVar{"ACCORD_STALL_CHECK_TIME_SECONDS", "120"});
  CHECK(result.env[1] == EnvVar{"ACCORD_STALL_SHUTDOWN_TIME_SECONDS", "600"});
  CHECK(result.notes.empty());

  TuningResult off = MustTune({{"--no-stall-check", ""}});
  REQUIRE(off.env.size() == 1);
  CHECK(off.env[0] == EnvVar{"ACCORD_STALL_CHECK_DISABLE", "1"});
  CHECK(off.notes.empty());
  CHECK(TuneError({{"--no-stall-check", ""}, {"--stall-check-warning-time-seconds", "5"}}) ==
        "--stall-check-warning-time-seconds cannot be combined with --no-stall-check");
  CHECK(TuneError({{"--stall-check-shutdown-time-seconds", "-5"}}).find("expected a whole number") !=
        std::string::npos);
}

TEST_CASE("Hierarchical collective flags set their variables and add no note") {
  TuningResult result = MustTune({{"--hierarchical-allreduce", ""}, {"--hierarchical-allgather", ""}});
  CHECK(result.env ==
        std::vector<EnvVar>{{"ACCORD_HIERARCHICAL_ALLREDUCE", "1"}, {"ACCORD_HIERARCHICAL_ALLGATHER", "1"}});
  CHECK(result.notes.empty());
  CHECK(ValueOf({{"--hierarchical-allgather", ""}}, "ACCORD_HIERARCHICAL_ALLGATHER") == "1");
  // Horovod's --no- forms turn them off (the allreduce's default is by layout).
  result = MustTune({{"--no-hierarchical-allreduce", ""}, {"--no-hierarchical-allgather", ""}});
  CHECK(result.env ==
        std::vector<EnvVar>{{"ACCORD_HIERARCHICAL_ALLREDUCE", "0"}, {"ACCORD_HIERARCHICAL_ALLGATHER", "0"}});
  CHECK(result.notes.empty());
  CHECK(TuneError({{"--hierarchical-allreduce", ""}, {"--no-hierarchical-allreduce", ""}}) ==
        "--no-hierarchical-allreduce cannot be combined with --hierarchical-allreduce");
  CHECK(TuneError({{"--hierarchical-allgather", ""}, {"--no-hierarchical-allgather", ""}}) ==
        "--no-hierarchical-allgather cannot be combined with --hierarchical-allgather");
}

TEST_CASE("Autotune flags set their variables, need --autotune, and add no note") {
  TuningResult result = MustTune({{"--autotune", ""},
                                  {"--autotune-log-file", "tune.csv"},
                                  {"--autotune-warmup-samples", "3"},
                                  {"--autotune-steps-per-sample", "10"},
                                  {"--autotune-bayes-opt-max-samples", "20"}});
  std::vector<EnvVar> expected = {{"ACCORD_AUTOTUNE", "1"},
                                  {"ACCORD_AUTOTUNE_LOG", "tune.csv"},
                                  {"ACCORD_AUTOTUNE_WARMUP_SAMPLES", "3"},
                                  {"ACCORD_AUTOTUNE_STEPS_PER_SAMPLE", "10"},
                                  {"ACCORD_AUTOTUNE_MAX_SAMPLES", "20"}};
  CHECK(result.env == expected);
  CHECK(result.notes.empty());
  CHECK(TuneError({{"--autotune-warmup-samples", "3"}}) == "--autotune-warmup-samples needs --autotune");
  CHECK(TuneError({{"--autotune", ""}, {"--autotune-steps-per-sample", "0"}}) ==
        "--autotune-steps-per-sample \"0\" is not valid: expected a whole number from 1 to 2147483647");
}

TEST_CASE("Every tuning flag's feature is built: no notes") {
  for (const TuningFlag& flag : TuningFlags()) {
    INFO(flag.flag);
    CHECK(flag.feature.empty());
  }
  TuningResult result = MustTune({{"--autotune", ""}, {"--timeline-filename", "t"}, {"--no-stall-check", ""}});
  CHECK(result.notes.empty());
}

}  // namespace
}  // namespace accord::launcher
