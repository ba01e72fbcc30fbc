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

  app::OpbenchArgs opbench_args;
  CLI::App* opbench = cli.add_subcommand("opbench", "GPU time of every op at GPT-2 small shapes (timestamps)");
  opbench->add_option("--device", opbench_args.device, "device index or name (default: first GPU)");
  opbench->add_option("--precision", opbench_args.precision, "weight storage")
      ->check(CLI::IsMember({"f16", "f32"}));
  opbench->add_option("-r,--repeats", opbench_args.repeats, "timed calls per op")
      ->check(CLI::Range(1, 1000));
  opbench->add_option("-p,--prefill", opbench_args.prefill, "prefill tokens")
      ->check(CLI::Range(2, 1024));

  CLI11_PARSE(cli, argc, argv);
  try {
    if (devices->parsed()) return app::devices(devices_args);
    if (opbench->parsed()) return app::opbench(opbench_args);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpt2vk: error: %s\n", e.what());
    return 1;
  }
  return 1;
}
