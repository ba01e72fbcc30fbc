// gpt2vk serve with an encoder (a BERT folder): OpenAI's /v1/embeddings from curl and from the
// official openai client (npm), each embedding against what sentence-transformers computed for
// the same texts (tests/data/hf/bert-st), every refusal against OpenAI's error object.
#include <doctest/doctest.h>
#include <signal.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <regex>

#include "tests/ci.h"
#include "tests/cli.h"
#include "tests/files.h"
#include "tests/hf_expected.h"
#include "tests/process.h"

namespace {

using json = nlohmann::json;

std::string hf(const char* name) {
  return (test::source_dir() / "tests/data/hf" / name).string();
}

double cosine(const std::vector<double>& a, const std::vector<double>& b) {
  double dot = 0, na = 0, nb = 0;
  for (size_t i = 0; i < a.size(); i++) dot += a[i] * b[i], na += a[i] * a[i], nb += b[i] * b[i];
  return dot / std::sqrt(na * nb);
}

// n words "a a a ...": n tokens, and [CLS] and [SEP].
std::string words(int n) {
  std::string s = "a";
  for (int i = 1; i < n; i++) s += " a";
  return s;
}


}  // namespace

TEST_CASE("serve: /v1/embeddings from an encoder, as sentence-transformers computes them") {
  REQUIRE(test::on_path("curl"));
  test::Server server({"-m", hf("bert-st"), "--precision", "f32"});
  const std::string url = server.url() + "/v1/embeddings";
  const auto texts = json::parse(test::read_file(hf("bert-st") + "/expected.json"))["texts"];
  const auto e = test::read_expected(hf("bert-st") + "/expected.safetensors");
  size_t tokens = 0;
  for (double m : e.at("attention_mask").values) tokens += m != 0;

  const auto [status, body] = test::post(url, json{{"input", texts}, {"model", "x"}}.dump());
  REQUIRE_MESSAGE(status == 200, body);
  const json r = json::parse(body);
  CHECK(r["object"] == "list");
  CHECK(r["usage"]["prompt_tokens"] == tokens);
  REQUIRE(r["data"].size() == texts.size());
  std::vector<std::vector<double>> got;
  for (size_t i = 0; i < texts.size(); i++) {
    CAPTURE(i);
    CHECK(r["data"][i]["index"] == i);
    got.push_back(r["data"][i]["embedding"].get<std::vector<double>>());
    CHECK(cosine(got[i], e.at("embeddings").row(i)) >= 0.99999);
  }

  // The first text as the ids the model reads gives the same embedding.
  std::vector<int64_t> ids;
  for (size_t t = 0; t < e.at("input_ids").shape[1]; t++)
    if (e.at("attention_mask").row(0)[t] != 0) ids.push_back(static_cast<int64_t>(e.at("input_ids").row(0)[t]));
  const auto [s2, b2] = test::post(url, json{{"input", ids}}.dump());
  REQUIRE_MESSAGE(s2 == 200, b2);
  CHECK(json::parse(b2)["data"][0]["embedding"].get<std::vector<double>>() == got[0]);

  // The official client asks for base64 and decodes it: the same floats, bit for bit.
  if (test::on_path("node") &&
      std::filesystem::exists(test::source_dir() / "tests/node/node_modules/openai/package.json")) {
    const test::CliResult c = test::run(
        {"node", (test::source_dir() / "tests/node/openai_embeddings.mjs").string(),
         json{{"base_url", server.url()}, {"input", texts}}.dump()});
    REQUIRE_MESSAGE(c.exit_code == 0, c.err);
    const json o = json::parse(c.out);
    for (size_t i = 0; i < texts.size(); i++) {
      CHECK(o["float"][i].get<std::vector<double>>() == got[i]);
      const std::vector<double> b = o["base64"][i].get<std::vector<double>>();
      REQUIRE(b.size() == got[i].size());
      for (size_t k = 0; k < b.size(); k++) CHECK(static_cast<float>(b[k]) == static_cast<float>(got[i][k]));
    }
    CHECK(o["usage"]["prompt_tokens"] == tokens);
  } else if (test::in_ci()) {
    FAIL_CHECK("node or the openai npm client is missing: run scripts/setup.sh --tests");
  }

  // Refusals: OpenAI's error object naming the field, status 400.
  const std::pair<json, std::string> bad[] = {
      {{{"input", json::array()}}, "input is an empty array"},
      {{{"input", {"ok", ""}}}, "input[1] is an empty string"},
      {{{"input", {"ok", 3.5}}}, "input[1] must be a string or an array of token ids"},
      {{{"input", std::vector<int>{1, 2, 500}}}, "not a token id in [0, 111)"},
      {{{"input", words(70)}}, "input is 72 tokens, more than the model's maximum of 64"},
      {{{"input", std::vector<std::string>(2049, "a")}}, "at most 2048 per request"},
      {{{"input", "a"}, {"dimensions", 8}}, "dimensions is not supported"},
      {{{"input", "a"}, {"encoding_format", "int8"}}, "encoding_format must be"},
      {{{"prompt", "a"}}, "input is required"},
  };
  for (const auto& [request, message] : bad) {
    CAPTURE(message);
    const auto [s, b] = test::post(url, request.dump());
    CHECK(s == 400);
    CHECK_MESSAGE(b.find(message) != std::string::npos, b);
  }
  const auto [s3, b3] = test::post(server.url() + "/v1/completions", R"({"prompt": "hi"})");
  CHECK(s3 == 400);
  CHECK(b3.find("use /v1/embeddings") != std::string::npos);
  const auto [s5, b5] = test::post(server.url() + "/v1/chat/completions",
                                   R"({"messages": [{"role": "user", "content": "hi"}]})");
  CHECK(s5 == 404);
  CHECK(b5.find("an encoder (BERT): it has no next token to chat with; use /v1/embeddings") !=
        std::string::npos);
  const auto [s4, b4] = test::post(url, "{\"input\": [");
  CHECK(s4 == 400);
  CHECK(b4.find("not valid JSON") != std::string::npos);

  // The request log: the first request's inputs and tokens (tests/test_serve_log.cpp has the rest).
  CHECK(server.stop(SIGTERM) == 0);
  const std::string err = server.err();
  CHECK_MESSAGE(err.find("gpt2vk: POST /v1/embeddings 200 remote=127.0.0.1:") != std::string::npos,
                err);
  CHECK_MESSAGE(err.find(" inputs=" + std::to_string(texts.size()) +
                         " tokens=" + std::to_string(tokens) + "\n") != std::string::npos,
                err);
}

