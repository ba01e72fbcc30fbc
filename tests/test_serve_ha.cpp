// gpt2vk serve replicas behind HAProxy (issue 42): deploy/haproxy.cfg as shipped, but for its
// loopback ports, in front of two replicas of the default model, under a bounded load of whole
// and streamed greedy completions while one replica's GPU is lost (the test hook) and restarted,
// and the other drained by SIGTERM and restarted. What it holds the proxy and the replicas to:
// - every request that is not streamed gets its whole answer, the one a single server gives;
// - every stream gets its whole answer too, but for one that had begun on the replica when its
//   GPU was lost: nothing can carry a stream on elsewhere, so it ends with the error as its last
//   event and no [DONE] (at most one: a replica runs one request at a time here);
// - a stream's events pass the proxy as they come (the first before half its time).
#include <doctest/doctest.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "tests/deploy.h"
#include "tests/files.h"
#include "tests/process.h"

namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// The shipped config with the loopback ports of this test: the frontend's, the stats page's,
// and a server line per replica in place of the template's.
std::string haproxy_config(int frontend, int stats, const std::vector<int>& replicas) {
  std::string cfg = test::read_file(test::source_dir() / "deploy/haproxy.cfg");
  auto replace = [&](const std::string& from, const std::string& to) {
    const size_t at = cfg.find(from);
    REQUIRE_MESSAGE(at != std::string::npos, "deploy/haproxy.cfg has no '" << from << "'");
    cfg.replace(at, from.size(), to);
  };
  replace("bind :8080", "bind 127.0.0.1:" + std::to_string(frontend));
  replace("bind 127.0.0.1:8404", "bind 127.0.0.1:" + std::to_string(stats));
  std::string servers;
  for (size_t i = 0; i < replicas.size(); i++)
    servers += "    server replica" + std::to_string(i + 1) + " 127.0.0.1:" +
               std::to_string(replicas[i]) + "\n";
  const std::regex lines(R"((    server replica\d+ [^\n]*\n)+)");
  REQUIRE(std::regex_search(cfg, lines));
  return std::regex_replace(cfg, lines, servers, std::regex_constants::format_first_only);
}

// A replica of the default model on a port of its own (0 the first time: any free one).
std::unique_ptr<test::Server> replica(int port, const test::Env& env = {}) {
  return std::make_unique<test::Server>(
      std::vector<std::string>{"-m", (test::source_dir() / "models/kjv").string(), "--port",
                               std::to_string(port), "--drain-timeout", "20"},
      env);
}

// A completion's text from its whole answer, or from a stream's events; `done`: the stream
// ended with [DONE]; `error`: the message of an error event.
struct Answer {
  std::string text, error;
  bool done = false;
};
Answer answer(const std::string& body, bool stream) {
  Answer a;
  if (!stream) {
    const json j = json::parse(body, nullptr, false);
    if (j.contains("choices")) a.text = j["choices"][0]["text"], a.done = true;
    if (j.contains("error")) a.error = j["error"]["message"];
    return a;
  }
  for (const std::string& data : test::sse_data(body)) {
    if (data == "[DONE]") {
      a.done = true;
      continue;
    }
    const json j = json::parse(data, nullptr, false);
    if (j.contains("choices")) a.text += j["choices"][0]["text"].get<std::string>();
    if (j.contains("error")) a.error = j["error"]["message"];
  }
  return a;
}

double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * double(v.size())))];
}

}  // namespace

