#include "timeline/timeline.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "common/logging.h"

namespace accord {

namespace {

// Events waiting for the writer; beyond this they are dropped and counted.
constexpr size_t kMaxQueued = 1 << 18;
// Fused tensor names listed in a COLLECTIVE event's args.
constexpr size_t kMaxListedNames = 32;

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

bool WriteAll(int fd, const std::string& data) {
  const char* p = data.data();
  size_t left = data.size();
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    left -= static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

std::string PadLinesToPages(const std::string& lines, int64_t offset) {
  std::string out;
  out.reserve(lines.size() + lines.size() / 16);
  size_t begin = 0;
  while (begin < lines.size()) {
    size_t end = lines.find('\n', begin);
    end = end == std::string::npos ? lines.size() : end + 1;
    const int64_t length = static_cast<int64_t>(end - begin);
    const int64_t at = offset + static_cast<int64_t>(out.size());
    const int64_t room = kTimelinePageBytes - at % kTimelinePageBytes;
    if (length > room && length <= kTimelinePageBytes) {
      out.append(static_cast<size_t>(room - 1), ' ');
      out += '\n';
    }
    out.append(lines, begin, end - begin);
    begin = end;
  }
  return out;
}

Status Timeline::Start(const std::string& path, bool mark_cycles, int64_t max_bytes) {
  if (path.empty()) return Status::InvalidArgument("the timeline needs a file path");
  std::lock_guard<std::mutex> control(control_mutex_);
  if (writer_.joinable()) {
    control_mutex_.unlock();
    Stop();
    control_mutex_.lock();
  }
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    return Status::InvalidArgument("cannot write the timeline to '" + path + "': " + std::strerror(errno));
  }
  fd_ = fd;
  path_ = path;
  max_bytes_ = max_bytes > 0 ? max_bytes : int64_t{1} << 40;
  tracks_.clear();
  metadata_.clear();
  file_bytes_ = 0;
  WriteLines("[\n");
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    stopping_ = false;
    queue_.clear();
    dropped_ = 0;
    announced_.clear();
    agreed_.clear();
    origin_ = Clock::now();
    mark_cycles_ = mark_cycles;
  }
  writer_ = std::thread([this] { WriterLoop(); });
  active_.store(true);
  return Status::OK();
}

void Timeline::Stop() {
  std::lock_guard<std::mutex> control(control_mutex_);
  if (!writer_.joinable()) return;
  active_.store(false);
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  writer_.join();
  // The last event has no trailing comma, so the array closes cleanly.
  WriteLines("{\"name\": \"TIMELINE_END\", \"ph\": \"i\", \"s\": \"g\", \"pid\": 0, \"tid\": 0, \"ts\": " +
             std::to_string(Micros(Clock::now())) + "}\n]\n");
  ::close(fd_);
  fd_ = -1;
}

int64_t Timeline::Micros(Clock::time_point t) const {
  return std::chrono::duration_cast<std::chrono::microseconds>(t - origin_).count();
}

void Timeline::Push(Event event) {
  if (queue_.size() >= kMaxQueued) {
    ++dropped_;
    return;
  }
  queue_.push_back(std::move(event));
}

void Timeline::RecordAnnounced(const std::vector<Request>& requests, Clock::time_point when) {
  if (!active() || requests.empty()) return;
  std::lock_guard<std::mutex> lock(state_mutex_);
  for (const auto& r : requests) announced_.emplace(r.name, when);
}

void Timeline::RecordAgreed(const std::vector<Response>& ready, Clock::time_point when) {
  if (!active() || ready.empty()) return;
  std::lock_guard<std::mutex> lock(state_mutex_);
  for (const auto& r : ready) {
    auto it = announced_.find(r.name);
    // A rank that had not announced the tensor (a joined rank) marks the
    // agreement only.
    const Clock::time_point start = it == announced_.end() ? when : it->second;
    if (it != announced_.end()) announced_.erase(it);
    std::string args = "{\"op\": " + JsonString(OpTypeName(r.type));
    if (!r.ok()) args += ", \"error\": " + JsonString(r.error_message);
    args += "}";
    Push(Event{r.name, "NEGOTIATE", 'X', Micros(start), Micros(when) - Micros(start), std::move(args)});
    // Only tensor operations reach RecordCollective (which forgets them).
    if (r.ok() && r.type <= OpType::kReducescatter) agreed_[r.name] = when;
  }
}

void Timeline::RecordCollective(const std::vector<const Response*>& members, uint64_t bytes, Clock::time_point start,
                                Clock::time_point packed, Clock::time_point exchanged, Clock::time_point end) {
  if (!active() || members.empty()) return;
  std::string names = "[";
  for (size_t i = 0; i < members.size() && i < kMaxListedNames; ++i) {
    if (i > 0) names += ", ";
    names += JsonString(members[i]->name);
  }
  if (members.size() > kMaxListedNames) names += ", \"...\"";
  names += "]";
  const std::string args = "{\"op\": " + JsonString(OpTypeName(members.front()->type)) +
                           ", \"tensors\": " + std::to_string(members.size()) +
                           ", \"bytes\": " + std::to_string(bytes) + ", \"fused\": " + names + "}";
  // Phases are marked in order within [start, end]; clamp anyway so that a
  // missing or odd mark never yields a negative duration.
  const bool split = packed != Clock::time_point{} && exchanged != Clock::time_point{};
  const int64_t t0 = Micros(start);
  const int64_t t3 = std::max(t0, Micros(end));
  const int64_t t1 = split ? std::min(std::max(t0, Micros(packed)), t3) : t0;
  const int64_t t2 = split ? std::min(std::max(t1, Micros(exchanged)), t3) : t3;
  std::lock_guard<std::mutex> lock(state_mutex_);
  for (const Response* r : members) {
    auto it = agreed_.find(r->name);
    if (it != agreed_.end()) {
      Push(Event{r->name, "QUEUE", 'X', Micros(it->second), t0 - Micros(it->second), ""});
      agreed_.erase(it);
    }
    if (split) Push(Event{r->name, "PACK", 'X', t0, t1 - t0, ""});
    Push(Event{r->name, "COLLECTIVE", 'X', t1, t2 - t1, args});
    if (split) Push(Event{r->name, "UNPACK", 'X', t2, t3 - t2, ""});
  }
}

void Timeline::RecordCycle(Clock::time_point when) {
  if (!active()) return;
  std::lock_guard<std::mutex> lock(state_mutex_);
  if (!mark_cycles_) return;
  Push(Event{"cycles", "CYCLE", 'i', Micros(when), 0, ""});
}

std::string Timeline::FormatEvent(const Event& event) {
  auto it = tracks_.find(event.track);
  if (it == tracks_.end()) {
    const int tid = static_cast<int>(tracks_.size()) + 1;
    it = tracks_.emplace(event.track, tid).first;
    const std::string meta = "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 0, \"tid\": " + std::to_string(tid) +
                             ", \"args\": {\"name\": " + JsonString(event.track) + "}},\n";
    metadata_ += meta;
    WriteLines(meta);
  }
  std::string line = "{\"name\": " + JsonString(event.name) + ", \"ph\": \"" + event.phase +
                     "\", \"pid\": 0, \"tid\": " + std::to_string(it->second) +
                     ", \"ts\": " + std::to_string(event.ts_us);
  if (event.phase == 'X') line += ", \"dur\": " + std::to_string(event.dur_us);
  if (event.phase == 'i') line += ", \"s\": \"t\"";
  if (!event.args.empty()) line += ", \"args\": " + event.args;
  line += "},\n";
  return line;
}

void Timeline::WriterLoop() {
  std::vector<Event> batch;
  while (true) {
    uint64_t dropped = 0;
    bool stopping;
    {
      std::unique_lock<std::mutex> lock(state_mutex_);
      wake_.wait_for(lock, std::chrono::milliseconds(100), [this] { return stopping_ || !queue_.empty(); });
      batch.swap(queue_);
      dropped = dropped_;
      dropped_ = 0;
      stopping = stopping_;
    }
    std::string lines;
    if (dropped > 0) {
      lines +=
          "{\"name\": \"TIMELINE_EVENTS_DROPPED\", \"ph\": \"i\", \"s\": \"g\", \"pid\": 0, \"tid\": 0, "
          "\"ts\": " +
          std::to_string(batch.empty() ? 0 : batch.front().ts_us) +
          ", \"args\": {\"events\": " + std::to_string(dropped) + ", \"reason\": \"queue full\"}},\n";
    }
    for (const Event& e : batch) lines += FormatEvent(e);
    batch.clear();
    if (!lines.empty()) WriteLines(lines);
    if (stopping) return;
  }
}

void Timeline::WriteLines(const std::string& lines) {
  if (fd_ < 0) return;
  const std::string padded = PadLinesToPages(lines, file_bytes_);
  if (!WriteAll(fd_, padded)) {
    ACCORD_LOG(kError) << "timeline: writing '" << path_ << "' failed (" << std::strerror(errno)
                       << "); the timeline stops here";
    ::close(fd_);
    fd_ = -1;
    return;
  }
  file_bytes_ += static_cast<int64_t>(padded.size());
  if (file_bytes_ > max_bytes_) Rotate();
}

void Timeline::Rotate() {
  // Keep the newest half: copy from the first line start after the middle.
  const std::string tmp = path_ + ".tmp";
  const int in = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  const int out = ::open(tmp.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (in < 0 || out < 0) {
    if (in >= 0) ::close(in);
    if (out >= 0) ::close(out);
    return;  // keep appending; retried on the next write
  }
  off_t offset = static_cast<off_t>(file_bytes_ - max_bytes_ / 2);
  char c;
  while (::pread(in, &c, 1, offset) == 1 && c != '\n') ++offset;
  ++offset;
  std::string head = "[\n" + metadata_ +
                     "{\"name\": \"TIMELINE_EVENTS_DROPPED\", \"ph\": \"i\", \"s\": \"g\", \"pid\": 0, \"tid\": 0, "
                     "\"ts\": 0, \"args\": {\"reason\": \"ACCORD_TIMELINE_MAX_MB reached: older events dropped\"}},\n";
  bool ok = WriteAll(out, head);
  int64_t size = static_cast<int64_t>(head.size());
  std::vector<char> buffer(1 << 20);
  while (ok) {
    const ssize_t n = ::pread(in, buffer.data(), buffer.size(), offset);
    if (n <= 0) break;
    ok = WriteAll(out, std::string(buffer.data(), static_cast<size_t>(n)));
    offset += n;
    size += n;
  }
  ::close(in);
  if (!ok || ::rename(tmp.c_str(), path_.c_str()) != 0) {
    ::close(out);
    ::unlink(tmp.c_str());
    return;
  }
  ::close(fd_);
  fd_ = out;
  ::lseek(fd_, 0, SEEK_END);
  file_bytes_ = size;
}

}  // namespace accord
