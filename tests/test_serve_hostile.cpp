// gpt2vk serve against hostile and unlucky clients (issue 35), with real sockets on loopback:
// bodies that nest deeply or hold numbers out of range, clients that send headers a byte at a
// time or nothing at all, a body over --max-body with requests hidden in it, a client that
// leaves a non-streamed request, SIGTERM with slow clients connected, and a port in use. Each
// check is bounded in time: the server's --request-timeout is 2 s here.
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "tests/cli.h"
#include "tests/files.h"
#include "tests/process.h"

namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// A raw TCP connection to the server on loopback.
class Connection {
 public:
  explicit Connection(int port) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(fd_ >= 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  }
  ~Connection() { close(fd_); }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  bool send_all(const std::string& data) {
    for (size_t at = 0; at < data.size();) {
      const ssize_t n = ::send(fd_, data.data() + at, data.size() - at, MSG_NOSIGNAL);
      if (n <= 0) return false;
      at += static_cast<size_t>(n);
    }
    return true;
  }
  // Everything until the server closes the connection, or `seconds` pass; closed says which.
  std::string read_until_closed(double seconds, bool& closed) {
    std::string out;
    closed = false;
    const auto until = Clock::now() + std::chrono::milliseconds(long(seconds * 1000));
    while (Clock::now() < until) {
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, 50) <= 0) continue;
      char buffer[65536];
      const ssize_t n = recv(fd_, buffer, sizeof buffer, 0);
      if (n <= 0) {
        closed = true;
        break;
      }
      out.append(buffer, static_cast<size_t>(n));
    }
    return out;
  }
  // Whether the server has closed it (without waiting).
  bool closed_by_server() {
    char c;
    const ssize_t n = recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
  }

 private:
  int fd_ = -1;
};

std::string http_post(const std::string& body) {
  return "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
         "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

// One request on a fresh connection: the status and the body (Connection: close).
std::pair<int, std::string> exchange(int port, const std::string& request, double seconds = 60) {
  Connection c(port);
  REQUIRE(c.send_all(request));
  bool closed = false;
  const std::string reply = c.read_until_closed(seconds, closed);
  REQUIRE_MESSAGE(reply.rfind("HTTP/1.1 ", 0) == 0, reply.substr(0, 200));
  const size_t body = reply.find("\r\n\r\n");
  return {std::stoi(reply.substr(9, 3)), body == std::string::npos ? "" : reply.substr(body + 4)};
}

std::string post_closing(const std::string& body) {
  return "POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
         "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\n\r\n" + body;
}

const char* kHealth = "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

}  // namespace

TEST_CASE("serve: bodies nested deep or with numbers out of range are 400s that echo little") {
  test::Server server({"--request-timeout", "2"});
  // 60,000 nested arrays in max_tokens (120 KB) ran out of stack; 33 is one past the bound.
  for (size_t depth : {size_t{60000}, size_t{33}}) {
    const std::string nested = std::string(depth, '[') + std::string(depth, ']');
    const auto [status, body] =
        exchange(server.port(), post_closing("{\"prompt\":\"x\",\"max_tokens\":" + nested + "}"));
    CHECK(status == 400);
    CHECK(body.find("nests arrays or objects more than 32 deep") != std::string::npos);
    CHECK(body.size() < 300);
  }
  for (const char* field : {"seed", "n", "logprobs", "max_tokens"}) {
    const std::string nested = std::string(30000, '[') + std::string(30000, ']');
    CHECK(exchange(server.port(), post_closing(std::string("{\"prompt\":\"x\",\"") + field + "\":" +
                                               nested + "}")).first == 400);
  }
  // A stop list nested deep, then a number JSON cannot hold as a double.
  CHECK(exchange(server.port(), post_closing("{\"prompt\":\"x\",\"stop\":" + std::string(5000, '[') +
                                             std::string(5000, ']') + "}")).first == 400);
  const auto [status, body] = exchange(server.port(), post_closing(R"({"prompt":"x","max_tokens":1e400})"));
  CHECK(status == 400);
  CHECK(body.find("number overflow") != std::string::npos);
  // A value out of range is named, not echoed whole.
  const std::string big = std::string(100000, '7');
  const auto [s2, b2] = exchange(server.port(), post_closing(R"({"prompt":"x","max_tokens":")" + big + "\"}"));
  CHECK(s2 == 400);
  CHECK(b2.find("max_tokens must be an integer, got a string") != std::string::npos);
  CHECK(b2.size() < 400);
  const auto [s3, b3] = exchange(server.port(), post_closing(R"({"prompt":"x","temperature":)" + big + "}"));
  CHECK(s3 == 400);
  CHECK(b3.size() < 400);
  // Still serving.
  CHECK(exchange(server.port(), kHealth).first == 200);
}

