#include "backends/mpi/ring_allreduce.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "backends/mpi/mpi_check.h"

namespace accord {

namespace {

struct Segment {
  int64_t first = 0;
  int64_t count = 0;
};

// Segment i of `count` elements cut into `size`: even, the first
// (count % size) one element longer.
Segment SegmentOf(int64_t count, int size, int i) {
  const int64_t base = count / size;
  const int64_t extra = count % size;
  return {i * base + std::min<int64_t>(i, extra), base + (i < extra ? 1 : 0)};
}

int Wrap(int i, int size) { return ((i % size) + size) % size; }

constexpr int64_t kMaxChunks = 16384;

// The parts seen as one buffer of their total count.
class Concatenation {
 public:
  Concatenation(const std::vector<BufferPart>& parts, size_t element) : parts_(parts), element_(element) {
    starts_.reserve(parts.size());
    for (const BufferPart& part : parts) {
      starts_.push_back(total_);
      total_ += part.count;
    }
  }

  int64_t total() const { return total_; }

  // Calls fn(address, elements, offset from `at`) for each piece of
  // [at, at + n), n > 0, in order. (Of parts that start at the same place,
  // all but the last are empty: the last one at or before `at` holds it.)
  template <typename Fn>
  void ForEachPiece(int64_t at, int64_t n, Fn&& fn) const {
    size_t i = static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), at) - starts_.begin()) - 1;
    for (int64_t done = 0; done < n; ++i) {
      const int64_t within = at + done - starts_[i];
      const int64_t take = std::min(parts_[i].count - within, n - done);
      if (take <= 0) continue;
      fn(static_cast<char*>(parts_[i].data) + within * static_cast<int64_t>(element_), take, done);
      done += take;
    }
  }

  // The address of [at, at + n) where it lies in one part, else nullptr.
  char* Contiguous(int64_t at, int64_t n) const {
    char* address = nullptr;
    int pieces = 0;
    ForEachPiece(at, n, [&](char* p, int64_t, int64_t) {
      if (pieces++ == 0) address = p;
    });
    return pieces == 1 ? address : nullptr;
  }

 private:
  const std::vector<BufferPart>& parts_;
  size_t element_;
  std::vector<int64_t> starts_;
  int64_t total_ = 0;
};

// Posts the send (to `peer`) or receive (from it) of elements [at, at + n)
// of the concatenation. A range that spans parts goes as one derived
// datatype over its pieces, so the message is the same as from one buffer;
// the datatype is freed at once (MPI keeps it until the message completes).
Status Post(bool send, const Concatenation& buffer, int64_t at, int n, MPI_Datatype type, int peer, int tag,
            MPI_Comm comm, MPI_Request* request) {
  if (char* p = buffer.Contiguous(at, n)) {
    return send ? ACCORD_MPI_CHECK(MPI_Isend(p, n, type, peer, tag, comm, request))
                : ACCORD_MPI_CHECK(MPI_Irecv(p, n, type, peer, tag, comm, request));
  }
  std::vector<int> lengths;
  std::vector<MPI_Aint> displacements;
  buffer.ForEachPiece(at, n, [&](char* p, int64_t k, int64_t) {
    MPI_Aint address = 0;
    MPI_Get_address(p, &address);
    lengths.push_back(static_cast<int>(k));
    displacements.push_back(address);
  });
  MPI_Datatype pieces = MPI_DATATYPE_NULL;
  ACCORD_RETURN_IF_ERROR(ACCORD_MPI_CHECK(MPI_Type_create_hindexed(
      static_cast<int>(lengths.size()), lengths.data(), displacements.data(), type, &pieces)));
  Status posted = ACCORD_MPI_CHECK(MPI_Type_commit(&pieces));
  if (posted.ok()) {
    posted = send ? ACCORD_MPI_CHECK(MPI_Isend(MPI_BOTTOM, 1, pieces, peer, tag, comm, request))
                  : ACCORD_MPI_CHECK(MPI_Irecv(MPI_BOTTOM, 1, pieces, peer, tag, comm, request));
  }
  MPI_Type_free(&pieces);
  return posted;
}

