// gpt2vk: run GPT-2-style transformers on any Vulkan GPU. Each command adds its own subcommand
// and options (apps/commands.h); main parses (apps/command_line.h), runs the chosen one and
// reports its errors.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>

#include "apps/command_line.h"
#include "apps/commands.h"

int main(int argc, char** argv) {
  CLI::App cli{"gpt2vk: GPT-2-style transformers on any Vulkan GPU"};
  cli.require_subcommand(1);
  cli.set_version_flag("--version", [] { return app::version_text(); },
                       "the git revision built and the Vulkan devices found");
  const app::Command commands[] = {
      app::add_devices(cli),  app::add_opbench(cli),    app::add_bench(cli),
      app::add_tokenize(cli), app::add_generate(cli),   app::add_chat(cli),
      app::add_compare(cli),
      app::add_logits(cli),   app::add_perplexity(cli), app::add_attention(cli),
      app::add_embed(cli),    app::add_fill_mask(cli),  app::add_classify(cli), app::add_seq2seq(cli),
      app::add_serve(cli),    app::add_make_model(cli), app::add_train(cli),
  };

  if (const std::optional<int> done = app::parse_command_line(cli, argc, argv)) return *done;
  try {
    for (const app::Command& c : commands)
      if (c.cli->parsed()) return c.run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpt2vk: error: %s\n", e.what());
    return 1;
  }
  return 1;
}
