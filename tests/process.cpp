#include "tests/process.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <regex>
#include <stdexcept>
#include <thread>

namespace test {

namespace {

// fork + exec with stdin from a file, stdout and stderr to files; returns the child's pid.
pid_t spawn(const std::vector<std::string>& argv, const Env& env, const std::string& out,
            const std::string& err, const std::string& in = "/dev/null") {
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    if (!freopen(out.c_str(), "w", stdout) || !freopen(err.c_str(), "w", stderr)) _exit(127);
    if (!freopen(in.c_str(), "r", stdin)) _exit(127);
    // SIGINT as a terminal's Ctrl-C, even where the test runs in a background job of a shell
    // (which ignores it, and the ignoring would be inherited).
    signal(SIGINT, SIG_DFL);
    for (const auto& [name, value] : env) setenv(name.c_str(), value.c_str(), 1);
    std::vector<std::string> copy = argv;
    std::vector<char*> args;
    for (std::string& a : copy) args.push_back(a.data());
    args.push_back(nullptr);
    execvp(args[0], args.data());
    _exit(127);
  }
  return pid;
}

int exit_code(int status) {
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace

CliResult run(const std::vector<std::string>& argv, const Env& env) {
  return run(argv, env, "");
}

CliResult run(const std::vector<std::string>& argv, const Env& env, const std::string& input) {
  TempDir dir;
  const std::string out = (dir / "out").string(), err = (dir / "err").string();
  write_file(dir / "in", input);
  const pid_t pid = spawn(argv, env, out, err, (dir / "in").string());
  int status = 0;
  waitpid(pid, &status, 0);
  CliResult r;
  r.exit_code = exit_code(status);
  r.out = read_file(out);
  r.err = read_file(err);
  return r;
}

namespace {

// curl ARGS: -w puts the status on a line after the body.
HttpReply curl(std::vector<std::string> args) {
  args.insert(args.begin(), {"curl", "-sS", "--max-time", "300", "-o", "-", "-w", "\n%{http_code}"});
  const CliResult r = run(args);
  if (r.exit_code != 0) throw std::runtime_error("curl failed: " + r.err);
  const size_t nl = r.out.rfind('\n');
  return {std::stoi(r.out.substr(nl + 1)), r.out.substr(0, nl)};
}

}  // namespace

HttpReply post(const std::string& url, const std::string& body) {
  TempDir dir;
  write_file(dir / "body", body);
  return curl({"-H", "Content-Type: application/json", "--data-binary",
               "@" + (dir / "body").string(), url});
}

HttpReply get(const std::string& url) { return curl({url}); }

bool on_path(const std::string& program) {
  return run({"sh", "-c", "command -v " + program}).exit_code == 0;
}

std::vector<std::string> sse_data(const std::string& body) {
  std::vector<std::string> out;
  size_t at = 0;
  while ((at = body.find("data: ", at)) != std::string::npos) {
    const size_t end = body.find("\n\n", at);
    out.push_back(body.substr(at + 6, end - at - 6));
    at = end;
  }
  return out;
}

Background::Background(const std::vector<std::string>& args, const Env& env,
                       const std::string& input) {
  std::vector<std::string> argv = {GPT2VK_BINARY};
  argv.insert(argv.end(), args.begin(), args.end());
  write_file(dir_ / "out", "");  // there before the child opens them
  write_file(dir_ / "err", "");
  pid_ = spawn(argv, with_validation(env), (dir_ / "out").string(), (dir_ / "err").string(),
               input);
}

Background::Background(const Program& program, const Env& env) {
  write_file(dir_ / "out", "");
  write_file(dir_ / "err", "");
  pid_ = spawn(program.argv, env, (dir_ / "out").string(), (dir_ / "err").string());
}

Background::~Background() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
}

std::string Background::out() const { return read_file(dir_ / "out"); }
std::string Background::err() const { return read_file(dir_ / "err"); }

bool Background::exited(int& code) {
  int status = 0;
  if (pid_ <= 0) return true;
  if (waitpid(pid_, &status, WNOHANG) != pid_) return false;
  pid_ = -1;
  code = exit_code(status);
  return true;
}

int Background::stop(int signal, int seconds) {
  if (pid_ <= 0) return -1;
  kill(pid_, signal);
  return wait(seconds);
}

int Background::wait(int seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  int code = -1;
  while (std::chrono::steady_clock::now() < deadline) {
    if (exited(code)) return code;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return -1;
}

Server::Server(const std::vector<std::string>& args, const Env& env)
    : Background([&] {
        std::vector<std::string> argv = {"serve"};
        if (std::find(args.begin(), args.end(), "--port") == args.end())
          argv.insert(argv.end(), {"--port", "0"});
        argv.insert(argv.end(), args.begin(), args.end());
        return argv;
      }(), env) {
  const std::regex line(R"(on http://127\.0\.0\.1:(\d+))");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    std::smatch m;
    const std::string e = err();
    if (std::regex_search(e, m, line)) {
      port_ = std::stoi(m[1]);
      return;
    }
    int code = 0;
    if (exited(code))
      throw std::runtime_error("gpt2vk serve exited (" + std::to_string(code) + "): " + e);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  throw std::runtime_error("gpt2vk serve did not say where it listens within a minute: " + err());
}

}  // namespace test