// Requests that arrive while the encoder runs are encoded together in its next round
// (apps/serve/encode_queue.h), and each is answered with the bits it gets alone. Eight requests
// of 1 to 60 tokens (the short ones are where a pass of their own would differ) are sent while
// a request of 2,048 texts holds the encoder; without the queue they take a round each. How
// many rounds they share depends on when they arrive (on a quiet machine one; under the
// sanitizers and CI's load it was three), so this asks only that some shared one; the rounds
// themselves are test_encode_queue.cpp's, where the test decides who waits.
TEST_CASE("serve: embeddings requests that wait together are encoded together, each as alone") {
  REQUIRE(test::on_path("curl"));
  test::Server server({"-m", hf("bert-st"), "--precision", "f32"});
  const std::string url = server.url() + "/v1/embeddings";
  test::TempDir dir;
  const int lengths[] = {1, 2, 3, 6, 7, 12, 30, 60};
  const size_t n = std::size(lengths);
  const auto curl = [&](const std::string& name) {
    return "curl -sS -H 'Content-Type: application/json' --data-binary @" + (dir / name).string() +
           " " + url + " > " + (dir / (name + ".out")).string();
  };
  const auto embedding = [&](size_t i) {
    const json r = json::parse(test::read_file(dir / (std::to_string(i) + ".out")));
    return r.at("data").at(0).at("embedding").get<std::vector<double>>();
  };
  std::vector<std::vector<double>> alone;
  for (size_t i = 0; i < n; i++) {
    test::write_file(dir / std::to_string(i), json{{"input", words(lengths[i])}}.dump());
    REQUIRE(test::run({"sh", "-c", curl(std::to_string(i))}).exit_code == 0);
    alone.push_back(embedding(i));
  }
  test::write_file(dir / "big",
                   json{{"input", std::vector<std::string>(2048, words(60))}}.dump());
  // Rounds and the requests they encoded so far, from /metrics.
  const auto rounds = [&] {
    const std::string m = test::get(server.url() + "/metrics").body;
    std::smatch r, q;
    REQUIRE(std::regex_search(m, r, std::regex(R"(gpt2vk_encode_rounds_total (\d+))")));
    REQUIRE(std::regex_search(m, q, std::regex(R"(gpt2vk_encode_round_requests_total (\d+))")));
    return std::make_pair(std::stoi(r[1]), std::stoi(q[1]));
  };
  const auto before = rounds();
  CHECK(before == std::make_pair(int(n), int(n)));  // one at a time: a round each
  std::string all = curl("big") + " & sleep 0.5; ";
  for (size_t i = 0; i < n; i++) all += curl(std::to_string(i)) + " & ";
  REQUIRE(test::run({"sh", "-c", all + "wait"}).exit_code == 0);
  const auto after = rounds();
  CHECK(after.second - before.second == int(n) + 1);
  CHECK(after.first - before.first <= int(n));  // 9 requests in fewer rounds
  for (size_t i = 0; i < n; i++) {
    CAPTURE(lengths[i]);
    CHECK(embedding(i) == alone[i]);
  }
  const json big = json::parse(test::read_file(dir / "big.out"));
  REQUIRE(big.at("data").size() == 2048);
  CHECK(big["data"][2047]["embedding"].get<std::vector<double>>() == alone[n - 1]);
  CHECK(server.stop(SIGTERM) == 0);
}

TEST_CASE("serve: a decoder refuses /v1/embeddings") {
  REQUIRE(test::on_path("curl"));
  test::Server server({"-m", (test::source_dir() / "tests/data/models/gpt2-tiny").string()});
  const auto [status, body] = test::post(server.url() + "/v1/embeddings", R"({"input": "hi"})");
  CHECK(status == 400);
  CHECK(body.find("needs an encoder") != std::string::npos);
}
