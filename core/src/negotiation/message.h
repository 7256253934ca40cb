// Wire messages of the negotiation protocol (see docs/negotiation.md).
//
// A Request is one rank's announcement that a named tensor is ready; a
// Response is the coordinator's verdict for that name, identical on every
// rank: either the plan (shapes of every rank, op, scale factors, ...) or an
// error. Both serialise to a compact binary form; nothing here is thread-aware.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "accord/accord.h"
#include "accord/status.h"
#include "accord/tensor.h"

namespace accord {

enum class OpType : uint8_t {
  kAllreduce = 0,
  kAllgather = 1,
  kBroadcast = 2,
  kAlltoall = 3,
  kReducescatter = 4,
  kBarrier = 5,
  kJoin = 6,
  kAddProcessSet = 7,
  kRemoveProcessSet = 8,
};
const char* OpTypeName(OpType type);

// The name under which a rank's join travels (one per process set at a time).
inline constexpr const char kJoinName[] = "__accord.join";

struct Request {
  std::string name;
  OpType type = OpType::kAllreduce;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  double prescale_factor = 1.0;
  double postscale_factor = 1.0;
  int32_t root_rank = -1;  // broadcast
  Shape shape;
  Device device;
  std::vector<int64_t> splits;  // alltoall; empty = even split
  std::string group;            // grouped ops: the group's name; empty otherwise
  int32_t group_size = 0;
  std::vector<int32_t> ranks;  // add process set: the new set's global ranks
  int32_t target_set = -1;     // remove process set

  // True if every field but the name is equal: a request for the same name
  // that is the same as the cached one is announced as a bit.
  bool SameSignature(const Request& other) const;
};

struct Response {
  OpType type = OpType::kAllreduce;
  std::string name;
  StatusCode error_code = StatusCode::kOk;  // kOk: a plan; otherwise error_message says why
  std::string error_message;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  double prescale_factor = 1.0;
  double postscale_factor = 1.0;
  int32_t root_rank = -1;
  DeviceType device_type = DeviceType::kCPU;
  Shape shape;                     // allreduce/broadcast/reducescatter: the input shape;
                                   // allgather/alltoall: rank 0's shape (trailing dims are common)
  std::vector<int64_t> rank_rows;  // allgather: dim 0 of every rank
  std::vector<int64_t> splits;     // alltoall: size*size, row r = rank r's sends
  std::string group;
  int32_t group_size = 0;
  int32_t last_joined_rank = -1;  // join
  std::vector<int32_t> ranks;     // add process set
  int32_t target_set = -1;        // remove process set

  bool ok() const { return error_code == StatusCode::kOk; }
  Status ToStatus() const { return ok() ? Status::OK() : Status(error_code, error_message); }
  // Elements in one row (the product of the trailing dims).
  int64_t RowElements() const;
};

// Parameters the autotuner on the coordinator chose (runtime/autotuner.h);
// every rank applies them right after the round that carries them, so fusion
// plans agree.
struct TuningChoice {
  int64_t fusion_threshold_bytes = 0;
  double cycle_time_ms = 0;
  bool final = false;         // the search is over: these are kept
  bool cache_enabled = true;  // the response cache is used (every set's controller switches together)
};

// What the coordinator broadcasts after a full round.
struct ResponseList {
  std::vector<Response> responses;     // in execution order
  std::vector<std::string> evictions;  // names every rank drops from its response cache
  bool join_started = false;           // a first rank joined: clear the cache, stop caching
  std::string fatal_error;             // the coordinator could not decide (e.g. a corrupt
                                       // message): every rank fails with this
  std::string stop_message;            // the job stops after this round (a rank asked to shut
                                       // down, or the stall inspector): why, and who asked first;
                                       // every rank fails its pending operations with this
  std::optional<TuningChoice> tuning;  // new autotuned parameters, if any
};

// What each rank sends the coordinator in a full round (controller.h, steps
// 3 and 5): why it asks to stop ("" if it does not), whether its coordinator
// failed, and its requests.
struct RankEnvelope {
  std::string stop_reason;
  bool failed = false;
  std::vector<Request> requests;
};

// The decoders take bytes from other ranks: any input gives either the
// message or a kInternal Status ("corrupt ..."), never reads out of bounds,
// and refuses a count before allocating for it when the bytes left cannot
// hold that many entries.
std::string SerializeRequests(const std::vector<Request>& requests);
Result<std::vector<Request>> DeserializeRequests(const std::string& bytes);
std::string SerializeResponseList(const ResponseList& list);
Result<ResponseList> DeserializeResponseList(const std::string& bytes);
std::string SerializeEnvelope(const std::string& stop_reason, bool failed, const std::vector<Request>& requests);
Result<RankEnvelope> DeserializeEnvelope(const std::string& bytes);

}  // namespace accord
