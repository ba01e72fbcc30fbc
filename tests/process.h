// Other programs from a test: one run to its end (curl, node, a shell line), or gpt2vk serve
// in the background until the test stops it.
#pragma once
#include <sys/types.h>

#include <string>
#include <vector>

#include "tests/cli.h"
#include "tests/files.h"

namespace test {

// Runs `argv` (argv[0] looked up in PATH) to its end: exit code, stdout, stderr.
CliResult run(const std::vector<std::string>& argv, const Env& env = {});

// Whether a program is on PATH.
bool on_path(const std::string& program);

// `gpt2vk serve ... --port 0` in the background, with the validation layer on; the constructor
// waits (at most a minute) for the line naming its port, and throws with its stderr if the server
// exits or never says. The destructor kills it if it still runs.
class Server {
 public:
  explicit Server(const std::vector<std::string>& args, const Env& env = {});
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  std::string err() const;  // its stderr so far
  // Sends `signal` and waits for the exit (at most `seconds`): the exit code, -1 on timeout.
  int stop(int signal, int seconds = 60);

 private:
  TempDir dir_;
  pid_t pid_ = -1;
  int port_ = 0;
};

}  // namespace test
