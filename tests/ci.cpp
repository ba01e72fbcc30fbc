#include "tests/ci.h"

#include <cstdlib>
#include <cstring>

namespace test {

bool in_ci() {
  const char* ci = std::getenv("CI");
  return ci && (std::strcmp(ci, "true") == 0 || std::strcmp(ci, "1") == 0);
}

}  // namespace test