// Polls `requests` until some complete (MPI_Testsome; their indices go to
// `*completed`, so one wake-up handles every chunk that has arrived) or,
// with `all`, until every one has (MPI_Testall), spinning for the first
// kSpin and then sleeping between polls, from 10 us doubling up to 200 us.
// MPI_Waitany would spin for the whole transfer, taking a core from the
// training thread on a machine whose cores the ranks share; the network
// does not need the CPU meanwhile (the kernel's socket buffers hold
// milliseconds of data at these rates).
Status WaitPolitely(std::vector<MPI_Request>& requests, bool all, std::vector<int>* completed) {
  using Clock = std::chrono::steady_clock;
  constexpr auto kSpin = std::chrono::microseconds(50);
  constexpr auto kFirstSleep = std::chrono::microseconds(10);
  constexpr auto kLongestSleep = std::chrono::microseconds(200);
  const auto start = Clock::now();
  auto sleep = kFirstSleep;
  for (;;) {
    int flag = 0;
    if (all) {
      ACCORD_RETURN_IF_ERROR(ACCORD_MPI_CHECK(
          MPI_Testall(static_cast<int>(requests.size()), requests.data(), &flag, MPI_STATUSES_IGNORE)));
    } else {
      completed->resize(requests.size());
      int count = 0;
      ACCORD_RETURN_IF_ERROR(ACCORD_MPI_CHECK(MPI_Testsome(static_cast<int>(requests.size()), requests.data(), &count,
                                                           completed->data(), MPI_STATUSES_IGNORE)));
      flag = count > 0 && count != MPI_UNDEFINED;
      completed->resize(flag ? static_cast<size_t>(count) : 0);
    }
    if (flag) return Status::OK();
    if (Clock::now() - start < kSpin) continue;
    std::this_thread::sleep_for(sleep);
    sleep = std::min(sleep * 2, kLongestSleep);
  }
}

}  // namespace

Status RingAllreduce(MPI_Comm comm, void* data, int64_t count, MPI_Datatype type, MPI_Op op, size_t element,
                     int64_t chunk_elements, std::vector<char>& scratch) {
  return RingAllreduce(comm, {BufferPart{data, count}}, type, op, element, chunk_elements, scratch);
}