TEST_CASE("serve: slow and idle clients neither starve /health and requests nor stay connected") {
  test::Server server({"--request-timeout", "2"});
  // What /health and a short completion take here without hostile clients: the bound below is
  // relative to it, so a loaded machine (a sanitized build, a cold shader cache) does not fail
  // it, while starving (the 13 s and the time-outs this test was written for) still does.
  const auto base0 = Clock::now();
  REQUIRE(exchange(server.port(), kHealth, 5).first == 200);
  REQUIRE(exchange(server.port(), post_closing(R"({"prompt":"And God said","max_tokens":8})"), 30).first == 200);
  const double base = seconds_since(base0);
  // 40 clients sending headers a byte at a time, and 100 that send one byte and stall: more than
  // the 32 threads the server once had for everything.
  std::vector<std::unique_ptr<Connection>> slow, stalled;
  for (int i = 0; i < 40; i++) {
    slow.push_back(std::make_unique<Connection>(server.port()));
    slow.back()->send_all("G");
  }
  for (int i = 0; i < 100; i++) {
    stalled.push_back(std::make_unique<Connection>(server.port()));
    stalled.back()->send_all("P");
  }
  std::atomic<bool> dripping{true};
  std::thread drip([&] {
    while (dripping) {
      for (auto& c : slow) c->send_all("E");
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
  });
  for (int i = 0; i < 3; i++) {
    const auto t0 = Clock::now();
    CHECK(exchange(server.port(), kHealth, 5).first == 200);
    CHECK(exchange(server.port(), post_closing(R"({"prompt":"And God said","max_tokens":8})"), 30).first == 200);
    CHECK_MESSAGE(seconds_since(t0) < 2 * base + 3, "health and a completion took "
                                                      << seconds_since(t0) << " s, " << base
                                                      << " s without the slow clients");
  }
  // Past the 2 s header deadline (and the guard's 0.2 s sweep) every one of them is closed.
  std::this_thread::sleep_for(std::chrono::milliseconds(3500));
  dripping = false;
  drip.join();
  int open = 0;
  for (auto& c : slow) open += !c->closed_by_server();
  for (auto& c : stalled) open += !c->closed_by_server();
  CHECK_MESSAGE(open == 0, open << " of 140 slow or idle connections still open");
}

TEST_CASE("serve: a body over --max-body is a 413 that closes the connection") {
  test::Server server({"--max-body", "4096"});
  Connection c(server.port());
  // Requests hidden in the body: once parsed as more requests after the 413 (five answers came
  // back on one connection).
  std::string inner;
  while (inner.size() < 40000) inner += "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
  c.send_all("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " +
             std::to_string(inner.size()) + "\r\n\r\n");
  c.send_all(inner);
  bool closed = false;
  const std::string reply = c.read_until_closed(10, closed);
  CHECK(closed);
  CHECK(reply.rfind("HTTP/1.1 413", 0) == 0);
  size_t answers = 0;
  for (size_t at = 0; (at = reply.find("HTTP/1.1 ", at)) != std::string::npos; at++) answers++;
  CHECK(answers == 1);
}

TEST_CASE("serve: a non-streamed request whose client left frees its slot") {
  // 50 ms a step: 240 tokens would hold the one slot for 12 s.
  test::Server server({}, {{"GPT2VK_SERVE_STEP_DELAY_MS", "50"}});
  {
    Connection gone(server.port());
    gone.send_all(http_post(R"({"prompt":"And","max_tokens":240,"temperature":0})"));
    std::this_thread::sleep_for(std::chrono::milliseconds(800));
  }  // closed
  const auto t0 = Clock::now();
  CHECK(exchange(server.port(), post_closing(R"({"prompt":"And","max_tokens":4})"), 30).first == 200);
  // Held to the end, the slot would have been busy about 11 s more; 8 s leaves room for a
  // loaded machine.
  CHECK_MESSAGE(seconds_since(t0) < 8, "the next request waited " << seconds_since(t0) << " s");
  CHECK(server.err().find("POST /v1/completions 499") != std::string::npos);
}

TEST_CASE("serve: SIGTERM drains: /health 503 at once, slow clients closed, exit in time") {
  test::Server server({"--request-timeout", "30"}, {{"GPT2VK_SERVE_STEP_DELAY_MS", "40"}});
  std::vector<std::unique_ptr<Connection>> slow;
  for (int i = 0; i < 3; i++) {
    slow.push_back(std::make_unique<Connection>(server.port()));
    slow.back()->send_all("GET /hea");
  }
  std::pair<int, std::string> running;
  std::thread client([&] {
    running = exchange(server.port(), post_closing(R"({"prompt":"And","max_tokens":40,"temperature":0})"), 60);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(700));
  const auto t0 = Clock::now();
  kill(server.pid(), SIGTERM);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const auto [health, body] = exchange(server.port(), kHealth, 5);
  CHECK(health == 503);
  CHECK(body.find("draining") != std::string::npos);
  CHECK(exchange(server.port(), post_closing(R"({"prompt":"x","max_tokens":2})"), 5).first == 503);
  client.join();
  const auto answered = Clock::now();
  CHECK(running.first == 200);  // the request in flight finished
  const int code = server.stop(0, 30);  // signalled already: signal 0 only waits for the exit
  CHECK(code == 0);
  // In time: soon after the request in flight is answered, not after the slow clients' 30 s
  // request timeout. The request itself may take seconds where its pipelines compile cold under
  // the sanitizers (the whole took 10.3 s there), so the bound runs from its answer.
  CHECK_MESSAGE(seconds_since(answered) < 5, "exit took " << seconds_since(answered)
                                                           << " s after the last answer");
  CHECK_MESSAGE(seconds_since(t0) < 30, "exit took " << seconds_since(t0) << " s");
  for (auto& c : slow) CHECK(c->closed_by_server());
}

TEST_CASE("serve: past --drain-timeout the requests in flight are cut off and the exit is 1") {
  test::Server server({"--drain-timeout", "1"}, {{"GPT2VK_SERVE_STEP_DELAY_MS", "100"}});
  std::thread client([&] {
    Connection c(server.port());
    c.send_all(post_closing(R"({"prompt":"And","max_tokens":200})"));
    bool closed = false;
    c.read_until_closed(60, closed);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const auto t0 = Clock::now();
  const int code = server.stop(SIGTERM, 30);
  client.join();
  CHECK(code == 1);
  CHECK_MESSAGE(seconds_since(t0) < 5, "exit took " << seconds_since(t0) << " s");
  CHECK(server.err().find("--drain-timeout of 1 s passed") != std::string::npos);
}

TEST_CASE("serve: a port in use is an error naming it") {
  test::Server first({});
  const test::CliResult second =
      test::gpt2vk({"serve", "--port", std::to_string(first.port())});
  CHECK(second.exit_code == 1);
  CHECK(second.err.find("cannot listen on 127.0.0.1:" + std::to_string(first.port()) +
                        ": the port is in use") != std::string::npos);
  CHECK(exchange(first.port(), kHealth, 5).first == 200);
}
