// gpt2vk serve's /metrics with Prometheus' own tools (issue 42): the exposition passes
// `promtool check metrics` (its format, and the naming rules: units in names, counters ending
// in _total), its latency buckets hold the latencies measured, and a real Prometheus on
// loopback, with deploy/prometheus.yml as shipped but for its targets, scrapes two replicas
// and its query API returns each one's request counter.
#include <doctest/doctest.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
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

std::unique_ptr<test::Server> replica() {
  return std::make_unique<test::Server>(
      std::vector<std::string>{"-m", (test::source_dir() / "models/kjv").string()});
}

int completions(int port, int n) {
  int ok = 0;
  for (int i = 0; i < n; i++)
    ok += test::timed_request(port, "POST", "/v1/completions",
                              json{{"prompt", "And God said"}, {"max_tokens", 8},
                                   {"temperature", 0}, {"stream", i % 2 == 1}}.dump())
              .status == 200;
  return ok;
}

// A histogram's cumulative buckets from the exposition: (le, count), +Inf last.
std::vector<std::pair<std::string, double>> buckets(const std::string& text, const std::string& name) {
  std::vector<std::pair<std::string, double>> out;
  const std::regex line(name + R"re(_bucket\{le="([^"]+)"\} (\d+))re");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), line); it != std::sregex_iterator(); ++it)
    out.emplace_back((*it)[1], std::stod((*it)[2]));
  return out;
}

}  // namespace

TEST_CASE("serve's /metrics passes promtool, and its buckets hold the latencies") {
  if (!test::have_program("promtool")) return;
  const test::CliResult config = test::run(
      {"promtool", "check", "config", (test::source_dir() / "deploy/prometheus.yml").string()});
  CHECK_MESSAGE(config.exit_code == 0, config.out << config.err);

  std::unique_ptr<test::Server> server = replica();
  // Every family with samples: completions whole and streamed, a 400 and a 404.
  CHECK(completions(server->port(), 6) == 6);
  CHECK(test::timed_request(server->port(), "POST", "/v1/completions", "{").status == 400);
  CHECK(test::timed_request(server->port(), "GET", "/nothing").status == 404);
  const test::Timed metrics = test::timed_request(server->port(), "GET", "/metrics");
  REQUIRE(metrics.status == 200);
  const test::CliResult check = test::run({"promtool", "check", "metrics"}, {}, metrics.body);
  CAPTURE(metrics.body);
  CHECK_MESSAGE(check.exit_code == 0, check.out << check.err);
  CHECK(check.out + check.err == "");

  // The middle of each latency histogram lies inside its bounds, neither under the first nor
  // over the last: the buckets tell the measured latencies apart.
  for (const char* name :
       {"gpt2vk_time_to_first_token_seconds", "gpt2vk_time_per_output_token_seconds"}) {
    const auto b = buckets(metrics.body, name);
    CAPTURE(name);
    REQUIRE(b.size() > 2);
    REQUIRE(b.back().first == "+Inf");
    const double count = b.back().second;
    CHECK(count > 0);
    CHECK(b.front().second < count / 2);
    CHECK(b[b.size() - 2].second >= count / 2);
    std::string line = std::string(name) + ":";
    for (const auto& [le, n] : b) line += " " + le + ":" + std::to_string(int(n));
    std::printf("%s\n", line.c_str());
  }
}

TEST_CASE("Prometheus scrapes two replicas with deploy/prometheus.yml") {
  if (!test::have_program("prometheus")) return;
  std::unique_ptr<test::Server> one = replica(), two = replica();
  CHECK(completions(one->port(), 3) == 3);
  CHECK(completions(two->port(), 5) == 5);

  // The shipped config, scraping every second the replicas of this test.
  std::string config = test::read_file(test::source_dir() / "deploy/prometheus.yml");
  const std::string targets = "['127.0.0.1:8081', '127.0.0.1:8082']";
  const size_t at = config.find(targets);
  REQUIRE_MESSAGE(at != std::string::npos, "deploy/prometheus.yml has no " << targets);
  config.replace(at, targets.size(),
                 "['127.0.0.1:" + std::to_string(one->port()) + "', '127.0.0.1:" +
                     std::to_string(two->port()) + "']");
  const std::regex interval("scrape_interval: \\w+");
  REQUIRE(std::regex_search(config, interval));
  config = std::regex_replace(config, interval, "scrape_interval: 1s");
  test::TempDir dir;
  test::write_file(dir / "prometheus.yml", config);
  const int port = test::free_port();
  test::Background prometheus(test::Program{
      {"prometheus", "--config.file=" + (dir / "prometheus.yml").string(),
       "--storage.tsdb.path=" + (dir / "data").string(),
       "--web.listen-address=127.0.0.1:" + std::to_string(port)}});

  // Each replica's completions as Prometheus has them, until both are there (at most 30 s).
  const std::string query =
      "/api/v1/query?query=gpt2vk_requests_total%7Bendpoint%3D%22%2Fv1%2Fcompletions%22%2C"
      "status%3D%22200%22%7D";
  std::map<std::string, std::string> got;
  test::Timed r;
  for (int i = 0; i < 150 && got.size() < 2; i++) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    r = test::timed_request(port, "GET", query);
    if (r.status != 200) continue;
    got.clear();
    const json reply = json::parse(r.body);
    for (const json& series : reply["data"]["result"])
      got[series["metric"]["instance"].get<std::string>()] = series["value"][1].get<std::string>();
  }
  CAPTURE(r.status);
  CAPTURE(r.body);
  CHECK(got["127.0.0.1:" + std::to_string(one->port())] == "3");
  CHECK(got["127.0.0.1:" + std::to_string(two->port())] == "5");
}