Status RingAllreduce(MPI_Comm comm, const std::vector<BufferPart>& parts, MPI_Datatype type, MPI_Op op,
                     size_t element, int64_t chunk_elements, std::vector<char>& scratch) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  const Concatenation buffer(parts, element);
  const int64_t count = buffer.total();
  if (size == 1 || count == 0) return Status::OK();
  const int right = Wrap(rank + 1, size);
  const int left = Wrap(rank - 1, size);
  const int64_t longest = SegmentOf(count, size, 0).count;
  // A chunk's tag is its index in its segment: at most kMaxChunks of them,
  // far below the smallest MPI_TAG_UB an implementation may have (32767).
  chunk_elements = std::max({chunk_elements, int64_t{1}, (longest + kMaxChunks - 1) / kMaxChunks});
  // Two segments: the reduce-scatter's step t receives into half t % 2 while
  // step t - 1's chunks may still be reduced from the other.
  const size_t half = static_cast<size_t>(longest) * element;
  if (scratch.size() < 2 * half) scratch.resize(2 * half);

  // Step t < size - 1 (reduce-scatter) sends segment rank - t and receives
  // and reduces segment rank - t - 1; step t >= size - 1 (allgather) sends
  // segment rank + 1 - t' and receives segment rank - t' in place (t' = t -
  // size + 1). What step t receives is what step t + 1 sends, so each
  // received chunk is sent on at once: the chunks of all steps flow round
  // the ring without waiting for whole steps.
  const int steps = 2 * (size - 1);
  auto sent_at = [&](int t) { return t < size - 1 ? Wrap(rank - t, size) : Wrap(rank + 1 - (t - size + 1), size); };
  auto received_at = [&](int t) { return t < size - 1 ? Wrap(rank - t - 1, size) : Wrap(rank - (t - size + 1), size); };
  auto chunk = [&](const Segment& seg, int k) {
    const int64_t at = static_cast<int64_t>(k) * chunk_elements;
    return std::pair<int64_t, int>(at, static_cast<int>(std::min(chunk_elements, seg.count - at)));
  };
  auto chunks = [&](const Segment& seg) { return static_cast<int>((seg.count + chunk_elements - 1) / chunk_elements); };

  std::vector<MPI_Request> receives[2], sends, next_sends;
  auto post_send = [&](std::vector<MPI_Request>& into, const Segment& seg, int k) -> Status {
    const auto [at, n] = chunk(seg, k);
    MPI_Request request;
    ACCORD_RETURN_IF_ERROR(Post(true, buffer, seg.first + at, n, type, right, k, comm, &request));
    into.push_back(request);
    return Status::OK();
  };
  // Receive k of step t (into the half of scratch for a reduce-scatter
  // step, in place for an allgather step).
  auto post_receive = [&](int t, const Segment& seg, int k) -> Status {
    const auto [at, n] = chunk(seg, k);
    MPI_Request request;
    if (t < size - 1) {
      char* where = scratch.data() + (t % 2) * half + at * element;
      ACCORD_RETURN_IF_ERROR(ACCORD_MPI_CHECK(MPI_Irecv(where, n, type, left, k, comm, &request)));
    } else {
      ACCORD_RETURN_IF_ERROR(Post(false, buffer, seg.first + at, n, type, left, k, comm, &request));
    }
    receives[t % 2][static_cast<size_t>(k)] = request;
    return Status::OK();
  };
  // Receives and sends are posted alternately, chunk by chunk: posted as all
  // receives and then all sends, Open MPI's TCP transport ran an exchange
  // at about half the rate (docs/decisions.md, "Allreduce across hosts").
  auto start_step = [&](int t, const Segment& in) {
    receives[t % 2].assign(static_cast<size_t>(chunks(in)), MPI_REQUEST_NULL);
  };
  {
    const Segment in = SegmentOf(count, size, received_at(0));
    const Segment out = SegmentOf(count, size, sent_at(0));
    start_step(0, in);
    for (int k = 0; k < std::max(chunks(in), chunks(out)); ++k) {
      if (k < chunks(in)) ACCORD_RETURN_IF_ERROR(post_receive(0, in, k));
      if (k < chunks(out)) ACCORD_RETURN_IF_ERROR(post_send(sends, out, k));
    }
  }
  for (int t = 0; t < steps; ++t) {
    const Segment in = SegmentOf(count, size, received_at(t));
    const bool more = t + 1 < steps;
    const Segment next_in = more ? SegmentOf(count, size, received_at(t + 1)) : Segment{};
    if (more) start_step(t + 1, next_in);
    std::vector<MPI_Request>& waiting = receives[t % 2];
    next_sends.clear();
    // Each chunk received is reduced (reduce-scatter), then sent on as step
    // t + 1's chunk, its receive posted just before.
    auto on_received = [&](int k) -> Status {
      if (t < size - 1) {
        const auto [at, n] = chunk(in, k);
        const char* received = scratch.data() + (t % 2) * half + at * element;
        Status reduced = Status::OK();
        buffer.ForEachPiece(in.first + at, n, [&](char* into, int64_t pieces, int64_t offset) {
          if (reduced.ok()) {
            reduced = ACCORD_MPI_CHECK(MPI_Reduce_local(received + offset * static_cast<int64_t>(element), into,
                                                        static_cast<int>(pieces), type, op));
          }
        });
        ACCORD_RETURN_IF_ERROR(reduced);
      }
      if (!more) return Status::OK();
      if (k < chunks(next_in)) ACCORD_RETURN_IF_ERROR(post_receive(t + 1, next_in, k));
      return post_send(next_sends, in, k);
    };
    std::vector<int> completed;
    for (size_t done = 0; done < waiting.size(); done += completed.size()) {
      ACCORD_RETURN_IF_ERROR(WaitPolitely(waiting, false, &completed));
      for (int k : completed) ACCORD_RETURN_IF_ERROR(on_received(k));
    }
    // The next segment may have one chunk more than this one.
    for (int k = chunks(in); more && k < chunks(next_in); ++k) ACCORD_RETURN_IF_ERROR(post_receive(t + 1, next_in, k));
    ACCORD_RETURN_IF_ERROR(WaitPolitely(sends, true, nullptr));
    std::swap(sends, next_sends);
  }
  return Status::OK();
}

}  // namespace accord
