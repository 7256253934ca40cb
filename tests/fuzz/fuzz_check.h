// FUZZ_CHECK for the fuzz targets: a property that must hold for every input.
// A failure prints what broke and aborts, which libFuzzer reports as a crash
// and saves the input that caused it.
#pragma once

#include <cstdio>
#include <cstdlib>

#define FUZZ_CHECK(condition, what)                                                                     \
  do {                                                                                                  \
    if (!(condition)) {                                                                                 \
      std::fprintf(stderr, "%s:%d: FUZZ_CHECK(%s) failed: %s\n", __FILE__, __LINE__, #condition, what); \
      std::abort();                                                                                     \
    }                                                                                                   \
  } while (0)
