#include "backends/mpi/ring_allreduce.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <thread>

#include "backends/mpi/mpi_check.h"

namespace accord {

namespace {

struct Range {
  int64_t first = 0;
  int64_t count = 0;
};

// Range i of `count` elements cut into `size`: even, the first
// (count % size) one element longer.
Range EvenCut(int64_t count, int64_t size, int64_t i) {
  const int64_t base = count / size;
  const int64_t extra = count % size;
  return {i * base + std::min<int64_t>(i, extra), base + (i < extra ? 1 : 0)};
}

// Where the chunks of the ring lie: chunk k of every segment, and every
// segment has the same number of chunks, of lengths within one element of
// each other.
//  - Striped (RingAllreduce): the buffer is cut evenly into stripes of at
//    most `size` x chunk_elements, and each stripe evenly into one chunk per
//    segment: chunk k of segment i is piece i of stripe k. So chunk k of
//    every step lies in one stripe: with the window (kRingWindowBytes) the
//    chunks in flight lie together in memory, however large the buffer.
//  - Contiguous (RingReduceScatter, RingAllgather): segment i is range i of
//    the buffer cut evenly into `size`, and each segment is cut evenly into
//    the chunks, so a rank's segment is one range of the buffer.
class Layout {
 public:
  Layout(bool striped, int64_t count, int size, int64_t chunk_elements, int64_t max_chunks)
      : striped_(striped), count_(count), size_(size) {
    const int64_t chunk = std::max<int64_t>(1, chunk_elements);
    const int64_t longest_segment = (count + size - 1) / size;
    const int64_t over = striped ? count : longest_segment;
    const int64_t per_chunk = striped ? chunk * size : chunk;
    chunks_ = std::clamp<int64_t>((over + per_chunk - 1) / per_chunk, 1, max_chunks);
    longest_ =
        striped ? (EvenCut(count, chunks_, 0).count + size - 1) / size : (longest_segment + chunks_ - 1) / chunks_;
  }

  int chunks() const { return static_cast<int>(chunks_); }
  int64_t longest_chunk() const { return longest_; }
  Range Segment(int segment) const { return EvenCut(count_, size_, segment); }
  Range Chunk(int segment, int k) const {
    const Range outer = striped_ ? EvenCut(count_, chunks_, k) : Segment(segment);
    const Range piece = striped_ ? EvenCut(outer.count, size_, segment) : EvenCut(outer.count, chunks_, k);
    return {outer.first + piece.first, piece.count};
  }

 private:
  bool striped_;
  int64_t count_;
  int size_;
  int64_t chunks_ = 1;
  int64_t longest_ = 0;
};

int Wrap(int i, int size) { return ((i % size) + size) % size; }

// A message's tag is 2 x its chunk's index + the parity of its step (see
// RingAllreduce): at most 2 x kMaxChunks tags, within the smallest
// MPI_TAG_UB an implementation may have (32767).
constexpr int64_t kMaxChunks = 16383;

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
  if (n == 0) {  // a stripe of fewer elements than ranks
    return send ? ACCORD_MPI_CHECK(MPI_Isend(MPI_BOTTOM, 0, type, peer, tag, comm, request))
                : ACCORD_MPI_CHECK(MPI_Irecv(MPI_BOTTOM, 0, type, peer, tag, comm, request));
  }
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
  ACCORD_RETURN_IF_ERROR(ACCORD_MPI_CHECK(
      MPI_Type_create_hindexed(static_cast<int>(lengths.size()), lengths.data(), displacements.data(), type, &pieces)));
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
// kRingSpin and then sleeping between polls, from 10 us doubling up to
// kRingLongestSleep.
// MPI_Waitany would spin for the whole transfer, taking a core from the
// training thread on a machine whose cores the ranks share; the network
// does not need the CPU meanwhile (the kernel's socket buffers hold
// milliseconds of data at these rates).
// `*spin_pays` carries over from one wait of a ring to the next: a wait
// that had to sleep clears it, and the next one sleeps after its first test
// instead of spinning; a wait done within its first test or its spin sets
// it again. Where messages come far apart (a slow link) spinning only
// burns the core: at 1 Gbit/s, 60 KiB every half millisecond, the spin
// cost W4 15 ms of CPU a step (116-120 ms a step instead of 131-136,
// MPI_Testsome polling every socket per test), for the same step time; at
// 10 Gbit/s, where the next chunk is usually there within the spin, the
// two were level (docs/decisions.md, "Allreduce across hosts").
Status WaitPolitely(std::vector<MPI_Request>& requests, bool all, std::vector<int>* completed, bool* spin_pays) {
  using Clock = std::chrono::steady_clock;
  constexpr auto kFirstSleep = std::chrono::microseconds(10);
  const auto start = Clock::now();
  const auto spin = *spin_pays ? kRingSpin : std::chrono::microseconds(0);
  auto sleep = kFirstSleep;
  *spin_pays = true;
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
    if (Clock::now() - start < spin) continue;
    *spin_pays = false;
    std::this_thread::sleep_for(sleep);
    sleep = std::min(sleep * 2, kRingLongestSleep);
  }
}

// Every step of the ring, for RunRing's `end`.
constexpr int kAllSteps = std::numeric_limits<int>::max();

// Runs steps [first, end) of the ring described at RingAllreduce (of
// 2 (size - 1)) over the concatenation of `parts`, with the given layout,
// calling `finish` (where not empty) on each chunk of the last
// reduce-scatter step once it is reduced.
Status RunRing(MPI_Comm comm, const std::vector<BufferPart>& parts, MPI_Datatype type, MPI_Op op, size_t element,
               int64_t chunk_elements, int window_chunks, std::vector<char>& scratch, bool striped, int first, int end,
               const AllreduceFinish& finish) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  const Concatenation buffer(parts, element);
  const int64_t count = buffer.total();
  if (size == 1 || count == 0) {
    if (finish && first == 0) {
      for (const BufferPart& part : parts) finish(part.data, part.count);
    }
    return Status::OK();
  }
  const int right = Wrap(rank + 1, size);
  const int left = Wrap(rank - 1, size);
  const Layout layout(striped, count, size, chunk_elements, kMaxChunks);
  const int chunks = layout.chunks();
  // Two segments: the reduce-scatter's step t receives into half t % 2 while
  // step t - 1's chunks may still be reduced from the other; chunk k of a
  // segment at k x the longest chunk.
  const int64_t slot = layout.longest_chunk() * static_cast<int64_t>(element);
  const size_t half = static_cast<size_t>(slot) * static_cast<size_t>(chunks);
  if (first < size - 1 && scratch.size() < 2 * half) scratch.resize(2 * half);

