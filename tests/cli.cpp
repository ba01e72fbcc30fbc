#include "tests/cli.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <stdexcept>

#include "tests/files.h"

namespace test {

CliResult gpt2vk(const std::vector<std::string>& args, const Env& env) {
  TempDir dir;
  const std::string out = (dir / "out").string(), err = (dir / "err").string();
  std::fflush(stdout);  // or the child would write the parent's buffered output again
  std::fflush(stderr);
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    if (!freopen(out.c_str(), "w", stdout) || !freopen(err.c_str(), "w", stderr)) _exit(127);
    setenv("GPT2VK_VALIDATION", "1", 1);
    for (const auto& [name, value] : env) setenv(name.c_str(), value.c_str(), 1);
    std::vector<char*> argv;
    std::string binary = GPT2VK_BINARY;
    argv.push_back(binary.data());
    std::vector<std::string> copy = args;
    for (std::string& a : copy) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(binary.c_str(), argv.data());
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  CliResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = read_file(out);
  r.err = read_file(err);
  return r;
}

bool no_validation_messages(const CliResult& r) {
  return r.err.find("[vulkan validation") == std::string::npos;
}

}  // namespace test
