// Running the gpt2vk binary from a test: its exit code, stdout and stderr.
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace test {

struct CliResult {
  int exit_code = -1;
  std::string out, err;
};

// Environment variables for the child: (name, value) pairs set on top of the test's own.
using Env = std::vector<std::pair<std::string, std::string>>;

// Runs gpt2vk with `args` (each passed as one argument, no shell; stdin empty). The Khronos
// validation layer is on (GPT2VK_VALIDATION=1); messages it prints land in err.
CliResult gpt2vk(const std::vector<std::string>& args, const Env& env = {});
// ... with `input` as its stdin (a file: not a terminal, as a pipe is not).
CliResult gpt2vk(const std::vector<std::string>& args, const Env& env, const std::string& input);

// A gpt2vk child's environment: GPT2VK_VALIDATION=1, then `env`.
Env with_validation(const Env& env);

// True when err carries no validation-layer message.
bool no_validation_messages(const CliResult& r);

}  // namespace test
