// Little byte writer/reader for the negotiation messages. The format is
// host-endian and packed: every rank of a job runs the same build.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

namespace accord {

class WireWriter {
 public:
  template <typename T>
  void Put(T value) {
    static_assert(std::is_trivially_copyable_v<T>);
    out_.append(reinterpret_cast<const char*>(&value), sizeof(T));
  }
  void PutString(const std::string& s) {
    Put<uint32_t>(static_cast<uint32_t>(s.size()));
    out_.append(s);
  }
  template <typename T>
  void PutVector(const std::vector<T>& v) {
    Put<uint32_t>(static_cast<uint32_t>(v.size()));
    if (!v.empty()) out_.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
  }
  // Field(): the same call reads or writes (see WireReader), so one
  // function can list a message's fields for both directions.
  template <typename T>
  void Field(const T& value) {
    Put(value);
  }
  void Field(const std::string& s) { PutString(s); }
  template <typename T>
  void Field(const std::vector<T>& v) {
    PutVector(v);
  }
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

// Reads what WireWriter wrote. A short or corrupt buffer sets failed() and
// yields zeros instead of reading out of bounds.
class WireReader {
 public:
  explicit WireReader(const std::string& in) : in_(in) {}
  template <typename T>
  T Get() {
    T value{};
    if (!Need(sizeof(T))) return value;
    std::memcpy(&value, in_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return value;
  }
  std::string GetString() {
    const uint32_t n = Get<uint32_t>();
    if (!Need(n)) return {};
    std::string s = in_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  template <typename T>
  std::vector<T> GetVector() {
    const uint32_t n = Get<uint32_t>();
    if (!Need(static_cast<size_t>(n) * sizeof(T))) return {};
    std::vector<T> v(n);
    if (n) std::memcpy(v.data(), in_.data() + pos_, n * sizeof(T));
    pos_ += n * sizeof(T);
    return v;
  }
  template <typename T>
  void Field(T& value) {
    value = Get<T>();
  }
  void Field(std::string& s) { s = GetString(); }
  template <typename T>
  void Field(std::vector<T>& v) {
    v = GetVector<T>();
  }
  bool failed() const { return failed_; }
  bool done() const { return pos_ == in_.size(); }
  // Bytes not read yet: a bound on how many entries a count may announce.
  size_t remaining() const { return in_.size() - pos_; }

 private:
  bool Need(size_t n) {
    if (failed_ || in_.size() - pos_ < n) {
      failed_ = true;
      return false;
    }
    return true;
  }
  const std::string& in_;
  size_t pos_ = 0;
  bool failed_ = false;
};

}  // namespace accord
