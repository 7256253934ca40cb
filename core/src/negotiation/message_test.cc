// Tests for the negotiation wire messages: Request / ResponseList round trips
// with every field set, Request::SameSignature per field, and corrupt input
// (truncated, garbage, huge counts), which must give an error Status.
#include "negotiation/message.h"

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace accord {
namespace {

constexpr OpType kAllOpTypes[] = {OpType::kAllreduce, OpType::kAllgather,     OpType::kBroadcast,
                                  OpType::kAlltoall,  OpType::kReducescatter, OpType::kBarrier,
                                  OpType::kJoin,      OpType::kAddProcessSet, OpType::kRemoveProcessSet};
constexpr ReduceOp kAllReduceOps[] = {ReduceOp::kAverage, ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax,
                                      ReduceOp::kProduct};

// A request with every field set to a value that depends on `i`.
Request FullRequest(int i) {
  Request r;
  r.name = "layer" + std::to_string(i) + ".weight";
  r.type = kAllOpTypes[i % 9];
  r.dtype = static_cast<DataType>(i % kNumDataTypes);
  r.op = kAllReduceOps[i % 5];
  r.prescale_factor = 0.5 + i;
  r.postscale_factor = 1.0 / (i + 3);
  r.root_rank = i % 4;
  r.shape = {i + 1, 3, 7};
  r.device = (i % 2) ? Device::CUDA(i % 8) : Device::CPU();
  r.splits = {i, 2 * i, 0, 5};
  r.group = (i % 3) ? "group" + std::to_string(i) : "";
  r.group_size = i % 3;
  r.ranks = {0, i, i + 2};
  r.target_set = i - 1;
  return r;
}

Response FullResponse(int i) {
  Response r;
  r.type = kAllOpTypes[i % 9];
  r.name = "tensor/" + std::to_string(i);
  r.error_code = static_cast<StatusCode>(i % 9);
  r.error_message = i % 2 ? "accord: something about rank " + std::to_string(i) : "";
  r.dtype = static_cast<DataType>(kNumDataTypes - 1 - i % kNumDataTypes);
  r.op = kAllReduceOps[(i + 2) % 5];
  r.prescale_factor = 0.25 * (i + 1);
  r.postscale_factor = -3.5 + i;
  r.root_rank = i % 5;
  r.device_type = (i % 2) ? DeviceType::kCUDA : DeviceType::kCPU;
  r.shape = {4, i + 2};
  r.rank_rows = {4, i, 0, 9};
  r.splits = {1, 2, 3, i, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
  r.group = "g" + std::to_string(i);
  r.group_size = i + 1;
  r.last_joined_rank = i % 4;
  r.ranks = {i, i + 1};
  r.target_set = 2 * i;
  return r;
}

void CheckSameRequest(const Request& want, const Request& got, size_t index) {
  INFO("request " << index << " ('" << want.name << "')");
  CHECK(got.name == want.name);
  CHECK(got.type == want.type);
  CHECK(got.dtype == want.dtype);
  CHECK(got.op == want.op);
  CHECK(got.prescale_factor == want.prescale_factor);
  CHECK(got.postscale_factor == want.postscale_factor);
  CHECK(got.root_rank == want.root_rank);
  CHECK(got.shape == want.shape);
  CHECK(got.device == want.device);
  CHECK(got.splits == want.splits);
  CHECK(got.group == want.group);
  CHECK(got.group_size == want.group_size);
  CHECK(got.ranks == want.ranks);
  CHECK(got.target_set == want.target_set);
}

void CheckSameResponse(const Response& want, const Response& got, size_t index) {
  INFO("response " << index << " ('" << want.name << "')");
  CHECK(got.type == want.type);
  CHECK(got.name == want.name);
  CHECK(got.error_code == want.error_code);
  CHECK(got.error_message == want.error_message);
  CHECK(got.dtype == want.dtype);
  CHECK(got.op == want.op);
  CHECK(got.prescale_factor == want.prescale_factor);
  CHECK(got.postscale_factor == want.postscale_factor);
  CHECK(got.root_rank == want.root_rank);
  CHECK(got.device_type == want.device_type);
  CHECK(got.shape == want.shape);
  CHECK(got.rank_rows == want.rank_rows);
  CHECK(got.splits == want.splits);
  CHECK(got.group == want.group);
  CHECK(got.group_size == want.group_size);
  CHECK(got.last_joined_rank == want.last_joined_rank);
  CHECK(got.ranks == want.ranks);
  CHECK(got.target_set == want.target_set);
}

ResponseList FullResponseList(int n, bool join_started) {
  ResponseList list;
  for (int i = 0; i < n; ++i) list.responses.push_back(FullResponse(i));
  list.evictions = {"evicted.a", "", "evicted/b"};
  list.join_started = join_started;
  return list;
}

void PutU32(std::string* bytes, size_t at, uint32_t value) { std::memcpy(&(*bytes)[at], &value, sizeof(value)); }

TEST_CASE("request list round trips every field of every op type, dtype and reduce op", "[message]") {
  std::vector<Request> requests;
  for (int i = 0; i < 90; ++i) requests.push_back(FullRequest(i));  // covers all 9 x 10 x 5 values
  requests.push_back(Request{});                                    // all defaults, empty vectors
  Result<std::vector<Request>> back = DeserializeRequests(SerializeRequests(requests));
  INFO(back.status());
  REQUIRE(back.ok());
  REQUIRE(back->size() == requests.size());
  for (size_t i = 0; i < requests.size(); ++i) CheckSameRequest(requests[i], (*back)[i], i);
}

TEST_CASE("an empty request list round trips", "[message]") {
  Result<std::vector<Request>> back = DeserializeRequests(SerializeRequests({}));
  REQUIRE(back.ok());
  CHECK(back->empty());
}

TEST_CASE("response list round trips every field, evictions and join_started", "[message]") {
  for (bool join_started : {false, true}) {
    for (int n : {0, 1, 90}) {
      INFO("join_started=" << join_started << " responses=" << n);
      ResponseList list = FullResponseList(n, join_started);
      Result<ResponseList> back = DeserializeResponseList(SerializeResponseList(list));
      INFO(back.status());
      REQUIRE(back.ok());
      REQUIRE(back->responses.size() == list.responses.size());
      for (size_t i = 0; i < list.responses.size(); ++i) CheckSameResponse(list.responses[i], back->responses[i], i);
      CHECK(back->evictions == list.evictions);
      CHECK(back->join_started == join_started);
    }
  }
  Result<ResponseList> empty = DeserializeResponseList(SerializeResponseList(ResponseList{}));
  REQUIRE(empty.ok());
  CHECK(empty->responses.empty());
  CHECK(empty->evictions.empty());
  CHECK_FALSE(empty->join_started);
}

TEST_CASE("response list round trips the autotuner's setting", "[message]") {
  ResponseList list = FullResponseList(2, false);
  const bool cache_enabled = GENERATE(true, false);
  list.tuning = TuningChoice{int64_t{3} << 20, 2.5, true, cache_enabled};
  const std::string bytes = SerializeResponseList(list);
  Result<ResponseList> back = DeserializeResponseList(bytes);
  REQUIRE(back.ok());
  REQUIRE(back->tuning.has_value());
  CHECK(back->tuning->fusion_threshold_bytes == (int64_t{3} << 20));
  CHECK(back->tuning->cycle_time_ms == 2.5);
  CHECK(back->tuning->final);
  CHECK(back->tuning->cache_enabled == cache_enabled);
  CHECK(back->responses.size() == 2);
  for (size_t n = 0; n < bytes.size(); ++n) {
    INFO("first " << n << " of " << bytes.size() << " bytes");
    CHECK_FALSE(DeserializeResponseList(bytes.substr(0, n)).ok());
  }
  list.tuning.reset();
  Result<ResponseList> none = DeserializeResponseList(SerializeResponseList(list));
  REQUIRE(none.ok());
  CHECK_FALSE(none->tuning.has_value());
}

TEST_CASE("SameSignature ignores the name and sees every other field", "[message]") {
  const Request base = FullRequest(7);
  Request renamed = base;
  renamed.name = "something.else";
  CHECK(renamed.SameSignature(base));
  CHECK(Request(base).SameSignature(base));

  struct Change {
    const char* field;
    std::function<void(Request*)> apply;
  };
  const std::vector<Change> changes = {
      {"type", [](Request* r) { r->type = OpType::kBroadcast; }},
      {"dtype", [](Request* r) { r->dtype = DataType::kFloat64; }},
      {"op", [](Request* r) { r->op = ReduceOp::kProduct; }},
      {"prescale_factor", [](Request* r) { r->prescale_factor *= 2; }},
      {"postscale_factor", [](Request* r) { r->postscale_factor *= 2; }},
      {"root_rank", [](Request* r) { r->root_rank += 1; }},
      {"shape dim 0", [](Request* r) { r->shape[0] += 1; }},
      {"shape rank", [](Request* r) { r->shape.push_back(1); }},
      {"shape flattened", [](Request* r) { r->shape = {NumElements(r->shape)}; }},
      {"device type", [](Request* r) { r->device = Device::CPU(); }},
      {"device ordinal", [](Request* r) { r->device.ordinal += 1; }},
      {"splits value", [](Request* r) { r->splits[1] += 1; }},
      {"splits emptied", [](Request* r) { r->splits.clear(); }},
      {"group", [](Request* r) { r->group += "x"; }},
      {"group removed", [](Request* r) { r->group.clear(); }},
      {"group_size", [](Request* r) { r->group_size += 1; }},
      {"ranks", [](Request* r) { r->ranks.back() += 1; }},
      {"ranks length", [](Request* r) { r->ranks.pop_back(); }},
      {"target_set", [](Request* r) { r->target_set += 1; }},
  };
  REQUIRE(base.device.type == DeviceType::kCUDA);  // so "device type" is a change
  for (const auto& change : changes) {
    Request changed = base;
    change.apply(&changed);
    INFO("changed field: " << change.field);
    CHECK_FALSE(changed.SameSignature(base));
    CHECK_FALSE(base.SameSignature(changed));
  }
}

TEST_CASE("every truncation of a request list is an error", "[message]") {
  const std::string bytes = SerializeRequests({FullRequest(1), FullRequest(2)});
  for (size_t n = 0; n < bytes.size(); ++n) {
    Result<std::vector<Request>> got = DeserializeRequests(bytes.substr(0, n));
    INFO("first " << n << " of " << bytes.size() << " bytes");
    CHECK_FALSE(got.ok());
  }
  Result<std::vector<Request>> extra = DeserializeRequests(bytes + '\0');
  INFO("one trailing byte");
  CHECK_FALSE(extra.ok());
}

TEST_CASE("every truncation of a response list is an error", "[message]") {
  const std::string bytes = SerializeResponseList(FullResponseList(2, true));
  for (size_t n = 0; n < bytes.size(); ++n) {
    Result<ResponseList> got = DeserializeResponseList(bytes.substr(0, n));
    INFO("first " << n << " of " << bytes.size() << " bytes");
    CHECK_FALSE(got.ok());
  }
  Result<ResponseList> extra = DeserializeResponseList(bytes + '\0');
  INFO("one trailing byte");
  CHECK_FALSE(extra.ok());
}

TEST_CASE("huge counts in a request list are errors, not allocations", "[message]") {
  const std::string good = SerializeRequests({FullRequest(3)});
  std::string bytes = good;
  PutU32(&bytes, 0, 0xFFFFFFFFu);  // request count
  CHECK_FALSE(DeserializeRequests(bytes).ok());
  PutU32(&bytes, 0, 2);  // one more request than present
  CHECK_FALSE(DeserializeRequests(bytes).ok());
  // Layout: count(4) name_len(4) name type dtype op pre(8) post(8) root(4) shape_len(4) ...
  const size_t name_len_at = 4;
  const size_t shape_len_at = 4 + 4 + FullRequest(3).name.size() + 3 + 8 + 8 + 4;
  for (size_t at : {name_len_at, shape_len_at}) {
    for (uint32_t huge : {0xFFFFFFFFu, 0x7FFFFFFFu, 0x20000000u}) {
      bytes = good;
      PutU32(&bytes, at, huge);
      INFO("count " << huge << " at byte " << at);
      CHECK_FALSE(DeserializeRequests(bytes).ok());
    }
  }
}

TEST_CASE("huge counts in a response list are errors, not allocations", "[message]") {
  ResponseList list;
  list.responses.push_back(FullResponse(1));
  list.evictions = {"x"};
  const std::string good = SerializeResponseList(list);
  // Layout: count(4) type(1) name_len(4) name ...; the evictions count sits
  // before its one entry (4 + 1 bytes), the join flag (1 byte), and the
  // fatal error and stop message (empty strings, 4 bytes each).
  const size_t evictions_at = good.size() - 4 - 4 - 1 - (4 + 1) - 4;
  for (size_t at : {size_t{0}, size_t{5}, evictions_at}) {
    for (uint32_t huge : {0xFFFFFFFFu, 0x7FFFFFFFu, 0x20000000u, 3u}) {
      std::string bytes = good;
      PutU32(&bytes, at, huge);
      INFO("count " << huge << " at byte " << at);
      CHECK_FALSE(DeserializeResponseList(bytes).ok());
    }
  }
}

TEST_CASE("garbage bytes are errors, never a crash", "[message]") {
  std::mt19937 rng(20240531);
  int parsed = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    std::string bytes(5 + rng() % 300, '\0');  // 4 bytes of count 0 would be a valid empty list
    for (char& c : bytes) c = static_cast<char>(rng());
    // Small leading counts too, so the parser gets past the header.
    if (trial % 2 && bytes.size() >= 4) PutU32(&bytes, 0, rng() % 4);
    if (DeserializeRequests(bytes).ok()) ++parsed;
    if (DeserializeResponseList(bytes).ok()) ++parsed;
  }
  INFO(parsed << " of 4000 garbage buffers parsed as valid messages");
  CHECK(parsed == 0);
}

// Out-of-range enum bytes decode into enum values that no switch handles
// (OpTypeName says "unknown", DataTypeSize of such a dtype is not a size).
TEST_CASE("out-of-range enum values are rejected", "[message]") {
  Request r = FullRequest(0);
  std::string bytes = SerializeRequests({r});
  const size_t type_at = 4 + 4 + r.name.size();
  for (size_t at : {type_at, type_at + 1, type_at + 2}) {  // type, dtype, op
    std::string bad = bytes;
    bad[at] = static_cast<char>(200);
    INFO("byte " << at << " set to 200");
    CHECK_FALSE(DeserializeRequests(bad).ok());
  }
}

// Found by fuzzing: the status code of a response was checked against the
// largest code only, so a negative one (any int32 on the wire) decoded as a
// valid error response with a code that is none of StatusCode's.
TEST_CASE("a response with a negative status code is rejected", "[message]") {
  ResponseList list;
  list.responses.push_back(FullResponse(1));
  const std::string good = SerializeResponseList(list);
  // Layout: count(4) type(1) name_len(4) name error_code(4) ...
  const size_t code_at = 4 + 1 + 4 + list.responses[0].name.size();
  for (int32_t code : {-1, -2147483647 - 1, 9, 1000}) {
    std::string bytes = good;
    std::memcpy(&bytes[code_at], &code, sizeof(code));
    INFO("status code " << code);
    Result<ResponseList> got = DeserializeResponseList(bytes);
    REQUIRE_FALSE(got.ok());
    CHECK_THAT(got.status().message(), Catch::Contains("out-of-range enum"));
  }
  std::string bytes = good;
  const int32_t internal = static_cast<int32_t>(StatusCode::kInternal);
  std::memcpy(&bytes[code_at], &internal, sizeof(internal));
  CHECK(DeserializeResponseList(bytes).ok());
}

// A count no larger than the input's length used to pass, and the decoder
// then allocated that many entries (a request takes ~250 bytes in memory):
// 64 KiB of input claiming 65536 requests cost 16 MiB before it failed. A
// count must now fit in the bytes that follow, at the least an entry can take.
TEST_CASE("a count the remaining bytes cannot hold is refused before allocating", "[message]") {
  std::string requests(64 << 10, '\0');
  PutU32(&requests, 0, static_cast<uint32_t>(requests.size()));
  Result<std::vector<Request>> got = DeserializeRequests(requests);
  REQUIRE_FALSE(got.ok());
  CHECK_THAT(got.status().message(), Catch::Contains("65536 requests cannot fit in the 65532 bytes that follow"));
  // Exactly as many default requests as the bytes hold still decode.
  const std::vector<Request> defaults(3);
  Result<std::vector<Request>> three = DeserializeRequests(SerializeRequests(defaults));
  REQUIRE(three.ok());
  CHECK(three->size() == 3);

  std::string responses(64 << 10, '\0');
  PutU32(&responses, 0, static_cast<uint32_t>(responses.size()));
  Result<ResponseList> list = DeserializeResponseList(responses);
  REQUIRE_FALSE(list.ok());
  CHECK_THAT(list.status().message(), Catch::Contains("65536 responses cannot fit"));
  ResponseList evictions;
  evictions.evictions = {"a", "b"};
  std::string bytes = SerializeResponseList(evictions);
  PutU32(&bytes, 4, 1000);  // the evictions count, after 0 responses
  Result<ResponseList> evicted = DeserializeResponseList(bytes);
  REQUIRE_FALSE(evicted.ok());
  CHECK_THAT(evicted.status().message(), Catch::Contains("1000 names cannot fit"));
}

TEST_CASE("an envelope round trips its stop reason, failed flag and requests", "[message]") {
  const std::vector<Request> requests = {FullRequest(1), FullRequest(2)};
  for (bool failed : {false, true}) {
    Result<RankEnvelope> back = DeserializeEnvelope(SerializeEnvelope(failed ? "it failed" : "", failed, requests));
    INFO(back.status());
    REQUIRE(back.ok());
    CHECK(back->stop_reason == (failed ? "it failed" : ""));
    CHECK(back->failed == failed);
    REQUIRE(back->requests.size() == requests.size());
    for (size_t i = 0; i < requests.size(); ++i) CheckSameRequest(requests[i], back->requests[i], i);
  }
}

TEST_CASE("a corrupt envelope or request list inside it is an error", "[message]") {
  const std::string good = SerializeEnvelope("why", true, {FullRequest(4)});
  for (size_t n = 0; n < good.size(); ++n) {
    INFO("first " << n << " of " << good.size() << " bytes");
    CHECK_FALSE(DeserializeEnvelope(good.substr(0, n)).ok());
  }
  CHECK(DeserializeEnvelope(good + 'x').status().message() == "corrupt envelope");
  // A well-formed envelope around a corrupt request list says what is wrong with the list.
  std::string bad_list = SerializeRequests({FullRequest(4)});
  bad_list.pop_back();
  std::string envelope = SerializeEnvelope("", false, {});
  const std::string empty_list = SerializeRequests({});
  envelope.replace(envelope.size() - empty_list.size() - 4, std::string::npos, "");
  const auto size = static_cast<uint32_t>(bad_list.size());
  envelope.append(reinterpret_cast<const char*>(&size), sizeof(size));
  envelope += bad_list;
  Result<RankEnvelope> got = DeserializeEnvelope(envelope);
  REQUIRE_FALSE(got.ok());
  CHECK_THAT(got.status().message(), Catch::Contains("corrupt request list"));
}

}  // namespace
}  // namespace accord
