// The check that every rank holds the same tensors before a broadcast (see
// tensor_agreement.h for the protocol).
#include "tensor_agreement.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <utility>

#include "accord/torch/basics.h"

namespace accord {
namespace torch {
namespace internal {

namespace {

// How many differing names the message spells out; the rest are counted.
constexpr size_t kNamedInError = 3;

// The dtype as torch spells it in Python (str(torch.float32) without
// "torch."), so that the C++ and the Python messages read alike.
std::string DtypeName(c10::ScalarType type) {
  switch (type) {
    case at::kFloat: return "float32";
    case at::kDouble: return "float64";
    case at::kHalf: return "float16";
    case at::kBFloat16: return "bfloat16";
    case at::kByte: return "uint8";
    case at::kChar: return "int8";
    case at::kShort: return "int16";
    case at::kInt: return "int32";
    case at::kLong: return "int64";
    case at::kBool: return "bool";
    case at::kComplexHalf: return "complex32";
    case at::kComplexFloat: return "complex64";
    case at::kComplexDouble: return "complex128";
    default: return c10::toString(type);
  }
}

// One entry as "name\0dtype\0d0,d1\n". The name comes first and ends at the
// NUL, so a name may hold any other character, '\n' included.
void Serialize(const Described& d, std::string* out) {
  *out += d.name;
  *out += '\0';
  *out += d.dtype;
  *out += '\0';
  for (size_t i = 0; i < d.shape.size(); ++i) *out += (i ? "," : "") + std::to_string(d.shape[i]);
  *out += '\n';
}

// The inverse of Serialize over a whole list. Never reads past the end: a
// malformed list (which no rank sends) yields what could be read.
std::vector<Described> Parse(const std::string& bytes) {
  std::vector<Described> list;
  size_t at = 0;
  auto field = [&](char end) {
    const size_t stop = std::min(bytes.find(end, at), bytes.size());
    std::string text = bytes.substr(at, stop - at);
    at = stop + 1;
    return text;
  };
  while (at < bytes.size()) {
    Described d;
    d.name = field('\0');
    d.dtype = field('\0');
    const std::string dims = field('\n');
    for (size_t start = 0; start < dims.size();) {
      const size_t comma = std::min(dims.find(',', start), dims.size());
      d.shape.push_back(std::strtoll(dims.c_str() + start, nullptr, 10));
      start = comma + 1;
    }
    list.push_back(std::move(d));
  }
  return list;
}

uint64_t Fnv1a64(const std::string& bytes) {
  uint64_t hash = 14695981039346656037ull;
  for (unsigned char c : bytes) {
    hash ^= c;
    hash *= 1099511628211ull;
  }
  return hash;
}

// Every rank's `count` elements of `dtype` at `data`, concatenated in the
// set's rank order. Through the core, so that the check needs no ATen ops.
std::string Allgather(const void* data, int64_t count, DataType dtype, const std::string& name,
                      ProcessSetId process_set) {
  TensorView input;
  input.data = const_cast<void*>(data);  // only read
  input.dtype = dtype;
  input.shape = {count};
  CollectiveOptions options;
  options.name = name;
  options.process_set = process_set;
  Result<Handle> handle = accord::Allgather(input, nullptr, options);  // output on the heap, held by the handle
  if (!handle.ok()) throw Error(handle.status());
  check(handle->Wait());
  const TensorView output = handle->outputs().at(0);
  return std::string(static_cast<const char*>(output.data), output.size_bytes());
}

std::string RanksText(const std::vector<int>& ranks) {
  std::string text = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) text += (i ? ", " : "") + std::to_string(ranks[i]);
  return text;
}

// One differing name: who lacks it, and who holds which dtype and shape.
// `versions`: each version ("float32 [10, 20]", or none where missing) with
// its ranks, in the order of their lowest rank.
std::string Difference(const std::string& name,
                       const std::vector<std::pair<std::optional<std::string>, std::vector<int>>>& versions) {
  std::vector<std::pair<std::string, std::vector<int>>> held;
  std::vector<int> missing;
  for (const auto& [version, ranks] : versions) {
    if (version)
      held.emplace_back(*version, ranks);
    else
      missing = ranks;
  }
  if (!missing.empty() && held.size() == 1) {
    return "'" + name + "' is missing on " + RanksText(missing) + " (present on " + RanksText(held[0].second) + " as " +
           held[0].first + ")";
  }
  std::string text = "'" + name + "' is ";
  for (size_t i = 0; i < held.size(); ++i) {
    text += (i ? " and " : "") + held[i].first + " on " + RanksText(held[i].second);
  }
  return missing.empty() ? text : text + ", missing on " + RanksText(missing);
}

}  // namespace

Described Describe(std::string name, const at::Tensor& tensor) {
  Described d;
  d.name = std::move(name);
  if (!tensor.defined()) {
    d.dtype = "undefined";
    return d;
  }
  d.dtype = DtypeName(tensor.scalar_type());
  d.shape.assign(tensor.sizes().begin(), tensor.sizes().end());
  return d;
}

std::string ExplainDifferences(const std::vector<std::vector<Described>>& lists, const std::vector<int>& ranks) {
  // Each rank's version of each name; the names in the order of first sight.
  std::vector<std::string> order;
  std::map<std::string, std::vector<std::optional<std::string>>> held;
  for (size_t r = 0; r < lists.size(); ++r) {
    for (const Described& d : lists[r]) {
      auto [it, added] = held.try_emplace(d.name, lists.size());
      if (added) order.push_back(d.name);
      it->second[r] = d.dtype + " " + ShapeToString(d.shape);
    }
  }
  std::vector<std::string> differences;
  for (const std::string& name : order) {
    std::vector<std::pair<std::optional<std::string>, std::vector<int>>> versions;
    for (size_t r = 0; r < lists.size(); ++r) {
      const std::optional<std::string>& version = held[name][r];
      auto same = std::find_if(versions.begin(), versions.end(), [&](const auto& v) { return v.first == version; });
      if (same == versions.end()) same = versions.emplace(versions.end(), version, std::vector<int>());
      same->second.push_back(r < ranks.size() ? ranks[r] : static_cast<int>(r));
    }
    if (versions.size() > 1) differences.push_back(Difference(name, versions));
  }
  // The same (name, dtype, shape) everywhere, yet the lists differ.
  if (differences.empty()) return "the ranks list the same tensors in a different order or with repeated names";
  std::string text;
  for (size_t i = 0; i < std::min(differences.size(), kNamedInError); ++i) text += (i ? "; " : "") + differences[i];
  if (differences.size() > kNamedInError) {
    text += "; and " + std::to_string(differences.size() - kNamedInError) + " more";
  }
  return text;
}

void CheckSameTensors(const std::vector<Described>& tensors, const AgreementCheck& check) {
  std::vector<const Described*> canonical;
  for (const Described& d : tensors) canonical.push_back(&d);
  if (check.by_name) {
    std::stable_sort(canonical.begin(), canonical.end(),
                     [](const Described* a, const Described* b) { return a->name < b->name; });
  }
  std::string bytes;
  for (const Described* d : canonical) Serialize(*d, &bytes);
  uint64_t digest = Fnv1a64(bytes);
  int64_t mine[2] = {0, static_cast<int64_t>(bytes.size())};
  std::memcpy(&mine[0], &digest, sizeof digest);
  const std::string gathered = Allgather(mine, 2, DataType::kInt64, check.collective, check.process_set);
  std::vector<int64_t> all(gathered.size() / sizeof(int64_t));
  std::memcpy(all.data(), gathered.data(), all.size() * sizeof(int64_t));
  bool same = true;
  for (size_t i = 0; i < all.size(); i += 2) same = same && all[i] == mine[0];
  if (same) return;

  // The ranks differ: every rank learns every rank's list, in its own order.
  if (check.by_name) {
    bytes.clear();
    for (const Described& d : tensors) Serialize(d, &bytes);
  }
  const std::string lists_bytes = Allgather(bytes.data(), static_cast<int64_t>(bytes.size()), DataType::kUInt8,
                                            check.collective + ".lists", check.process_set);
  std::vector<std::vector<Described>> lists;
  size_t at = 0;
  for (size_t i = 1; i < all.size(); i += 2) {
    const size_t length = static_cast<size_t>(all[i]);
    lists.push_back(Parse(lists_bytes.substr(std::min(at, lists_bytes.size()), length)));
    at += length;
  }
  Result<std::vector<int>> ranks = ProcessSetRanks(check.process_set);
  throw Error(StatusCode::kInvalidArgument,
              check.caller + ": the ranks' tensors differ: " +
                  ExplainDifferences(lists, ranks.ok() ? ranks.value() : std::vector<int>()));
}

}  // namespace internal
}  // namespace torch
}  // namespace accord
