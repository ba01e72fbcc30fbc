// gpt2vk: run GPT-2-style transformers on any Vulkan GPU.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>

#include "apps/commands.h"

int main(int argc, char** argv) {
  CLI::App cli{"gpt2vk: GPT-2-style transformers on any Vulkan GPU"};
  cli.require_subcommand(1);

  app::DevicesArgs devices_args;
  CLI::App* devices = cli.add_subcommand("devices", "list every Vulkan device with its limits and features");
  devices->add_flag("--validation", devices_args.validation,
                    "enable the Khronos validation layer (also: GPT2VK_VALIDATION=1)");

  CLI11_PARSE(cli, argc, argv);
  try {
    if (devices->parsed()) return app::devices(devices_args);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpt2vk: error: %s\n", e.what());
    return 1;
  }
  return 1;
}
