// gpt2vk tokenize: the ids of a text, printed or written as little-endian int32.
#include <cstdio>
#include <fstream>
#include <memory>

#include "apps/commands.h"
#include "apps/session.h"

namespace app {
namespace {

struct TokenizeArgs {
  ModelArgs model;
  std::string prompt, file, out;  // --prompt or --file; --out writes int32 little-endian
};

int tokenize(const TokenizeArgs& args) {
  const std::string text = read_text(args.prompt, args.file);
  const std::filesystem::path dir = model_dir(args.model);
  const model::Config config = model::load_config(dir / "config.json");
  const std::unique_ptr<model::Tokenizer> tok = model::load_tokenizer(dir, config.tokenizer);
  const std::vector<int32_t> ids = tok->encode(text);
  if (!args.out.empty()) {
    std::ofstream out(args.out, std::ios::binary | std::ios::trunc);
    // int32 little-endian: the machines we build for are little-endian (checked in CMake).
    out.write(reinterpret_cast<const char*>(ids.data()), static_cast<std::streamsize>(ids.size() * 4));
    if (!out) throw std::runtime_error(args.out + ": cannot write");
    std::fprintf(stderr, "gpt2vk: %zu tokens written to %s\n", ids.size(), args.out.c_str());
    return 0;
  }
  for (size_t i = 0; i < ids.size(); i++) std::printf(i ? " %d" : "%d", ids[i]);
  std::printf("\n");
  return 0;
}

}  // namespace

Command add_tokenize(CLI::App& cli) {
  auto args = std::make_shared<TokenizeArgs>();
  CLI::App* cmd =
      cli.add_subcommand("tokenize", "print a text's token ids, or write them as int32");
  add_model_options(*cmd, args->model, true);
  cmd->add_option("-p,--prompt", args->prompt, "text to tokenize");
  cmd->add_option("-f,--file", args->file, "file to tokenize");
  cmd->add_option("-o,--out", args->out, "write the ids as little-endian int32 here");
  return {cmd, [args] { return tokenize(*args); }};
}

}  // namespace app
