// The command line, read for people who mistype it: "did you mean" for an unknown command or
// option, and `gpt2vk --version`.
#pragma once
#include <CLI/CLI.hpp>
#include <optional>
#include <string>
#include <vector>

namespace app {

// Parses argv into `cli` (its subcommands added). nullopt where a command was chosen and its
// options read; otherwise the exit code, the output printed: --help, --version, or an error
// with, for an unknown command or option, the nearest names ("unknown command 'gen': did you
// mean 'generate'?").
std::optional<int> parse_command_line(CLI::App& cli, int argc, char** argv);

// The names of `names` that `typed` likely meant: those it begins ("gen": "generate"), else
// the nearest by edit distance, within a third of its letters; none for fewer than 3 letters.
// Leading dashes count as letters of neither.
std::vector<std::string> did_you_mean(const std::string& typed,
                                      const std::vector<std::string>& names);

// `gpt2vk --version`: the git revision built ("unknown" outside git), the Vulkan loader and
// each device with its driver, or why there is none (never an error).
std::string version_text();

}  // namespace app
