// A GPT2VK_SANITIZE build proves its sanitizers are on: ctest runs this program once per kind
// of error and expects the sanitizer's report (cmake/sanitizers.cmake), so a build where the
// flags got lost fails instead of passing everything unchecked.
#include <climits>
#include <cstdio>
#include <cstring>
#include <vector>

namespace {
volatile int sink;  // keeps the compiler from removing the faulty code
}

int main(int argc, char** argv) {
  const char* kind = argc > 1 ? argv[1] : "";
  if (std::strcmp(kind, "heap-overflow") == 0) {
    std::vector<int> v(3);
    sink = v.data()[static_cast<size_t>(sink) + 3];
  } else if (std::strcmp(kind, "signed-overflow") == 0) {
    volatile int x = INT_MAX;
    sink = x + 1;
  } else if (std::strcmp(kind, "leak") == 0) {
    volatile int* p = new int[4];
    p[0] = 1;
    p = nullptr;
    return 0;  // LeakSanitizer reports at exit
  } else {
    std::fprintf(stderr, "usage: %s heap-overflow|signed-overflow|leak\n", argv[0]);
    return 2;
  }
  std::printf("%s: went on after the error\n", kind);
  return 0;
}
