#include "tests/cli.h"

#include "tests/process.h"

namespace test {

Env with_validation(const Env& env) {
  Env out = {{"GPT2VK_VALIDATION", "1"}};  // first: `env` may override it
  out.insert(out.end(), env.begin(), env.end());
  return out;
}

CliResult gpt2vk(const std::vector<std::string>& args, const Env& env) {
  return gpt2vk(args, env, "");
}

CliResult gpt2vk(const std::vector<std::string>& args, const Env& env, const std::string& input) {
  std::vector<std::string> argv = {GPT2VK_BINARY};
  argv.insert(argv.end(), args.begin(), args.end());
  return run(argv, with_validation(env), input);
}

bool no_validation_messages(const CliResult& r) {
  return r.err.find("[vulkan validation") == std::string::npos;
}

}  // namespace test
