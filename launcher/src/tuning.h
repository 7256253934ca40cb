// The tuning flags of accordrun: each one sets an ACCORD_* variable for every
// rank (docs/launcher.md lists them; docs/configuration.md explains the
// variables).
//
// One table drives the command-line options, their checks, --help and the
// notes printed for flags whose feature this build of accord does not have
// yet (such a flag still sets its variable, so a job script keeps working
// once the feature arrives). Pure functions; any thread may call them.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "accord/status.h"

namespace accord::launcher {

// NAME=VALUE for the environment of every rank.
struct EnvVar {
  std::string name;
  std::string value;
  bool operator==(const EnvVar& other) const { return name == other.name && value == other.value; }
};

enum class TuningKind {
  kSwitch,    // no value: sets the variable to `switch_value`
  kInteger,   // a whole number in [min_value, max_value]
  kNumber,    // a decimal number in [min_value, max_value], times `scale`
  kText,      // any non-empty text (a file name)
  kLogLevel,  // trace, debug, info, warning, error or fatal, any case
};

struct TuningFlag {
  std::string flag;        // "--fusion-threshold-mb"
  std::string value_name;  // "MB" (for --help); empty for switches
  std::string variable;    // "ACCORD_FUSION_THRESHOLD"
  TuningKind kind = TuningKind::kSwitch;
  double min_value = 0;
  double max_value = 0;
  double scale = 1;              // kNumber: the variable holds round(value * scale)
  bool integral_result = false;  // kNumber: the scaled value is written as an integer
  std::string switch_value = "1";
  std::string default_text;  // what applies without the flag (for --help and docs)
  std::string feature;       // empty when this build has the feature, else its name ("timeline")
  std::string needs;         // a flag this one only makes sense with, or empty
  std::string conflicts;     // a flag this one cannot be combined with, or empty
  std::string help;
};

// Every tuning flag, in the order --help shows them.
const std::vector<TuningFlag>& TuningFlags();

// The value of `flag.variable` for the text given to the flag (ignored for
// switches), or an InvalidArgument error that names the flag.
Result<std::string> TuningVariableValue(const TuningFlag& flag, const std::string& text);

struct TuningResult {
  std::vector<EnvVar> env;           // in the order of TuningFlags()
  std::vector<std::string> sources;  // the flag that set each entry of `env`
  std::vector<std::string> notes;    // one line per feature that is not built yet
};

// Checks the flags given (flag name, text; text is empty for switches) as a
// whole: values, needs, conflicts, two flags for one variable.
Result<TuningResult> TuningEnvironment(const std::vector<std::pair<std::string, std::string>>& given);

}  // namespace accord::launcher
