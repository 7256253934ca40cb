// Tests of status.cc: Status values, their text and their codes' names.
#include <catch2/catch.hpp>

#include <sstream>
#include <string>

#include "accord/status.h"

namespace accord {
namespace {

TEST_CASE("Status values", "[status]") {
  const Status ok;
  CHECK(ok.ok());
  CHECK(ok.code() == StatusCode::kOk);
  CHECK(ok.message().empty());
  CHECK(ok.ToString() == "OK");
  const Status bad = Status::Mismatch("tensor x: shapes differ");
  CHECK_FALSE(bad.ok());
  CHECK(bad.code() == StatusCode::kMismatch);
  CHECK(bad.message() == "tensor x: shapes differ");
  CHECK(bad.ToString() == "MISMATCH: tensor x: shapes differ");
  const Status copy = bad;  // copies share the message
  CHECK(copy.message() == bad.message());
  std::ostringstream out;
  out << Status::Internal("boom");
  CHECK(out.str() == "INTERNAL: boom");
  // An OK code with a message is still plain OK.
  CHECK(Status(StatusCode::kOk, "ignored").ok());
  CHECK(Status(StatusCode::kOk, "ignored").message().empty());
  CHECK(std::string(StatusCodeName(StatusCode::kInvalidArgument)) == "INVALID_ARGUMENT");
  CHECK(std::string(StatusCodeName(StatusCode::kShutDown)) == "SHUT_DOWN");
}

}  // namespace
}  // namespace accord
