// RingAllreduce: an allreduce built from point-to-point messages, for ranks
// that talk over a network.
//
// Open MPI's TCP transport moves one large message between two hosts at
// about half the link's rate (measured on the test bed at 1 Gbit/s: one
// 16 MiB exchange 0.058 GB/s each way, the same bytes as 64 messages in
// flight 0.110 GB/s; docs/decisions.md, "Allreduce across hosts"). So the
// allreduces of a process set that spans hosts run as a ring in which every
// message is cut into chunks that are all in flight at once:
//   1. reduce-scatter: the buffer is cut into one segment per rank (each a
//      piece of every stripe of size x chunk: chunk k of every segment lies
//      in stripe k, so the chunks in flight lie together); in step
//      s (of size-1) each rank sends segment (rank - s) to its right-hand
//      neighbour and receives segment (rank - s - 1) from its left-hand one,
//      reducing each chunk into its buffer as it arrives (MPI_Reduce_local,
//      so every MpiTypes op works, float16 and bfloat16 included). After it
//      rank r holds the whole reduction of segment r + 1.
//   2. allgather: in step s each rank passes segment (rank + 1 - s) on to the
//      right, receiving segment (rank - s) in place.
// A rank sends its own segment's chunks a window ahead of the chunks it
// receives, not all at once (kRingWindowBytes).
// The buffer may be given as several parts, reduced as their concatenation
// in their own memory: a chunk that spans parts is sent and received through
// an MPI datatype over its pieces, so the messages are the same as for one
// buffer, and a rank with parts and a rank with one buffer may meet in one
// allreduce (a rank that has joined packs zeros into one buffer).
// Each segment is reduced in one place and then copied, so every rank ends
// with the same bits. Each rank sends and receives 2 (size-1)/size of the
// buffer, the least any allreduce can, and both directions of every link
// are busy at once.
#pragma once

#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <vector>

#include "accord/status.h"
#include "backends/backend.h"

namespace accord {

// Allreduces [data, data + count elements) in place over `comm`.
// `chunk_elements` (>= 1, <= INT_MAX) is the most elements per message;
// `window_chunks` (>= 1) the most chunks of its first step a rank sends
// ahead of those it has received; `scratch` holds one received segment
// (grown as needed). Every rank of `comm` must call it with the same count,
// type, op and chunk_elements (the window may differ).
Status RingAllreduce(MPI_Comm comm, void* data, int64_t count, MPI_Datatype type, MPI_Op op, size_t element,
                     int64_t chunk_elements, int window_chunks, std::vector<char>& scratch);
// The same over the concatenation of `parts` (every rank's parts may be cut
// differently; their totals are equal), calling `finish` (where not empty)
// on each chunk of the segment this rank reduces as soon as its reduction
// is complete, before the allgather sends it on (with one rank: on every
// part).
Status RingAllreduce(MPI_Comm comm, const std::vector<BufferPart>& parts, MPI_Datatype type, MPI_Op op, size_t element,
                     int64_t chunk_elements, int window_chunks, std::vector<char>& scratch,
                     const AllreduceFinish& finish = {});

// The ring's two halves on their own, with contiguous segments: segment i is
// range i of the buffer cut evenly into size (the first count % size ranges
// one element longer), each cut into the chunks. For an allreduce with
// another step between them (the hierarchical allreduce's cross-host step):
// after RingReduceScatter rank r holds the whole reduction of segment
// RingOwnedSegment(count, r, size) (the other segments hold partial sums);
// RingAllgather, starting from that, copies every rank's segment to every
// rank. Same arguments and rules as RingAllreduce.
struct RingSegment {
  int64_t first = 0;
  int64_t count = 0;
};
RingSegment RingOwnedSegment(int64_t count, int rank, int size);
Status RingReduceScatter(MPI_Comm comm, void* data, int64_t count, MPI_Datatype type, MPI_Op op, size_t element,
                         int64_t chunk_elements, int window_chunks, std::vector<char>& scratch);
Status RingAllgather(MPI_Comm comm, void* data, int64_t count, MPI_Datatype type, size_t element,
                     int64_t chunk_elements, int window_chunks);

// What MpiBackend uses across hosts: buffers of at least kRingMinBytes go
// round the ring in chunks of kRingChunkBytes; smaller ones, where latency
// rules, stay with MPI_Allreduce. 60 KiB keeps every chunk under Open MPI's
// TCP eager limit (64 KiB with its headers), so a chunk goes out at once,
// without a rendezvous; on the test bed at 1 Gbit/s a 16 MiB allreduce of
// two ranks took 145-150 ms in 32 KiB chunks, 166-175 ms in 64 KiB (over
// the limit) and 190 ms in 1 MiB ones; 8 x 4 MiB took 284-286 ms in 32 KiB
// and 60 KiB chunks alike, and at 10 Gbit/s 35.5-45.7 ms in 60 KiB against
// 45.7-50.2 ms in 32 KiB, fewer messages costing less CPU where the CPU is
// the limit (docs/decisions.md, "Allreduce across hosts").
inline constexpr int64_t kRingMinBytes = int64_t{1} << 20;
inline constexpr int64_t kRingChunkBytes = int64_t{60} << 10;
// A rank sends its own segment's chunks at most kRingWindowBytes ahead of
// the chunks it receives, so the chunks in flight stay together in memory
// and the reductions and sends of later steps find them in cache: at 10
// Gbit/s, where memory and CPU are the limit, 8 x 4 MiB fused took 30-31
// ms with a window of 256 KiB or 1 MiB, 34-36 ms with 4 MiB and 37-45 ms
// with none (all of the first step's chunks posted at once, the later
// steps' queued behind them); at 1 Gbit/s it made no difference (283-286
// ms) (docs/decisions.md, "Allreduce across hosts"). That is the window
// within a host and the most across hosts, where MpiBackend sends the bytes
// the link carries in 2 ms at the rate it has seen (backends/mpi/ring_pace.h).
inline constexpr int64_t kRingWindowBytes = int64_t{1} << 20;
// kRingWindowBytes in chunks of `chunk_bytes` (> 0), at least one.
constexpr int RingWindowChunks(int64_t chunk_bytes) {
  return static_cast<int>(kRingWindowBytes / chunk_bytes > 0 ? kRingWindowBytes / chunk_bytes : 1);
}
// How the ring waits for its messages: testing for kRingSpin (unless its
// last wait had to sleep), then sleeping between tests, up to
// kRingLongestSleep (ring_allreduce.cc, WaitPolitely).
// The hierarchical allreduce's host phases wait alike.
inline constexpr std::chrono::microseconds kRingSpin{50};
inline constexpr std::chrono::microseconds kRingLongestSleep{200};

}  // namespace accord
