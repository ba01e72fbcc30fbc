// gpt2vk tokenize: the ids of a text, printed (with --text, each beside its bytes) or written
// as little-endian int32.
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>

#include "apps/commands.h"
#include "apps/session.h"
#include "model/text/wordpiece.h"

namespace app {
namespace {

struct TokenizeArgs {
  ModelArgs model;
  std::string prompt, file, out;  // --prompt or --file; --out writes int32 little-endian
  bool text = false;               // --text: a line per token, its id and its bytes
};

// A token's bytes in double quotes, as C writes a string: printable ASCII as it is, \", \\,
// \n, \t, and every other byte (a piece of a UTF-8 character, say) as \xNN, so that a line
// shows exactly the bytes the token stands for.
std::string quoted(const std::string& bytes) {
  std::string out = "\"";
  for (const char c : bytes) {
    const auto b = static_cast<unsigned char>(c);
    if (b == '"' || b == '\\') {
      out += '\\';
      out += static_cast<char>(b);
    } else if (b == '\n') {
      out += "\\n";
    } else if (b == '\t') {
      out += "\\t";
    } else if (b >= 0x20 && b < 0x7f) {
      out += static_cast<char>(b);
    } else {
      char hex[5];
      std::snprintf(hex, sizeof hex, "\\x%02x", b);
      out += hex;
    }
  }
  return out + "\"";
}

int tokenize(const TokenizeArgs& args) {
  if (args.text && !args.out.empty())
    throw std::runtime_error("--text prints the tokens and -o writes their ids; give one");
  const std::string text = read_text(args.prompt, args.file);
  const std::filesystem::path dir = model_dir(args.model);
  const model::Config config = model::load_config(dir / "config.json");
  // An encoder's WordPiece: [CLS] text [SEP] as the model reads it, each token its own text.
  std::unique_ptr<model::WordPiece> wordpiece;
  std::unique_ptr<model::Tokenizer> tok;
  std::vector<int32_t> ids;
  if (config.tokenizer.kind == model::TokenizerKind::WordPiece) {
    wordpiece = model::load_wordpiece(dir);
    ids = wordpiece->encode(text).ids;
  } else {
    tok = model::load_tokenizer(dir, config.tokenizer);
    ids = tok->encode(text);
  }
  const auto bytes = [&](int32_t id) { return wordpiece ? wordpiece->token(id) : tok->token_bytes(id); };
  if (!args.out.empty()) {
    std::ofstream out(args.out, std::ios::binary | std::ios::trunc);
    // int32 little-endian: the machines we build for are little-endian (checked in CMake).
    out.write(reinterpret_cast<const char*>(ids.data()), static_cast<std::streamsize>(ids.size() * 4));
    if (!out) throw std::runtime_error(args.out + ": cannot write");
    std::fprintf(stderr, "gpt2vk: %zu tokens written to %s\n", ids.size(), args.out.c_str());
    return 0;
  }
  if (args.text) {
    for (const int32_t id : ids) std::printf("%d\t%s\n", id, quoted(bytes(id)).c_str());
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
  cmd->add_flag("--text", args->text,
                "a line per token: its id, a tab, and its bytes quoted (\\xNN for the rest)");
  return {cmd, [args] { return tokenize(*args); }};
}

}  // namespace app