  // Step t < size - 1 (reduce-scatter) sends segment rank - t and receives
  // and reduces segment rank - t - 1; step t >= size - 1 (allgather) sends
  // segment rank + 1 - t' and receives segment rank - t' in place (t' = t -
  // size + 1). What step t receives is what step t + 1 sends, so each
  // received chunk is sent on at once: the chunks of all steps flow round
  // the ring without waiting for whole steps.
  const int steps = std::min(end, 2 * (size - 1));
  auto sent_at = [&](int t) { return t < size - 1 ? Wrap(rank - t, size) : Wrap(rank + 1 - (t - size + 1), size); };
  auto received_at = [&](int t) { return t < size - 1 ? Wrap(rank - t - 1, size) : Wrap(rank - (t - size + 1), size); };
  auto scratch_of = [&](int t, int k) { return scratch.data() + (t % 2) * half + static_cast<size_t>(k) * slot; };

  std::vector<MPI_Request> receives[2], sends, next_sends;
  bool spin_pays = true;  // WaitPolitely
  // Messages from one rank to the next are matched in the order they were
  // posted for each tag, and a rank may post step t + 1's send of chunk k
  // before step t's (the window below lets a rank send the chunks of its
  // own segment as late as it receives chunk k - window of step 0, and
  // receives may complete out of order). Steps t and t + 2 cannot be
  // confused: a rank posts all its sends of step t before any of step t + 2
  // (those go as step t + 1's chunks arrive, which it waits for only after
  // every chunk of step t has arrived). So the tag of chunk k in step t is
  // 2 k + t % 2.
  auto tag = [](int t, int k) { return 2 * k + t % 2; };
  auto post_send = [&](std::vector<MPI_Request>& into, int t, int k) -> Status {
    const Range c = layout.Chunk(sent_at(t), k);
    MPI_Request request;
    ACCORD_RETURN_IF_ERROR(
        Post(true, buffer, c.first, static_cast<int>(c.count), type, right, tag(t, k), comm, &request));
    into.push_back(request);
    return Status::OK();
  };
  // Receive k of step t (into the half of scratch for a reduce-scatter
  // step, in place for an allgather step).
  auto post_receive = [&](int t, int k) -> Status {
    const Range c = layout.Chunk(received_at(t), k);
    MPI_Request request;
    if (t < size - 1) {
      ACCORD_RETURN_IF_ERROR(ACCORD_MPI_CHECK(
          MPI_Irecv(scratch_of(t, k), static_cast<int>(c.count), type, left, tag(t, k), comm, &request)));
    } else {
      ACCORD_RETURN_IF_ERROR(
          Post(false, buffer, c.first, static_cast<int>(c.count), type, left, tag(t, k), comm, &request));
    }
    receives[t % 2][static_cast<size_t>(k)] = request;
    return Status::OK();
  };
  // Receives and sends are posted alternately, chunk by chunk: posted as all
  // receives and then all sends, Open MPI's TCP transport ran an exchange
  // at about half the rate (docs/decisions.md, "Allreduce across hosts").
  auto start_step = [&](int t) { receives[t % 2].assign(static_cast<size_t>(chunks), MPI_REQUEST_NULL); };
  const int window = std::clamp(window_chunks, 1, chunks);
  if (first >= steps) return Status::OK();
  start_step(first);
  for (int k = 0; k < chunks; ++k) {
    ACCORD_RETURN_IF_ERROR(post_receive(first, k));
    if (k < window) ACCORD_RETURN_IF_ERROR(post_send(sends, first, k));
  }
  for (int t = first; t < steps; ++t) {
    const int in = received_at(t);
    const bool more = t + 1 < steps;
    if (more) start_step(t + 1);
    std::vector<MPI_Request>& waiting = receives[t % 2];
    next_sends.clear();
    // Each chunk received is reduced (reduce-scatter), then sent on as step
    // t + 1's chunk, its receive posted just before.
    auto on_received = [&](int k) -> Status {
      if (t == first && k + window < chunks) ACCORD_RETURN_IF_ERROR(post_send(sends, first, k + window));
      if (t < size - 1) {
        const Range c = layout.Chunk(in, k);
        const char* received = scratch_of(t, k);
        Status reduced = Status::OK();
        buffer.ForEachPiece(c.first, c.count, [&](char* into, int64_t pieces, int64_t offset) {
          if (reduced.ok()) {
            reduced = ACCORD_MPI_CHECK(MPI_Reduce_local(received + offset * static_cast<int64_t>(element), into,
                                                        static_cast<int>(pieces), type, op));
          }
        });
        ACCORD_RETURN_IF_ERROR(reduced);
        // The chunk's reduction is complete in the last reduce-scatter
        // step: finished here, it goes on to the allgather as it is.
        if (finish && t == size - 2) {
          buffer.ForEachPiece(c.first, c.count, [&](char* p, int64_t pieces, int64_t) { finish(p, pieces); });
        }
      }
      if (!more) return Status::OK();
      ACCORD_RETURN_IF_ERROR(post_receive(t + 1, k));
      return post_send(next_sends, t + 1, k);
    };
    std::vector<int> completed;
    for (size_t done = 0; done < waiting.size(); done += completed.size()) {
      ACCORD_RETURN_IF_ERROR(WaitPolitely(waiting, false, &completed, &spin_pays));
      for (int k : completed) ACCORD_RETURN_IF_ERROR(on_received(k));
    }
    ACCORD_RETURN_IF_ERROR(WaitPolitely(sends, true, nullptr, &spin_pays));
    std::swap(sends, next_sends);
  }
  return Status::OK();
}

}  // namespace

