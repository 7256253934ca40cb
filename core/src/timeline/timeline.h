// Timeline: a Chrome trace-event file of what the coordinator did, for
// Perfetto (ui.perfetto.dev) and chrome://tracing. See docs/troubleshooting.md,
// "Timeline".
//
// One track per tensor name; on it, for each operation, complete ("X")
// events for its phases: NEGOTIATE (from the round that announced it to the
// round that agreed it), QUEUE (agreed, waiting for earlier batches of the
// same round), then for a fused batch of several tensors PACK (copying the
// inputs into the fusion buffer), COLLECTIVE (the backend call) and UNPACK
// (copying the results out), or for a batch of one tensor COLLECTIVE alone
// (the whole operation). A fused batch staged in windows
// (ACCORD_STAGING_WINDOW_BYTES: allreduce, broadcast, allgather) shows PACK
// for its first window, COLLECTIVE up to the end of its last window's call,
// UNPACK for the last window. COLLECTIVE carries the batch's tensor names and
// bytes as args.
// With mark_cycles, a "CYCLE" instant event on the "cycles" track for every
// coordinator iteration that executed something.
//
// The file is the JSON Array Format: "[", then one event per line, each
// followed by a comma; Stop() ends it with a last event and "]". A file cut
// short (the process was killed) lacks only the closing bracket, which
// Chrome and Perfetto accept. A write(2) that a SIGKILL interrupts ends at a
// page boundary (Linux copies a write into a file a page at a time and stops
// between pages on a fatal signal), so lines are padded with whitespace to
// never straddle one (PadLinesToPages): a killed process leaves no partial
// line, except for a line longer than a page (a tensor name of kilobytes).
//
// The coordinator thread hands events over through a bounded in-memory
// queue (events beyond it are dropped and counted); a writer thread formats
// and writes them, so the coordinator never waits for the disk. When the
// file grows past max_bytes, the writer rewrites it (into a temporary file
// renamed over it, so the file on disk stays valid) keeping about the newest
// half of the events, after a "TIMELINE_EVENTS_DROPPED" marker.
//
// One per process, kept by the public API (accord.cc) and handed to each
// runtime it starts: a timeline may outlive the runtime that began it.
//
// Threads: Start/Stop/active from any thread (serialised by a mutex); the
// Record* calls from the coordinator thread only, and only cost an atomic
// load while no timeline is active.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "accord/status.h"
#include "negotiation/message.h"

namespace accord {

// The granule a write(2) into a file may be cut short at: the page size of
// every Linux machine accord runs on, and a divisor of larger page sizes.
constexpr int64_t kTimelinePageBytes = 4096;

// `lines` (whole lines, each ending in '\n'), to be written at file offset
// `offset`, with a whitespace line inserted before every line that would
// otherwise straddle a page boundary. Lines longer than a page are left as
// they are.
std::string PadLinesToPages(const std::string& lines, int64_t offset);

class Timeline {
 public:
  using Clock = std::chrono::steady_clock;

  Timeline() = default;
  ~Timeline() { Stop(); }
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;

  // Opens (truncates) `path` and starts writing. A running timeline is
  // stopped first. Fails if the file cannot be created.
  Status Start(const std::string& path, bool mark_cycles, int64_t max_bytes);
  // Writes what is queued, closes the array and the file. No-op if stopped.
  void Stop();
  bool active() const { return active_.load(std::memory_order_relaxed); }

  // Coordinator thread. Tensors this rank handed to negotiation at `when`.
  void RecordAnnounced(const std::vector<Request>& requests, Clock::time_point when);
  // A round agreed `ready` at `when` (NEGOTIATE ends, QUEUE starts).
  void RecordAgreed(const std::vector<Response>& ready, Clock::time_point when);
  // One batch of tensors ran from `start` to `end`, `bytes` in all. If the
  // ops marked `packed` and `exchanged` (a fused batch; otherwise they are
  // the epoch), the batch is split into PACK, COLLECTIVE and UNPACK there.
  void RecordCollective(const std::vector<const Response*>& members, uint64_t bytes, Clock::time_point start,
                        Clock::time_point packed, Clock::time_point exchanged, Clock::time_point end);
  // One coordinator iteration that executed something (if mark_cycles).
  void RecordCycle(Clock::time_point when);

 private:
  struct Event {
    std::string track;
    std::string name;
    char phase;  // 'X' complete, 'i' instant
    int64_t ts_us;
    int64_t dur_us;
    std::string args;  // a JSON object, or empty
  };

  void Push(Event event);  // state_mutex_ held
  int64_t Micros(Clock::time_point t) const;
  void WriterLoop();
  // Writer thread: appends `lines` to the file, rotating it when too large.
  void WriteLines(const std::string& lines);
  void Rotate();
  std::string FormatEvent(const Event& event);

  std::mutex control_mutex_;  // serialises Start/Stop
  std::atomic<bool> active_{false};

  std::mutex state_mutex_;  // everything below up to the writer's own state
  bool mark_cycles_ = false;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::vector<Event> queue_;
  uint64_t dropped_ = 0;  // events refused by the full queue, not yet reported
  Clock::time_point origin_;
  // Per tensor name: when it was announced, then when it was agreed.
  std::unordered_map<std::string, Clock::time_point> announced_;
  std::unordered_map<std::string, Clock::time_point> agreed_;

  // Writer thread only (and Start/Stop while it is not running).
  std::thread writer_;
  std::string path_;
  int fd_ = -1;
  int64_t max_bytes_ = 0;
  int64_t file_bytes_ = 0;
  std::map<std::string, int> tracks_;  // track name -> tid
  std::string metadata_;               // the track-name lines, rewritten on rotation
};

}  // namespace accord
