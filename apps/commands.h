// The gpt2vk subcommands. Each returns the process exit code; errors are thrown as exceptions
// and reported by main().
#pragma once
#include <cstdint>
#include <string>

namespace app {

struct DevicesArgs {
  bool validation = false;
};
int devices(const DevicesArgs& args);

struct OpbenchArgs {
  std::string device;         // index or name; "" = the first GPU
  std::string precision = "f16";
  int repeats = 10;
  uint32_t prefill = 128;     // tokens of the prefill shapes (decode attends to this many)
};
int opbench(const OpbenchArgs& args);

}  // namespace app
