// gpt2vk serve's request log (issue 36): the line each request gets on stderr, as text and as
// JSON (--log-format json), from a server driven with curl: the fields an operator needs with
// values that fit the request, a refusal with its status, and a hostile path that cannot forge
// a line. The line's formatting is checked as a unit too (apps/serve/request_log.cpp).
#include <doctest/doctest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <thread>

#include "apps/serve/request_log.h"
#include "model/text/utf8.h"
#include "tests/cli.h"
#include "tests/files.h"
#include "tests/process.h"

namespace {

using json = nlohmann::json;

// The lines of the server's stderr once `n` of them match `request` (the logger writes a
// request's line just after its response, so curl may return first), at most 60 s.
std::vector<std::string> lines_once(const test::Server& server, const std::regex& request,
                                    size_t n) {
  std::vector<std::string> lines;
  for (int tries = 0; tries < 1200; tries++) {
    lines.clear();
    std::istringstream in(server.err());
    size_t found = 0;
    for (std::string line; std::getline(in, line);) {
      lines.push_back(line);
      found += std::regex_search(line, request);
    }
    if (found >= n) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return lines;
}

// The requests both formats log: a completion, a streamed one, a refusal, a hostile path.
const std::string kPrompt = "And God said";  // 12 tokens of the byte-level model
void send_requests(const test::Server& server) {
  const std::string url = server.url() + "/v1/completions";
  const json whole = {{"prompt", kPrompt}, {"max_tokens", 7}, {"temperature", 0}};
  CHECK(test::post(url, whole.dump()).status == 200);
  const json stream = {{"prompt", kPrompt}, {"max_tokens", 5}, {"stream", true}};
  const auto streamed = test::post(url, stream.dump());
  CHECK(streamed.body.find("[DONE]") != std::string::npos);
  CHECK(test::post(url, R"({"prompt": ""})").status == 400);
  // Invalid UTF-8, a newline and a space once httplib decodes the path.
  CHECK(test::get(server.url() + "/v1/%ff%0agpt2vk:%20POST%20forged").status == 404);
}

}  // namespace

TEST_CASE("serve's request log as text: one line a request, with its figures") {
  REQUIRE(test::on_path("curl"));
  test::Server server({});
  send_requests(server);
  const std::vector<std::string> lines = lines_once(server, std::regex("^gpt2vk: (GET|POST) "), 4);
  const std::regex completion(
      R"(gpt2vk: POST /v1/completions 200 remote=127\.0\.0\.1:\d+ prompt_tokens=(\d+) )"
      R"(completion_tokens=(\d+) queue_ms=([0-9.]+) ttft_ms=([0-9.]+) total_ms=([0-9.]+) )"
      R"(tokens_per_s=([0-9.]+) finish_reason=length)");
  std::vector<std::smatch> done;
  bool refused = false, hostile = false;
  for (const std::string& line : lines) {
    CAPTURE(line);
    CHECK(!model::find_invalid_utf8(line));
    CHECK(line.rfind("gpt2vk: ", 0) == 0);
    CHECK(line.rfind("gpt2vk: POST forged", 0) != 0);  // the path forged no line of its own
    std::smatch m;
    if (std::regex_match(line, m, completion)) done.push_back(m);
    refused |= std::regex_match(
        line, std::regex(R"(gpt2vk: POST /v1/completions 400 remote=127\.0\.0\.1:\d+)"));
    hostile |= line.rfind("gpt2vk: GET /v1/\xef\xbf\xbd%0Agpt2vk:%20POST%20forged 404 "
                          "remote=127.0.0.1:", 0) == 0;
  }
  REQUIRE(done.size() == 2);  // the whole and the streamed completion, in either order
  CHECK(std::stoul(done[0][2]) + std::stoul(done[1][2]) == 7 + 5);  // their max_tokens
  for (const std::smatch& m : done) {
    CAPTURE(m.str(0));
    CHECK(std::stoul(m[1]) == kPrompt.size());
    CHECK((std::stoul(m[2]) == 7 || std::stoul(m[2]) == 5));
    const double queue = std::stod(m[3]), ttft = std::stod(m[4]), total = std::stod(m[5]);
    CHECK(queue <= ttft);
    CHECK(ttft <= total);
    CHECK(total < 60'000);
    CHECK(std::stod(m[6]) > 0);
  }
  CHECK(refused);
  CHECK(hostile);
  CHECK(server.stop(SIGTERM) == 0);
}

TEST_CASE("serve --log-format json: every request line is an object with stable keys") {
  REQUIRE(test::on_path("curl"));
  test::Server server({"--log-format", "json"});
  send_requests(server);
  const std::vector<std::string> lines = lines_once(server, std::regex("^\\{"), 4);
  std::vector<json> requests;
  for (const std::string& line : lines) {
    CAPTURE(line);
    if (line.rfind("{", 0) != 0) {  // the server's own messages stay text
      CHECK(line.rfind("gpt2vk: ", 0) == 0);
      continue;
    }
    const json j = json::parse(line);  // throws, failing the test, unless it parses
    for (const char* key : {"ts", "method", "path", "status", "remote"})
      CHECK_MESSAGE(j.contains(key), key);
    CHECK(std::regex_match(j["ts"].get<std::string>(),
                           std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)")));
    CHECK(line.rfind(R"({"ts":")", 0) == 0);  // the keys in a fixed order, ts first
    requests.push_back(j);
  }
  REQUIRE(requests.size() == 4);
  // By status: the lines of requests sent one after another may still come in another order.
  std::sort(requests.begin(), requests.end(), [](const json& a, const json& b) {
    return std::make_pair(a["status"].get<int>(), a.value("completion_tokens", 0)) <
           std::make_pair(b["status"].get<int>(), b.value("completion_tokens", 0));
  });
  for (size_t i = 0; i < 2; i++) {
    const json& j = requests[i];
    CAPTURE(j.dump());
    CHECK(j["method"] == "POST");
    CHECK(j["path"] == "/v1/completions");
    CHECK(j["status"] == 200);
    CHECK(j["prompt_tokens"] == kPrompt.size());
    CHECK(j["completion_tokens"] == (i == 0 ? 5 : 7));  // max_tokens
    CHECK(j["finish_reason"] == "length");
    CHECK(j["queue_ms"].get<double>() <= j["ttft_ms"].get<double>());
    CHECK(j["ttft_ms"].get<double>() <= j["total_ms"].get<double>());
    CHECK(j["tokens_per_s"].get<double>() > 0);
  }
  CHECK(requests[2]["status"] == 400);
  CHECK(!requests[2].contains("completion_tokens"));
  CHECK(requests[3]["status"] == 404);
  CHECK(requests[3]["path"] == "/v1/\xef\xbf\xbd\ngpt2vk: POST forged");
  CHECK(server.stop(SIGTERM) == 0);

  const test::CliResult bad = test::gpt2vk({"serve", "--log-format", "xml"});
  CHECK(bad.exit_code != 0);
  CHECK(bad.err.find("--log-format: xml not in {text,json}") != std::string::npos);
}

TEST_CASE("request log lines: both formats, every field") {
  app::RequestRecord r;
  r.method = "POST", r.path = "/v1/completions", r.status = 200;
  r.remote_addr = "10.0.0.7", r.remote_port = 5123;
  // 9 tokens, the first at 40 ms, the last at 120: 8 more in 80 ms, 100 a second.
  r.completion = app::CompletionFigures{12, 9, 1.25, 40.0, 120.0, "stop"};
  const std::chrono::system_clock::time_point at(std::chrono::milliseconds(1'795'755'420'007));
  CHECK(app::request_line(r, app::LogFormat::Text, at) ==
        "gpt2vk: POST /v1/completions 200 remote=10.0.0.7:5123 prompt_tokens=12 "
        "completion_tokens=9 queue_ms=1.3 ttft_ms=40.0 total_ms=120.0 tokens_per_s=100.0 "
        "finish_reason=stop");
  CHECK(app::request_line(r, app::LogFormat::Json, at) ==
        R"({"ts":"2026-11-27T04:57:00.007Z","method":"POST","path":"/v1/completions",)"
        R"("status":200,"remote":"10.0.0.7:5123","prompt_tokens":12,"completion_tokens":9,)"
        R"("queue_ms":1.3,"ttft_ms":40.0,"total_ms":120.0,"tokens_per_s":100.0,)"
        R"("finish_reason":"stop"})");
  // No token generated: no first-token time, no rate. An IPv6 client in brackets.
  r.completion = app::CompletionFigures{3, 0, 0.5, std::nullopt, 80.0, "length"};
  r.remote_addr = "::1";
  CHECK(app::request_line(r, app::LogFormat::Text, at) ==
        "gpt2vk: POST /v1/completions 200 remote=[::1]:5123 prompt_tokens=3 completion_tokens=0 "
        "queue_ms=0.5 total_ms=80.0 finish_reason=length");
  // Embeddings; and a request line that did not parse (no method, no path, no address).
  r.completion.reset();
  r.embeddings = app::EmbeddingFigures{2, 17};
  r.path = "/v1/embeddings";
  CHECK(app::request_line(r, app::LogFormat::Text, at) ==
        "gpt2vk: POST /v1/embeddings 200 remote=[::1]:5123 inputs=2 tokens=17");
  const app::RequestRecord unparsed{"", "", 400, "", 0, {}, {}};
  CHECK(app::request_line(unparsed, app::LogFormat::Text, at) == "gpt2vk: - - 400 remote=-");
  // A hostile path: invalid UTF-8 as U+FFFD; in text, spaces, controls and '%' encoded.
  app::RequestRecord h{"GET", "/a b\r\n\x01%\xff", 404, "127.0.0.1", 1, {}, {}};
  CHECK(app::request_line(h, app::LogFormat::Text, at) ==
        "gpt2vk: GET /a%20b%0D%0A%01%25\xef\xbf\xbd 404 remote=127.0.0.1:1");
  CHECK(json::parse(app::request_line(h, app::LogFormat::Json, at))["path"] ==
        "/a b\r\n\x01%\xef\xbf\xbd");
}
