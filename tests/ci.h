// Whether the suite runs in CI: there a missing tool, package or Vulkan device fails the test
// that needs it, where elsewhere it is skipped with a message (the developers' guide).
#pragma once

namespace test {

// CI=true (or CI=1) in the environment.
bool in_ci();

}  // namespace test