TEST_CASE("serve behind HAProxy: a lost GPU and a drained replica lose no request") {
  if (!test::have_program("haproxy")) return;
  const test::CliResult check =
      test::run({"haproxy", "-c", "-f", (test::source_dir() / "deploy/haproxy.cfg").string()});
  REQUIRE_MESSAGE(check.exit_code == 0, check.out << check.err);

  // Replica 1 loses its GPU at its 120th fence wait: a request of N tokens waits N times (a
  // prompt pass, N - 1 decode steps), so some 20 requests into its share of the load.
  std::unique_ptr<test::Server> one = replica(0, {{"GPT2VK_LOSE_DEVICE_AT_WAIT", "120"}});
  std::unique_ptr<test::Server> two = replica(0);
  const int port1 = one->port(), port2 = two->port();
  const int frontend = test::free_port(), stats = test::free_port();
  test::TempDir dir;
  test::write_file(dir / "haproxy.cfg", haproxy_config(frontend, stats, {port1, port2}));
  test::Background haproxy(test::Program{{"haproxy", "-db", "-f", (dir / "haproxy.cfg").string()}});
  auto stat = [&](const std::string& server, const std::string& column) {
    const test::Timed t = test::timed_request(stats, "GET", "/stats;csv");
    return test::haproxy_stat(t.body, "replicas", server, column);
  };
  // Waits (at most 30 s) until HAProxy's checks say `server` is `status` (UP, DOWN).
  auto until = [&](const std::string& server, const std::string& status) {
    for (int i = 0; i < 300; i++) {
      if (stat(server, "status") == status) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  };
  REQUIRE(until("replica1", "UP"));
  REQUIRE(until("replica2", "UP"));

  // The requests: 8 prompts, each with its own length, whole and streamed; the answers a single
  // server gives them (replica 2, directly).
  const std::vector<std::string> prompts = {"And God said", "In the beginning", "Blessed are",
                                            "Thou shalt", "And it came to pass", "The LORD is",
                                            "Behold", "And Moses"};
  auto body = [&](size_t p, bool stream) {
    return json{{"prompt", prompts[p]}, {"max_tokens", 4 + p % 5}, {"temperature", 0},
                {"stream", stream}}.dump();
  };
  std::vector<std::string> expected;
  for (size_t p = 0; p < prompts.size(); p++) {
    const test::Timed t = test::timed_request(port2, "POST", "/v1/completions", body(p, false));
    REQUIRE(t.status == 200);
    expected.push_back(answer(t.body, false).text);
  }

  // 200 requests from 16 clients; every other 8 streamed. Requests from 80 on wait until
  // replica 1 is back after its GPU was lost, from 150 on until replica 2 is back after SIGTERM.
  constexpr int kRequests = 200, kClients = 16;
  struct Result {
    test::Timed reply;
    bool stream = false;
    size_t prompt = 0;
  };
  std::vector<Result> results(kRequests);
  std::atomic<int> next{0}, finished{0};
  std::mutex mutex;
  std::condition_variable phase_changed;
  int phase = 0;
  auto gate = [&](int i) {
    const int need = i >= 150 ? 2 : i >= 80 ? 1 : 0;
    std::unique_lock lock(mutex);
    phase_changed.wait_for(lock, std::chrono::seconds(60), [&] { return phase >= need; });
  };
  auto set_phase = [&](int p) {
    {
      std::lock_guard lock(mutex);
      phase = p;
    }
    phase_changed.notify_all();
  };
  std::vector<std::jthread> clients;
  for (int c = 0; c < kClients; c++)
    clients.emplace_back([&] {
      for (int i = next++; i < kRequests; i = next++) {
        gate(i);
        Result& r = results[size_t(i)];
        r.prompt = size_t(i) % prompts.size();
        r.stream = (i / 8) % 2 == 1;
        r.reply = test::timed_request(frontend, "POST", "/v1/completions", body(r.prompt, r.stream));
        finished++;
      }
    });

  // Replica 1's GPU is lost within the first 80 requests: /health says 503 with the reason.
  test::Timed health;
  for (int i = 0; i < 600 && health.status != 503; i++) {
    health = test::timed_request(port1, "GET", "/health");
    if (health.status != 503) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const int lost_at = finished;
  CHECK_MESSAGE(health.status == 503,
                "replica 1's GPU was not lost within 30 s (GPT2VK_LOSE_DEVICE_AT_WAIT)");
  CHECK(health.body.find("the GPU failed") != std::string::npos);
  CHECK(until("replica1", "DOWN"));
  // What a supervisor does with a replica whose /health says "error": restart it.
  CHECK(one->stop(SIGTERM) == 0);
  one = replica(port1);
  CHECK(until("replica1", "UP"));
  set_phase(1);

  // Replica 2 drained with requests in flight: 30 more started, then SIGTERM; it finishes them
  // and exits 0, HAProxy's checks take it out, and what it refuses goes to replica 1.
  while (next < 110) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const int term_at = finished;
  CHECK(two->stop(SIGTERM, 30) == 0);
  CHECK(two->err().find("SIGTERM: finishing the requests in flight") != std::string::npos);
  CHECK(until("replica2", "DOWN"));
  two = replica(port2);
  CHECK(until("replica2", "UP"));
  set_phase(2);
  clients.clear();  // joins

  // Every request answered: whole answers all equal to the single server's, streams too but
  // for one that had begun when replica 1's GPU was lost.
  int whole = 0, streams = 0, cut = 0, errors = 0;  // whole and streams: answered in full
  const int streamed = int(std::count_if(results.begin(), results.end(),
                                         [](const Result& r) { return r.stream; }));
  std::vector<double> latency;
  for (int i = 0; i < kRequests; i++) {
    const Result& r = results[size_t(i)];
    CAPTURE(i);
    CAPTURE(r.reply.status);
    CAPTURE(r.reply.body);
    latency.push_back(r.reply.total_s);
    const Answer a = answer(r.reply.body, r.stream);
    if (r.reply.status != 200 || !a.done) errors++;
    CHECK(r.reply.status == 200);
    if (a.done) {
      CHECK(a.text == expected[r.prompt]);
      CHECK(a.error.empty());
      (r.stream ? streams : whole)++;
    } else {
      CHECK(r.stream);
      CHECK(a.error.find("the GPU failed") != std::string::npos);
      cut++;
    }
  }
  CHECK(cut <= 1);
  CHECK(whole == kRequests - streamed);
  CHECK(streams + cut == streamed);
  const int retries = std::stoi("0" + stat("BACKEND", "wretr")),
            redispatches = std::stoi("0" + stat("BACKEND", "wredis"));
  // The lost GPU and the drain sent requests elsewhere (a 503 retried, a connection refused).
  CHECK(retries + redispatches > 0);
  std::printf("serve behind HAProxy: %d requests from %d clients (%d whole, %d streamed): %d "
              "errors (%d streams cut by the lost GPU); latency p50 %.1f ms, p99 %.1f ms; "
              "HAProxy retried %d, redispatched %d; GPU lost after %d answered, SIGTERM after %d\n",
              kRequests, kClients, kRequests - streamed, streamed, errors, cut,
              quantile(latency, 0.5) * 1000, quantile(latency, 0.99) * 1000, retries, redispatches,
              lost_at, term_at);

  // A long stream through the proxy: its first event comes long before its end. Both replicas
  // were restarted above: each gets the same request once first, so that the timed one's first
  // event is not a fresh process compiling its pipelines on a cold cache (a CI run of 2026-11-28
  // saw 0.227 s to the first event of a 0.441 s stream that way).
  const std::string long_stream =
      json{{"prompt", "And"}, {"max_tokens", 200}, {"temperature", 0}, {"stream", true}}.dump();
  for (int port : {port1, port2})
    CHECK(test::timed_request(port, "POST", "/v1/completions", long_stream).status == 200);
  const test::Timed s = test::timed_request(frontend, "POST", "/v1/completions", long_stream);
  CHECK(s.status == 200);
  CHECK(answer(s.body, true).done);
  CAPTURE(s.first_s);
  CAPTURE(s.total_s);
  CHECK(s.first_s < s.total_s / 2);
}
