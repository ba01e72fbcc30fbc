// The gpt2vk subcommands. Each command's file adds its own: the subcommand, its options bound
// to an arguments struct the file keeps, and what runs it; main() lists them and runs the one
// the command line chose. A command returns the process exit code; errors are thrown as
// exceptions and reported by main().
#pragma once
#include <CLI/CLI.hpp>

#include <functional>
#include <vector>
#include <string>

namespace app {

// A subcommand on the command line, and the command it runs once parsed.
struct Command {
  CLI::App* cli;             // the subcommand; parsed() where the command line chose it
  std::function<int()> run;  // the command on the parsed options: the exit code
};

// Each adds its subcommand to `cli`, in the order `gpt2vk --help` lists them.
Command add_devices(CLI::App& cli);
Command add_opbench(CLI::App& cli);
Command add_bench(CLI::App& cli);
Command add_tokenize(CLI::App& cli);
Command add_generate(CLI::App& cli);
Command add_chat(CLI::App& cli);
Command add_compare(CLI::App& cli);
Command add_logits(CLI::App& cli);
Command add_perplexity(CLI::App& cli);
Command add_attention(CLI::App& cli);
Command add_embed(CLI::App& cli);      // apps/encode.cpp: the encoder commands
Command add_fill_mask(CLI::App& cli);
Command add_classify(CLI::App& cli);
Command add_seq2seq(CLI::App& cli);  // apps/seq2seq.cpp: encoder-decoders
Command add_serve(CLI::App& cli);  // apps/serve/serve.cpp
Command add_make_model(CLI::App& cli);
Command add_train(CLI::App& cli);

// A whole file's bytes; throws "<file>: cannot open".
std::string read_file(const std::string& file);

// The text of --prompt or --file (exactly one must be given), checked to be valid UTF-8.
std::string read_text(const std::string& prompt, const std::string& file);

// The texts of --prompt (one) or --file (one per line; a final newline ends the last line, a
// '\r' before it is dropped). Empty texts and invalid UTF-8 are errors naming the line.
std::vector<std::string> read_texts(const std::string& prompt, const std::string& file);

}  // namespace app
