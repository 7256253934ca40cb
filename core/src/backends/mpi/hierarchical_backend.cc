#include "backends/mpi/hierarchical_backend.h"

#include <cstring>
#include <numeric>

#include "backends/mpi/mpi_check.h"
#include "backends/mpi/mpi_control_transport.h"

namespace accord {

namespace {

// Frees a committed MPI datatype when it goes out of scope.
class DatatypeGuard {
 public:
  explicit DatatypeGuard(MPI_Datatype type) : type_(type) {}
  DatatypeGuard(const DatatypeGuard&) = delete;
  DatatypeGuard& operator=(const DatatypeGuard&) = delete;
  ~DatatypeGuard() {
    if (type_ != MPI_DATATYPE_NULL) MPI_Type_free(&type_);
  }

 private:
  MPI_Datatype type_;
};

// How every step of the hierarchical collectives that is Open MPI's own
// collective waits: started non-blocking and tested as the ring does
// (kRingSpin, kRingLongestSleep), sleeping between tests, not spinning in a
// blocking MPI call. On a host whose ranks share its cores, a rank spinning
// in MPI_Reduce_scatter took the core from the one it waited for: on the
// test bed at 10 Gbit/s, 2 hosts x 2 ranks, W4 went from 920 to 1351
// samples/s and W2 at 64 MiB from 0.38 to 0.67 GB/s; small buffers' steps
// too, whose blocking calls made W4's bias batches of a few KiB take 15-17
// ms each, 4-5 ms polled (docs/decisions.md, "Hierarchical collectives").
PollPolicy HostPhasePolicy() {
  PollPolicy policy;
  policy.spin = kRingSpin;
  policy.max_sleep = kRingLongestSleep;
  policy.max_backoff = kRingLongestSleep;
  return policy;
}

// Waits for the non-blocking collective `request` (just started; `started`
// is the start's status) with HostPhasePolicy.
Status Polled(Status started, MPI_Request* request) {
  ACCORD_RETURN_IF_ERROR(started);
  return PollWait(request, HostPhasePolicy());
}

}  // namespace

HierarchicalBackend::HierarchicalBackend(MpiComm comm, HostLayout layout, const MpiTypes* types, int64_t max_count,
                                         HierarchicalOptions options)
    : MpiBackend(std::move(comm), types, max_count, layout.hosts > 1), layout_(std::move(layout)), options_(options) {
  hosts_contiguous_ = layout_.HostsContiguous();
  // No host has more than the fewest when they account for every rank.
  even_hosts_ = layout_.EvenHosts();
}

Result<std::unique_ptr<HierarchicalBackend>> HierarchicalBackend::Create(MpiComm comm, HostLayout layout,
                                                                         const MpiTypes* types, int64_t max_count,
                                                                         HierarchicalOptions options) {
  std::unique_ptr<HierarchicalBackend> backend(
      new HierarchicalBackend(std::move(comm), std::move(layout), types, max_count, options));
  const HostLayout& l = backend->layout_;
  // Keyed by host, so the cross rank of local rank j is its host's number.
  const bool crosses = l.local_rank < l.fewest_per_host;
  MPI_Comm cross;
  ACCORD_RETURN_IF_ERROR(
      ACCORD_MPI_CHECK(MPI_Comm_split(backend->comm_.get(), crosses ? l.local_rank : MPI_UNDEFINED, l.host, &cross)));
  if (crosses) {
    backend->cross_ = MpiComm(cross);
    MPI_Comm_set_errhandler(cross, MPI_ERRORS_RETURN);
  }
  return backend;
}

Status HierarchicalBackend::Allreduce(void* buffer, int64_t count, DataType dtype, ReduceOp op) {
  if (!options_.allreduce) return MpiBackend::Allreduce(buffer, count, dtype, op);
  char* base = static_cast<char*>(buffer);
  const size_t element = DataTypeSize(dtype);
  return ForEachPiece(count, [&](int64_t at, int n) { return AllreduceInHosts(base + at * element, n, dtype, op); });
}

Status HierarchicalBackend::AllreduceInHosts(char* data, int n, DataType dtype, ReduceOp op) {
  if (RingSized(n, dtype) && even_hosts_) return AllreduceRingsInHosts(data, n, dtype, op);
  const MPI_Datatype type = types_->Datatype(dtype);
  const MPI_Op mpi_op = types_->Op(op, dtype);
  const size_t element = DataTypeSize(dtype);
  const int shards = layout_.fewest_per_host;
  std::vector<int> counts(static_cast<size_t>(layout_.local_size), 0);
  std::vector<int> displs(counts.size(), 0);
  for (int j = 0, at = 0; j < shards; ++j) {
    counts[j] = n / shards + (j < n % shards ? 1 : 0);
    displs[j] = at;
    at += counts[j];
  }
  const int mine = counts[layout_.local_rank];
  const MPI_Comm local = layout_.local.get();
  // Every step is polled (HostPhasePolicy), small buffers' too.
  MPI_Request request;
  // 1. In place, this rank's shard of the host's sum lands at the start.
  ACCORD_RETURN_IF_ERROR(
      Polled(ACCORD_MPI_CHECK(MPI_Ireduce_scatter(MPI_IN_PLACE, data, counts.data(), type, mpi_op, local, &request)),
             &request));
  // 2. Across hosts, shard by shard.
  if (cross_) ACCORD_RETURN_IF_ERROR(CrossAllreduce(data, mine, dtype, op));
  // 3. Back to its place, then every shard to every rank of the host.
  const int place = displs[layout_.local_rank];
  if (mine > 0 && place > 0) std::memmove(data + static_cast<size_t>(place) * element, data, mine * element);
  return Polled(ACCORD_MPI_CHECK(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data, counts.data(), displs.data(),
                                                 type, local, &request)),
                &request);
}