Status RingAllreduce(MPI_Comm comm, void* data, int64_t count, MPI_Datatype type, MPI_Op op, size_t element,
                     int64_t chunk_elements, int window_chunks, std::vector<char>& scratch) {
  return RingAllreduce(comm, {BufferPart{data, count}}, type, op, element, chunk_elements, window_chunks, scratch);
}

Status RingAllreduce(MPI_Comm comm, const std::vector<BufferPart>& parts, MPI_Datatype type, MPI_Op op, size_t element,
                     int64_t chunk_elements, int window_chunks, std::vector<char>& scratch,
                     const AllreduceFinish& finish) {
  return RunRing(comm, parts, type, op, element, chunk_elements, window_chunks, scratch, true, 0, kAllSteps, finish);
}

Status RingReduceScatter(MPI_Comm comm, void* data, int64_t count, MPI_Datatype type, MPI_Op op, size_t element,
                         int64_t chunk_elements, int window_chunks, std::vector<char>& scratch) {
  int size = 1;
  MPI_Comm_size(comm, &size);
  return RunRing(comm, {BufferPart{data, count}}, type, op, element, chunk_elements, window_chunks, scratch, false, 0,
                 size - 1, {});
}

Status RingAllgather(MPI_Comm comm, void* data, int64_t count, MPI_Datatype type, size_t element,
                     int64_t chunk_elements, int window_chunks) {
  int size = 1;
  MPI_Comm_size(comm, &size);
  std::vector<char> unused;  // the allgather's steps receive in place
  return RunRing(comm, {BufferPart{data, count}}, type, MPI_OP_NULL, element, chunk_elements, window_chunks, unused,
                 false, size - 1, kAllSteps, {});
}

RingSegment RingOwnedSegment(int64_t count, int rank, int size) {
  const Range owned = EvenCut(count, size, (rank + 1) % size);
  return {owned.first, owned.count};
}

}  // namespace accord
