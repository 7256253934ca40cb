// A library linked with a static libstdc++ and accord's link options
// (CMakeLists.txt: --exclude-libs), loaded beside torch by test_packaging.py.
// Its copy of libstdc++ must stay private: exported, its std::locale symbols
// bind half to torch's libstdc++.so and an ostringstream drops the number
// (here) or crashes (on the GPU machine, with GCC 13; docs/gpu.md).
#include <cstring>
#include <sstream>
#include <string>

// Writes "[<value>]" into out (capacity bytes, NUL included); returns the
// length written, or -1 when it does not fit.
extern "C" __attribute__((visibility("default"))) int accord_probe_format(long value, char* out, int capacity) {
  std::ostringstream text;
  text << '[' << value << ']';
  const std::string s = text.str();
  if (static_cast<int>(s.size()) >= capacity) return -1;
  std::memcpy(out, s.c_str(), s.size() + 1);
  return static_cast<int>(s.size());
}