Status HierarchicalBackend::AllreduceRingsInHosts(char* data, int n, DataType dtype, ReduceOp op) {
  const MPI_Datatype type = types_->Datatype(dtype);
  const size_t element = DataTypeSize(dtype);
  const MPI_Comm local = layout_.local.get();
  // 1. Local rank j ends with the host's sum of its segment.
  ACCORD_RETURN_IF_ERROR(RingReduceScatter(local, data, n, type, types_->Op(op, dtype), element, RingChunk(dtype),
                                           RingWindow(), ring_scratch_));
  // 2. Across hosts: every host's local rank j holds the same segment.
  const RingSegment mine = RingOwnedSegment(n, layout_.local_rank, layout_.local_size);
  ACCORD_RETURN_IF_ERROR(
      CrossAllreduce(data + mine.first * static_cast<int64_t>(element), static_cast<int>(mine.count), dtype, op));
  // 3. Every segment to every rank of the host.
  return RingAllgather(local, data, n, type, element, RingChunk(dtype), RingWindow());
}

Status HierarchicalBackend::CrossAllreduce(char* data, int n, DataType dtype, ReduceOp op) {
  // The cross communicator always spans hosts: a large shard goes round the
  // chunked ring, a small one is MPI_Iallreduce, polled.
  if (RingSized(n, dtype)) return AllreduceOn(cross_.get(), true, data, n, dtype, op);
  MPI_Request request;
  return Polled(ACCORD_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, data, n, types_->Datatype(dtype), types_->Op(op, dtype),
                                                cross_.get(), &request)),
                &request);
}

Status HierarchicalBackend::Allgatherv(void* buffer, const std::vector<int64_t>& counts, DataType dtype) {
  std::vector<int64_t> offsets(counts.size(), 0);
  std::exclusive_scan(counts.begin(), counts.end(), offsets.begin(), int64_t{0});
  const int64_t total = offsets.empty() ? 0 : offsets.back() + counts.back();
  if (!options_.allgather || total > max_count_) return MpiBackend::Allgatherv(buffer, counts, dtype);
  char* data = static_cast<char*>(buffer);
  // 1. The host's blocks, each at its global position.
  std::vector<int> local_counts, local_displs;
  for (int r : layout_.members) {
    local_counts.push_back(static_cast<int>(counts[r]));
    local_displs.push_back(static_cast<int>(offsets[r]));
  }
  MPI_Request request;
  ACCORD_RETURN_IF_ERROR(Polled(
      ACCORD_MPI_CHECK(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data, local_counts.data(),
                                       local_displs.data(), types_->Datatype(dtype), layout_.local.get(), &request)),
      &request));
  // 2. Between the hosts' leaders.
  if (layout_.local_rank == 0) ACCORD_RETURN_IF_ERROR(ExchangeHostBlocks(data, counts, offsets, dtype));
  // 3. From the leader to the rest of its host.
  return layout_.local_size > 1 ? BroadcastOtherHosts(data, counts, offsets, dtype) : Status::OK();
}

