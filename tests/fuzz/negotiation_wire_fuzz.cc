// Fuzzes the decoders of the negotiation messages (negotiation/message.h),
// the bytes that ranks exchange every full round. The first input byte picks
// the message, the rest are its bytes:
//   0: a request list (DeserializeRequests)
//   1: a response list (DeserializeResponseList)
//   2: a rank's envelope (DeserializeEnvelope: stop reason, failed flag, requests)
// Properties: decoding returns a message or a kInternal Status, never
// crashes or reads out of bounds (ASan); a decoded message holds only known
// enum values (op types, dtypes, reduce ops, devices, status codes) and
// encodes to bytes that decode to the same encoding again; a request list,
// whose every byte is significant, encodes to exactly the input.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_check.h"
#include "negotiation/message.h"

namespace {

using accord::DeserializeEnvelope;
using accord::DeserializeRequests;
using accord::DeserializeResponseList;
using accord::StatusCode;

void CheckError(const accord::Status& status) {
  FUZZ_CHECK(status.code() == StatusCode::kInternal, "a decoding error is kInternal");
  FUZZ_CHECK(!status.message().empty(), "a decoding error says why");
}

// Every rank runs the same build, so a decoded enum outside its values can
// only be corruption, which the decoders must refuse.
void CheckEnums(accord::OpType type, accord::DataType dtype, accord::ReduceOp op, accord::DeviceType device) {
  FUZZ_CHECK(type <= accord::OpType::kRemoveProcessSet, "a known op type");
  FUZZ_CHECK(static_cast<int>(dtype) < accord::kNumDataTypes, "a known dtype");
  FUZZ_CHECK(op <= accord::ReduceOp::kAdasum, "a known reduce op");
  FUZZ_CHECK(device <= accord::DeviceType::kCUDA, "a known device type");
}

void CheckEnums(const std::vector<accord::Request>& requests) {
  for (const auto& r : requests) CheckEnums(r.type, r.dtype, r.op, r.device.type);
}

void RequestList(const std::string& bytes) {
  auto requests = DeserializeRequests(bytes);
  if (!requests.ok()) return CheckError(requests.status());
  CheckEnums(*requests);
  FUZZ_CHECK(accord::SerializeRequests(*requests) == bytes, "a decoded request list encodes to its input");
}

void ResponseList(const std::string& bytes) {
  auto list = DeserializeResponseList(bytes);
  if (!list.ok()) return CheckError(list.status());
  for (const auto& r : list->responses) {
    CheckEnums(r.type, r.dtype, r.op, r.device_type);
    FUZZ_CHECK(r.error_code >= StatusCode::kOk && r.error_code <= StatusCode::kInternal, "a known status code");
  }
  // Flag bytes other than 0 and 1 decode as true and encode as 1.
  const std::string once = accord::SerializeResponseList(*list);
  auto again = DeserializeResponseList(once);
  FUZZ_CHECK(again.ok(), "a re-encoded response list decodes");
  FUZZ_CHECK(accord::SerializeResponseList(*again) == once, "a response list survives a second round trip");
  FUZZ_CHECK(again->responses.size() == list->responses.size(), "the responses survive");
  FUZZ_CHECK(again->evictions == list->evictions, "the evictions survive");
}

void Envelope(const std::string& bytes) {
  auto envelope = DeserializeEnvelope(bytes);
  if (!envelope.ok()) return CheckError(envelope.status());
  CheckEnums(envelope->requests);
  const std::string once = accord::SerializeEnvelope(envelope->stop_reason, envelope->failed, envelope->requests);
  auto again = DeserializeEnvelope(once);
  FUZZ_CHECK(again.ok(), "a re-encoded envelope decodes");
  FUZZ_CHECK(again->stop_reason == envelope->stop_reason && again->failed == envelope->failed,
             "the stop reason and failed flag survive");
  FUZZ_CHECK(accord::SerializeEnvelope(again->stop_reason, again->failed, again->requests) == once,
             "an envelope survives a second round trip");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 3) {
    case 0: RequestList(bytes); break;
    case 1: ResponseList(bytes); break;
    default: Envelope(bytes); break;
  }
  return 0;
}
