// The gpt2vk subcommands. Each returns the process exit code; errors are thrown as exceptions
// and reported by main().
#pragma once

namespace app {

struct DevicesArgs {
  bool validation = false;
};
int devices(const DevicesArgs& args);

}  // namespace app
