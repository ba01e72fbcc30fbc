// Other programs from a test: one run to its end (curl, node, a shell line), or gpt2vk serve
// in the background until the test stops it.
#pragma once
#include <sys/types.h>

#include <string>
#include <vector>

#include "tests/cli.h"
#include "tests/files.h"

namespace test {

// Runs `argv` (argv[0] looked up in PATH) to its end: exit code, stdout, stderr. Its stdin is
// empty, or `input` (a file, not a terminal).
CliResult run(const std::vector<std::string>& argv, const Env& env = {});
CliResult run(const std::vector<std::string>& argv, const Env& env, const std::string& input);

// Whether a program is on PATH.
bool on_path(const std::string& program);

// One HTTP request with curl (at most 300 s): the status and the body.
struct HttpReply {
  int status = 0;
  std::string body;
};
// POSTs `body` as it is (invalid UTF-8 stays invalid) with Content-Type application/json.
HttpReply post(const std::string& url, const std::string& body);
HttpReply get(const std::string& url);
// The payloads of a server-sent-events body's "data: " lines, in order ("[DONE]" included).
std::vector<std::string> sse_data(const std::string& body);

// Another program's command line (argv[0] looked up in PATH), for Background.
struct Program {
  std::vector<std::string> argv;
};

// `gpt2vk ARGS` in the background, with the validation layer on, its stdout and stderr kept in
// files, its stdin from `input` (a FIFO the test writes to, say). The destructor kills it if it
// still runs.
class Background {
 public:
  explicit Background(const std::vector<std::string>& args, const Env& env = {},
                      const std::string& input = "/dev/null");
  // Another program (haproxy, prometheus) the same way, without the validation layer.
  explicit Background(const Program& program, const Env& env = {});
  ~Background();
  Background(const Background&) = delete;
  Background& operator=(const Background&) = delete;

  pid_t pid() const { return pid_; }
  std::string out() const;  // its stdout so far
  std::string err() const;  // its stderr so far
  // Whether it has exited, without waiting; `code` gets the exit code.
  bool exited(int& code);
  // Sends `signal` and waits for the exit (at most `seconds`): the exit code, -1 on timeout.
  int stop(int signal, int seconds = 60);
  // Waits for the exit (at most `seconds`): the exit code, -1 on timeout.
  int wait(int seconds = 60);

 private:
  TempDir dir_;
  pid_t pid_ = -1;
};

// `gpt2vk serve ... --port 0` in the background (ARGS may name a port instead: a replica
// restarted where it was); the constructor waits (at most a minute) for the line naming its
// port, and throws with its stderr if the server exits or never says.
class Server : public Background {
 public:
  explicit Server(const std::vector<std::string>& args, const Env& env = {});

  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int port() const { return port_; }

 private:
  int port_ = 0;
};

}  // namespace test
