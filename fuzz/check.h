// What every fuzz target treats as a finding besides a crash or a sanitizer report: a broken
// property of the code under test. A finding prints what broke and aborts, so that libFuzzer
// saves the input (crash-<sha1>) and scripts/fuzz.sh fails.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string_view>

#define FUZZ_CHECK(cond)                                                                 \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      std::fprintf(stderr, "%s:%d: FUZZ_CHECK(%s) failed\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                      \
    }                                                                                    \
  } while (0)

namespace fuzz {

// A reader's error must name its source first ("<file>: <key>: <problem>"), on one line.
inline void check_message(const std::runtime_error& e, std::string_view source) {
  const std::string_view what = e.what();
  if (what.starts_with(source) && what.find('\n') == std::string_view::npos) return;
  std::fprintf(stderr, "error message does not start with \"%.*s\" or spans lines: %s\n",
               static_cast<int>(source.size()), source.data(), e.what());
  std::abort();
}

}  // namespace fuzz
