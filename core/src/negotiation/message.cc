#include "negotiation/message.h"

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
  return type <= OpType::kRemoveProcessSet && static_cast<int>(dtype) < kNumDataTypes && op <= ReduceOp::kProduct &&
         device <= DeviceType::kCUDA;
}

void WriteRequestBody(const Request& r, WireWriter* w) {
  w->Put(r.type);
  w->Put(r.dtype);
  w->Put(r.op);
  w->Put(r.prescale_factor);
  w->Put(r.postscale_factor);
  w->Put(r.root_rank);
  w->PutVector(r.shape);
  w->Put(r.device.type);
  w->Put(static_cast<int32_t>(r.device.ordinal));
  w->PutVector(r.splits);
  w->PutString(r.group);
  w->Put(r.group_size);
  w->PutVector(r.ranks);
  w->Put(r.target_set);
}

void ReadRequestBody(WireReader* in, Request* r) {
  r->type = in->Get<OpType>();
  r->dtype = in->Get<DataType>();
  r->op = in->Get<ReduceOp>();
  r->prescale_factor = in->Get<double>();
  r->postscale_factor = in->Get<double>();
  r->root_rank = in->Get<int32_t>();
  r->shape = in->GetVector<int64_t>();
  r->device.type = in->Get<DeviceType>();
  r->device.ordinal = in->Get<int32_t>();
  r->splits = in->GetVector<int64_t>();
  r->group = in->GetString();
  r->group_size = in->Get<int32_t>();
  r->ranks = in->GetVector<int32_t>();
  r->target_set = in->Get<int32_t>();
}

void WriteResponse(const Response& r, WireWriter* w) {
  w->Put(r.type);
  w->PutString(r.name);
  w->Put(r.error_code);
  w->PutString(r.error_message);
  w->Put(r.dtype);
  w->Put(r.op);
  w->Put(r.prescale_factor);
  w->Put(r.postscale_factor);
  w->Put(r.root_rank);
  w->Put(r.device_type);
  w->PutVector(r.shape);
  w->PutVector(r.rank_rows);
  w->PutVector(r.splits);
  w->PutString(r.group);
  w->Put(r.group_size);
  w->Put(r.last_joined_rank);
  w->PutVector(r.ranks);
  w->Put(r.target_set);
}

void ReadResponse(WireReader* in, Response* r) {
  r->type = in->Get<OpType>();
  r->name = in->GetString();
  r->error_code = in->Get<StatusCode>();
  r->error_message = in->GetString();
  r->dtype = in->Get<DataType>();
  r->op = in->Get<ReduceOp>();
  r->prescale_factor = in->Get<double>();
  r->postscale_factor = in->Get<double>();
  r->root_rank = in->Get<int32_t>();
  r->device_type = in->Get<DeviceType>();
  r->shape = in->GetVector<int64_t>();
  r->rank_rows = in->GetVector<int64_t>();
  r->splits = in->GetVector<int64_t>();
  r->group = in->GetString();
  r->group_size = in->Get<int32_t>();
  r->last_joined_rank = in->Get<int32_t>();
  r->ranks = in->GetVector<int32_t>();
  r->target_set = in->Get<int32_t>();
}

}  // namespace

std::string Request::Signature() const {
  WireWriter w;
  WriteRequestBody(*this, &w);
  return w.Take();
}

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
    WriteRequestBody(r, &w);
  }
  return w.Take();
}

Result<std::vector<Request>> DeserializeRequests(const std::string& bytes) {
  WireReader in(bytes);
  const uint32_t count = in.Get<uint32_t>();
  if (in.failed() || count > bytes.size()) return Status::Internal("corrupt request list header");
  std::vector<Request> requests(count);
  for (auto& r : requests) {
    r.name = in.GetString();
    ReadRequestBody(&in, &r);
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
  for (const auto& r : list.responses) WriteResponse(r, &w);
  w.Put<uint32_t>(static_cast<uint32_t>(list.evictions.size()));
  for (const auto& name : list.evictions) w.PutString(name);
  w.Put<uint8_t>(list.join_started ? 1 : 0);
  w.PutString(list.fatal_error);
  return w.Take();
}

Result<ResponseList> DeserializeResponseList(const std::string& bytes) {
  WireReader in(bytes);
  ResponseList list;
  const uint32_t count = in.Get<uint32_t>();
  if (in.failed() || count > bytes.size()) return Status::Internal("corrupt response list header");
  list.responses.resize(count);
  for (auto& r : list.responses) {
    if (in.failed()) break;
    ReadResponse(&in, &r);
  }
  const uint32_t evictions = in.failed() ? 0 : in.Get<uint32_t>();
  if (evictions > bytes.size()) return Status::Internal("corrupt response list evictions");
  list.evictions.resize(evictions);
  for (auto& name : list.evictions) name = in.GetString();
  list.join_started = in.Get<uint8_t>() != 0;
  list.fatal_error = in.GetString();
  for (const auto& r : list.responses) {
    if (!ValidEnums(r.type, r.dtype, r.op, r.device_type) || r.error_code > StatusCode::kInternal) {
      return Status::Internal("corrupt response list: out-of-range enum in '" + r.name + "'");
    }
  }
  if (in.failed() || !in.done()) {
    return Status::Internal("corrupt response list (" + std::to_string(bytes.size()) + " bytes)");
  }
  return list;
}

}  // namespace accord