Status HierarchicalBackend::ExchangeHostBlocks(char* data, const std::vector<int64_t>& counts,
                                               const std::vector<int64_t>& offsets, DataType dtype) {
  const MPI_Datatype type = types_->Datatype(dtype);
  const size_t element = DataTypeSize(dtype);
  std::vector<int> host_counts(static_cast<size_t>(layout_.hosts), 0);
  std::vector<int> host_starts(host_counts.size(), -1);  // first set rank's offset, by host
  for (size_t r = 0; r < counts.size(); ++r) {
    const int h = layout_.host_of[r];
    host_counts[h] += static_cast<int>(counts[r]);
    if (host_starts[h] < 0) host_starts[h] = static_cast<int>(offsets[r]);
  }
  MPI_Request request;
  if (hosts_contiguous_) {
    return Polled(ACCORD_MPI_CHECK(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data, host_counts.data(),
                                                   host_starts.data(), type, cross_.get(), &request)),
                  &request);
  }
  // Hosts' blocks interleave: gather them host by host in `scratch_`.
  std::vector<int> packed(host_counts.size(), 0);
  std::exclusive_scan(host_counts.begin(), host_counts.end(), packed.begin(), 0);
  const size_t total = static_cast<size_t>(packed.back() + host_counts.back());
  if (scratch_.size() < total * element) scratch_.resize(total * element);
  // copy(true) packs this host's blocks, copy(false) unpacks the others'.
  auto copy = [&](bool pack) {
    std::vector<size_t> at(host_counts.size());
    for (size_t h = 0; h < at.size(); ++h) at[h] = static_cast<size_t>(packed[h]) * element;
    for (size_t r = 0; r < counts.size(); ++r) {
      const int h = layout_.host_of[r];
      const size_t bytes = static_cast<size_t>(counts[r]) * element;
      if (bytes == 0) continue;  // nothing to copy, and both buffers may be null (memcpy must not get null)
      char* in_place = data + static_cast<size_t>(offsets[r]) * element;
      if (pack && h == layout_.host) std::memcpy(scratch_.data() + at[h], in_place, bytes);
      if (!pack && h != layout_.host) std::memcpy(in_place, scratch_.data() + at[h], bytes);
      at[h] += bytes;
    }
  };
  copy(true);
  ACCORD_RETURN_IF_ERROR(
      Polled(ACCORD_MPI_CHECK(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, scratch_.data(), host_counts.data(),
                                              packed.data(), type, cross_.get(), &request)),
             &request));
  copy(false);
  return Status::OK();
}

Status HierarchicalBackend::BroadcastOtherHosts(char* data, const std::vector<int64_t>& counts,
                                                const std::vector<int64_t>& offsets, DataType dtype) {
  // The other hosts' blocks as runs of consecutive elements (neighbouring
  // ranks of one run merge).
  const MPI_Aint element = static_cast<MPI_Aint>(DataTypeSize(dtype));
  std::vector<int> lengths;
  std::vector<MPI_Aint> starts;
  for (size_t r = 0; r < counts.size(); ++r) {
    if (layout_.host_of[r] == layout_.host || counts[r] == 0) continue;
    const MPI_Aint start = static_cast<MPI_Aint>(offsets[r]) * element;
    if (!starts.empty() && starts.back() + lengths.back() * element == start) {
      lengths.back() += static_cast<int>(counts[r]);
    } else {
      starts.push_back(start);
      lengths.push_back(static_cast<int>(counts[r]));
    }
  }
  if (lengths.empty()) return Status::OK();  // the same on every rank of the host
  MPI_Datatype others;
  ACCORD_RETURN_IF_ERROR(ACCORD_MPI_CHECK(MPI_Type_create_hindexed(static_cast<int>(lengths.size()), lengths.data(),
                                                                   starts.data(), types_->Datatype(dtype), &others)));
  DatatypeGuard guard(others);
  ACCORD_RETURN_IF_ERROR(ACCORD_MPI_CHECK(MPI_Type_commit(&others)));
  MPI_Request request;
  return Polled(ACCORD_MPI_CHECK(MPI_Ibcast(data, 1, others, 0, layout_.local.get(), &request)), &request);
}

}  // namespace accord
