#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include "tests/gpu.h"

#include <cstdlib>

int main(int argc, char** argv) {
  // The gpt2vk processes the tests start check whole models at fp32's tolerances too
  // (test::coop_matrix()); a value already set wins.
  ::setenv("GPT2VK_COOP_MATRIX", "off", 0);
  doctest::Context context;
  // The sanitized build leaves out the test cases at users' shapes (doctest suite "shapes"):
  // their time is lavapipe's, and the host code they run is the smaller shapes' (tests/
  // CMakeLists.txt sets this there).
  if (const char* skip = std::getenv("GPT2VK_TEST_SUITE_EXCLUDE"); skip && *skip)
    context.setOption("test-suite-exclude", skip);
  context.applyCommandLine(argc, argv);
  const int status = context.run();
  test::release_gpu();
  return status;
}
