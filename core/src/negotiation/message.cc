#include "negotiation/message.h"

#include <tuple>

#include "negotiation/wire.h"

namespace accord {

const char* OpTypeName(OpType type) {
  switch (type) {
    case OpType::kAllreduce: return "allreduce";
    case OpType::kAllgather: return "allgather";
    case OpType::kBroadcast: return "broadcast";
    case OpType::kAlltoall: return "alltoall";
    case OpType::kReducescatter: return "reducescatter";
    case OpType::kBarrier: return "barrier";
    case OpType::kJoin: return "join";
    case OpType::kAddProcessSet: return "add_process_set";
    case OpType::kRemoveProcessSet: return "remove_process_set";
  }
  return "unknown";
}

namespace {

// Every rank runs the same build, so an out-of-range value means corruption.
bool ValidEnums(OpType type, DataType dtype, ReduceOp op, DeviceType device) {
  return type <= OpType::kRemoveProcessSet && static_cast<int>(dtype) < kNumDataTypes && op <= ReduceOp::kAdasum &&
         device <= DeviceType::kCUDA;
}

// The fields of a request after its name, and of a response, in wire
// order. `io` is a WireWriter (R const) or a WireReader.
template <typename Io, typename R>
void RequestBody(Io& io, R& r) {
  io.Field(r.type);
  io.Field(r.dtype);
  io.Field(r.op);
  io.Field(r.prescale_factor);
  io.Field(r.postscale_factor);
  io.Field(r.root_rank);
  io.Field(r.shape);
  io.Field(r.device.type);
  io.Field(r.device.ordinal);
  io.Field(r.splits);
  io.Field(r.group);
  io.Field(r.group_size);
  io.Field(r.ranks);
  io.Field(r.target_set);
}

template <typename Io, typename R>
void ResponseFields(Io& io, R& r) {
  io.Field(r.type);
  io.Field(r.name);
  io.Field(r.error_code);
  io.Field(r.error_message);
  io.Field(r.dtype);
  io.Field(r.op);
  io.Field(r.prescale_factor);
  io.Field(r.postscale_factor);
  io.Field(r.root_rank);
  io.Field(r.device_type);
  io.Field(r.shape);
  io.Field(r.rank_rows);
  io.Field(r.splits);
  io.Field(r.group);
  io.Field(r.group_size);
  io.Field(r.last_joined_rank);
  io.Field(r.ranks);
  io.Field(r.target_set);
}

// The fewest bytes one request or response takes on the wire (every string
// and vector empty). A count larger than the bytes left divided by this
// cannot be honest, and is refused before anything is allocated for it.
size_t MinRequestBytes() {
  static const size_t bytes = SerializeRequests({Request{}}).size() - sizeof(uint32_t);
  return bytes;
}
size_t MinResponseBytes() {
  static const size_t bytes = [] {
    ResponseList one;
    one.responses.emplace_back();
    return SerializeResponseList(one).size() - SerializeResponseList({}).size();
  }();
  return bytes;
}

// "corrupt request list header: 70000 requests cannot fit in the 1024 bytes that follow".
Status CountTooLarge(const char* what, uint32_t count, const char* entries, size_t remaining) {
  return Status::Internal(std::string("corrupt ") + what + ": " + std::to_string(count) + " " + entries +
                          " cannot fit in the " + std::to_string(remaining) + " bytes that follow");
}

}  // namespace

namespace {

// Every field of a request but its name (keep in step with RequestBody).
auto SignatureFields(const Request& r) {
  return std::tie(r.type, r.dtype, r.op, r.prescale_factor, r.postscale_factor, r.root_rank, r.shape, r.device,
                  r.splits, r.group, r.group_size, r.ranks, r.target_set);
}

}  // namespace

bool Request::SameSignature(const Request& other) const { return SignatureFields(*this) == SignatureFields(other); }

int64_t Response::RowElements() const {
  int64_t n = 1;
  for (size_t i = 1; i < shape.size(); ++i) n *= shape[i];
  return n;
}

std::string SerializeRequests(const std::vector<Request>& requests) {
  WireWriter w;
  w.Put<uint32_t>(static_cast<uint32_t>(requests.size()));
  for (const auto& r : requests) {
    w.PutString(r.name);
    RequestBody(w, r);
  }
  return w.Take();
}

Result<std::vector<Request>> DeserializeRequests(const std::string& bytes) {
  WireReader in(bytes);
  const uint32_t count = in.Get<uint32_t>();
  if (in.failed()) return Status::Internal("corrupt request list header");
  if (count > in.remaining() / MinRequestBytes()) {
    return CountTooLarge("request list header", count, "requests", in.remaining());
  }
  std::vector<Request> requests(count);
  for (auto& r : requests) {
    r.name = in.GetString();
    RequestBody(in, r);
    if (in.failed()) break;
  }
  if (in.failed() || !in.done()) {
    return Status::Internal("corrupt request list (" + std::to_string(bytes.size()) + " bytes)");
  }
  for (const auto& r : requests) {
    if (!ValidEnums(r.type, r.dtype, r.op, r.device.type)) {
      return Status::Internal("corrupt request list: out-of-range enum in '" + r.name + "'");
    }
  }
  return requests;
}

std::string SerializeResponseList(const ResponseList& list) {
  WireWriter w;
  w.Put<uint32_t>(static_cast<uint32_t>(list.responses.size()));
  for (const auto& r : list.responses) ResponseFields(w, r);
  w.Put<uint32_t>(static_cast<uint32_t>(list.evictions.size()));
  for (const auto& name : list.evictions) w.PutString(name);
  w.Put<uint8_t>(list.join_started ? 1 : 0);
  w.PutString(list.fatal_error);
  w.PutString(list.stop_message);
  w.Put<uint8_t>(list.tuning ? 1 : 0);
  if (list.tuning) {
    w.Put<int64_t>(list.tuning->fusion_threshold_bytes);
    w.Put<double>(list.tuning->cycle_time_ms);
    w.Put<uint8_t>(list.tuning->final ? 1 : 0);
    w.Put<uint8_t>(list.tuning->cache_enabled ? 1 : 0);
  }
  return w.Take();
}

Result<ResponseList> DeserializeResponseList(const std::string& bytes) {
  WireReader in(bytes);
  ResponseList list;
  const uint32_t count = in.Get<uint32_t>();
  if (in.failed()) return Status::Internal("corrupt response list header");
  if (count > in.remaining() / MinResponseBytes()) {
    return CountTooLarge("response list header", count, "responses", in.remaining());
  }
  list.responses.resize(count);
  for (auto& r : list.responses) {
    if (in.failed()) break;
    ResponseFields(in, r);
  }
  const uint32_t evictions = in.failed() ? 0 : in.Get<uint32_t>();
  if (evictions > in.remaining() / sizeof(uint32_t)) {
    return CountTooLarge("response list evictions", evictions, "names", in.remaining());
  }
  list.evictions.resize(evictions);
  for (auto& name : list.evictions) name = in.GetString();
  list.join_started = in.Get<uint8_t>() != 0;
  list.fatal_error = in.GetString();
  list.stop_message = in.GetString();
  if (in.Get<uint8_t>() != 0) {
    TuningChoice tuning;
    tuning.fusion_threshold_bytes = in.Get<int64_t>();
    tuning.cycle_time_ms = in.Get<double>();
    tuning.final = in.Get<uint8_t>() != 0;
    tuning.cache_enabled = in.Get<uint8_t>() != 0;
    list.tuning = tuning;
  }
  for (const auto& r : list.responses) {
    if (!ValidEnums(r.type, r.dtype, r.op, r.device_type) || r.error_code < StatusCode::kOk ||
        r.error_code > StatusCode::kInternal) {
      return Status::Internal("corrupt response list: out-of-range enum in '" + r.name + "'");
    }
  }
  if (in.failed() || !in.done()) {
    return Status::Internal("corrupt response list (" + std::to_string(bytes.size()) + " bytes)");
  }
  return list;
}

std::string SerializeEnvelope(const std::string& stop_reason, bool failed, const std::vector<Request>& requests) {
  WireWriter w;
  w.PutString(stop_reason);
  w.Put<uint8_t>(failed ? 1 : 0);
  w.PutString(SerializeRequests(requests));
  return w.Take();
}

Result<RankEnvelope> DeserializeEnvelope(const std::string& bytes) {
  WireReader in(bytes);
  RankEnvelope envelope;
  envelope.stop_reason = in.GetString();
  envelope.failed = in.Get<uint8_t>() != 0;
  const std::string body = in.GetString();
  if (in.failed() || !in.done()) return Status::Internal("corrupt envelope");
  ACCORD_ASSIGN_OR_RETURN(envelope.requests, DeserializeRequests(body));
  return envelope;
}

}  // namespace accord
