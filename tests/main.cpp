#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include "tests/gpu.h"

#include <cstdlib>

int main(int argc, char** argv) {
  // The gpt2vk processes the tests start check whole models at fp32's tolerances too
  // (test::coop_matrix()); a value already set wins.
  ::setenv("GPT2VK_COOP_MATRIX", "off", 0);
  doctest::Context context;
  context.applyCommandLine(argc, argv);
  const int status = context.run();
  test::release_gpu();
  return status;
}
