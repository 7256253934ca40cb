// Fuzzes what the coordinator (rank 0 of a process set) does with the bytes
// the other ranks send it: envelopes decoded (DeserializeEnvelope), their
// requests recorded in a MessageTable, the ready responses built, encoded
// and decoded again for the broadcast, round after round.
//
// Input: one byte for the set size (1 + byte % 4), then rounds; a round is
// one envelope per rank, each as a 2-byte little-endian length and that many
// bytes. The input ends at the first envelope that does not decode, as the
// job would (every rank fails with the coordinator's fatal error).
// Properties: no crash, no undefined behaviour, whatever the requests say;
// every response the table builds encodes into a response list that
// decodes; plans are shaped for the set (allgather: one row count per rank;
// alltoall: size * size splits).
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_check.h"
#include "negotiation/message.h"
#include "negotiation/message_table.h"

namespace {

using accord::OpType;

void CheckResponses(const std::vector<accord::Response>& responses, int size) {
  for (const accord::Response& r : responses) {
    if (!r.ok()) {
      FUZZ_CHECK(!r.error_message.empty(), "an error response says why");
      continue;
    }
    if (r.type == OpType::kAllgather || r.type == OpType::kAlltoall) {
      FUZZ_CHECK(r.rank_rows.size() == static_cast<size_t>(size), "one row count per rank");
    }
    if (r.type == OpType::kAlltoall) {
      FUZZ_CHECK(r.splits.size() == static_cast<size_t>(size) * size, "size * size splits");
    }
  }
  accord::ResponseList list;
  list.responses = responses;
  auto decoded = accord::DeserializeResponseList(accord::SerializeResponseList(list));
  FUZZ_CHECK(decoded.ok(), "the coordinator's response list decodes");
  FUZZ_CHECK(decoded->responses.size() == responses.size(), "every response arrives");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const int set_size = 1 + data[0] % 4;
  size_t at = 1;
  accord::MessageTable table(set_size);
  while (at < size) {
    for (int rank = 0; rank < set_size; ++rank) {
      if (size - at < 2) return 0;
      size_t length = data[at] | static_cast<size_t>(data[at + 1]) << 8;
      at += 2;
      if (length > size - at) length = size - at;
      const std::string bytes(reinterpret_cast<const char*>(data) + at, length);
      at += length;
      auto envelope = accord::DeserializeEnvelope(bytes);
      if (!envelope.ok()) return 0;
      for (const accord::Request& request : envelope->requests) table.Add(rank, request);
    }
    std::vector<accord::Response> ready;
    table.TakeReady(&ready);
    CheckResponses(ready, set_size);
    (void)table.Stalled(accord::MessageTable::Clock::now(), 0.0);
  }
  return 0;
}
