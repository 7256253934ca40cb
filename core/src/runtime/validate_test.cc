// Tests for the overlap checks of allreduce (validate.h): an output may be
// its own input (in place) or memory apart from every tensor of the call,
// nothing in between, because a staged allreduce writes outputs while later
// windows still read inputs.
#include "runtime/validate.h"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

namespace accord {
namespace {

// A float view of `n` elements starting at element `at` of `memory`.
TensorView At(std::vector<float>& memory, int64_t at, int64_t n) {
  TensorView v;
  v.data = memory.data() + at;
  v.dtype = DataType::kFloat32;
  v.shape = {n};
  return v;
}

const std::vector<std::string> kNames = {"g.0", "g.1", "g.2"};

Status Check(const std::vector<TensorView>& inputs, const std::vector<TensorView>& outputs) {
  std::vector<const std::string*> names;
  for (size_t i = 0; i < inputs.size(); ++i) names.push_back(&kNames[i]);
  return CheckOutputsApart(inputs.data(), outputs.data(), inputs.size(), names);
}

void ExpectRefused(const Status& status, const std::vector<std::string>& mentions) {
  INFO(status);
  CHECK(status.code() == StatusCode::kInvalidArgument);
  for (const std::string& m : mentions) CHECK_THAT(status.message(), Catch::Contains(m));
}

// Splits whose sum overflowed an int64 were undefined behaviour and, wrapped
// around, could match dim 0: [2^62] * 4 "adds up" to 0 rows. Found by review
// after fuzzing found the same sum in the coordinator's plan (BuildResponse).
TEST_CASE("CheckSplits refuses splits whose sum overflows", "[validate]") {
  const int64_t big = int64_t{1} << 62;
  TensorView t;
  t.dtype = DataType::kFloat32;
  t.shape = {0, 3};
  ExpectRefused(CheckSplits(t, {big, big, big, big}, 4, "x"), {"'x'", "splits [", "non-negative", "(4)"});
  t.shape = {6};
  CHECK(CheckSplits(t, {1, 2, 3, 0}, 4, "x").ok());
}

TEST_CASE("CheckOutputApart: in place or apart, not partly overlapping", "[validate]") {
  std::vector<float> memory(16);
  CHECK(CheckOutputApart(At(memory, 0, 4), At(memory, 0, 4), "t").ok());  // in place
  CHECK(CheckOutputApart(At(memory, 0, 4), At(memory, 4, 4), "t").ok());  // adjacent
  CHECK(CheckOutputApart(At(memory, 8, 4), At(memory, 0, 4), "t").ok());
  CHECK(CheckOutputApart(At(memory, 3, 0), At(memory, 2, 0), "t").ok());  // empty
  ExpectRefused(CheckOutputApart(At(memory, 0, 4), At(memory, 2, 4), "t"), {"'t'", "same memory"});
  ExpectRefused(CheckOutputApart(At(memory, 2, 4), At(memory, 0, 4), "t"), {"'t'", "same memory"});
}

TEST_CASE("CheckOutputsApart accepts in-place groups, separate outputs and shared inputs", "[validate]") {
  std::vector<float> memory(64);
  // Every member in place.
  CHECK(Check({At(memory, 0, 4), At(memory, 4, 4), At(memory, 8, 4)},
              {At(memory, 0, 4), At(memory, 4, 4), At(memory, 8, 4)})
            .ok());
  // Out of place, and two members reading the same input.
  CHECK(Check({At(memory, 0, 8), At(memory, 0, 8)}, {At(memory, 16, 8), At(memory, 32, 8)}).ok());
  // Empty members anywhere.
  CHECK(Check({At(memory, 0, 0), At(memory, 0, 4)}, {At(memory, 0, 0), At(memory, 0, 4)}).ok());
}

TEST_CASE("CheckOutputsApart refuses an output that overlaps another tensor of the call", "[validate]") {
  std::vector<float> memory(64);
  SECTION("outputs swapped between two members") {
    ExpectRefused(Check({At(memory, 0, 4), At(memory, 4, 4)}, {At(memory, 4, 4), At(memory, 0, 4)}),
                  {"output", "input", "in place"});
  }
  SECTION("the same tensor twice, in place") {
    ExpectRefused(Check({At(memory, 0, 4), At(memory, 0, 4)}, {At(memory, 0, 4), At(memory, 0, 4)}),
                  {"'g.0'", "'g.1'", "output of tensor"});
  }
  SECTION("an in-place member whose memory another member reads") {
    ExpectRefused(Check({At(memory, 0, 8), At(memory, 4, 2)}, {At(memory, 0, 8), At(memory, 32, 2)}),
                  {"'g.0'", "'g.1'", "input of tensor"});
  }
  SECTION("an output inside a long input that starts earlier") {
    ExpectRefused(Check({At(memory, 0, 40), At(memory, 48, 4), At(memory, 56, 4)},
                        {At(memory, 40, 8), At(memory, 10, 4), At(memory, 56, 4)}),
                  {"'g.1'", "'g.0'"});
  }
  SECTION("a member's own output partly over its input") {
    ExpectRefused(Check({At(memory, 0, 4), At(memory, 8, 4)}, {At(memory, 0, 4), At(memory, 10, 4)}),
                  {"'g.1'", "same memory"});
  }
}

}  // namespace
}  // namespace accord
