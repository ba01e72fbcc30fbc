// gpt2vk serve with an encoder-decoder (tests/seq2seq_folder.h: the Marian fixture with tokenizer
// files): /v1/completions translates the prompt as `gpt2vk seq2seq` does, greedy and beams, on
// the CPU reference and the tests' GPU, with usage and finish_reason right; every hostile request
// a 400 with OpenAI's error object and the server still up; concurrent requests each answered as
// alone.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <nlohmann/json.hpp>
#include <regex>
#include <thread>

#include "model/formats/checkpoint.h"
#include "model/forward/seq2seq.h"
#include "model/generation/seq2seq_generate.h"
#include "model/text/sentencepiece.h"
#include "tests/cli.h"
#include "tests/files.h"
#include "tests/gpu.h"
#include "tests/process.h"
#include "tests/seq2seq_folder.h"

namespace {

using json = nlohmann::json;

const std::string kText = "Hello world, this is a test.";

// What the library computes on the CPU reference for a folder: the source's ids and a search's.
struct Library {
  std::unique_ptr<model::Checkpoint> checkpoint;
  std::unique_ptr<model::Seq2Seq> m;
  std::unique_ptr<model::SentencePieceTokenizer> source, target;
  explicit Library(const std::filesystem::path& dir)
      : checkpoint(model::Checkpoint::load(dir)),
        m(model::make_cpu_seq2seq(*checkpoint, model::Precision::F32)),
        source(model::load_sentencepiece(dir, model::SpmFlavor::Marian)),
        target(model::load_sentencepiece(dir, model::SpmFlavor::Marian, model::SpmSide::Target)) {}
  std::vector<int32_t> ids(const std::string& text, uint32_t beams, uint32_t max_new,
                           uint32_t no_repeat = 0) {
    const std::vector<int32_t> src = source->encode(text);
    if (beams == 1) return model::greedy(*m, src, max_new);
    model::BeamSettings b;
    b.beams = beams, b.max_new_tokens = max_new, b.no_repeat_ngram = no_repeat;
    return model::beam(*m, src, b);
  }
};

// The Marian fixture's folder served on the tests' GPU (the CPU reference without one), fp32,
// and the library beside it.
struct Served {
  test::TempDir dir;
  Library lib;
  test::Server server;
  Served() : lib((test::marian_folder(dir.path()), dir.path())), server(args(dir.path())) {}
  static std::vector<std::string> args(const std::filesystem::path& dir) {
    std::vector<std::string> a{"-m", dir.string(), "--precision", "f32"};
    if (!test::gpu()) a.insert(a.end(), {"--device", "cpu"});
    return a;
  }
};

// The completion's object, after checking the reply and the object's shape.
json completion(const test::HttpReply& r) {
  INFO(r.body);
  REQUIRE(r.status == 200);
  const json j = json::parse(r.body);
  CHECK(j["object"] == "text_completion");
  REQUIRE(j["choices"].size() == 1);
  CHECK(j["usage"]["total_tokens"] ==
        j["usage"]["prompt_tokens"].get<int>() + j["usage"]["completion_tokens"].get<int>());
  return j;
}

// A refusal's error message, after checking its status and OpenAI's error object.
std::string refusal(const test::HttpReply& r, int status = 400) {
  INFO(r.body);
  CHECK(r.status == status);
  const json j = json::parse(r.body);
  REQUIRE(j.contains("error"));
  CHECK(j["error"]["type"].is_string());
  return j["error"]["message"].get<std::string>();
}

}  // namespace

TEST_CASE("serve: an encoder-decoder's completions are what gpt2vk seq2seq prints") {
  REQUIRE(test::on_path("curl"));
  test::TempDir dir;
  test::marian_folder(dir.path());
  const std::string m = dir.path().string();
  Library lib(dir.path());
  const size_t source_tokens = lib.source->encode(kText).size();

  std::vector<std::string> devices{"cpu"};
  if (test::gpu()) devices.push_back("");  // the tests' GPU: beams in slots
  for (const std::string& device : devices) {
    CAPTURE(device);
    std::vector<std::string> on{"-m", m, "--precision", "f32"};
    if (!device.empty()) on.insert(on.end(), {"--device", device});
    test::Server server(on);
    const std::string url = server.url() + "/v1/completions";
    // `gpt2vk seq2seq` on the same device with the same settings: its one line of text.
    auto command = [&](std::vector<std::string> args) {
      args.insert(args.begin(), on.begin(), on.end());
      args.insert(args.begin(), {"seq2seq", "-p", kText});
      const test::CliResult r = test::gpt2vk(args);
      REQUIRE_MESSAGE(r.exit_code == 0, r.err);
      REQUIRE(r.out.back() == '\n');
      return r.out.substr(0, r.out.size() - 1);
    };

    // Greedy to max_tokens: the config's forced eos is the last token, and the limit ended it.
    json j = completion(test::post(url, json{{"prompt", kText}, {"max_tokens", 12}}.dump()));
    CHECK(j["choices"][0]["text"] == command({"-n", "12"}));
    CHECK(j["choices"][0]["finish_reason"] == "length");
    CHECK(j["usage"]["prompt_tokens"] == source_tokens);
    CHECK(j["usage"]["completion_tokens"] == 12);

    // Four beams.
    j = completion(
        test::post(url, json{{"prompt", kText}, {"max_tokens", 12}, {"num_beams", 4}}.dump()));
    CHECK(j["choices"][0]["text"] == command({"-n", "12", "--beams", "4"}));
    CHECK(j["choices"][0]["finish_reason"] == "length");

    // No token twice: the random model runs out of better ones and ends at eos (36 tokens).
    const std::vector<int32_t> ids = lib.ids(kText, 3, 63, 1);
    REQUIRE(ids.size() < 63);
    j = completion(test::post(url, json{{"prompt", json::array({kText})},  // an array of one string
                                        {"max_tokens", 63},
                                        {"num_beams", 3},
                                        {"no_repeat_ngram_size", 1}}
                                       .dump()));
    CHECK(j["choices"][0]["text"] ==
          command({"-n", "63", "--beams", "3", "--no-repeat-ngram", "1"}));
    CHECK(j["choices"][0]["text"] == lib.target->decode(ids));
    CHECK(j["choices"][0]["finish_reason"] == "stop");
    CHECK(j["usage"]["completion_tokens"] == ids.size());

    // Streamed, with the folder's settings (transformers' max_length 20: 19 new tokens): one
    // chunk of OpenAI's, then [DONE].
    const test::HttpReply s = test::post(url, json{{"prompt", kText}, {"stream", true}}.dump());
    REQUIRE(s.status == 200);
    const std::string done = "\n\ndata: [DONE]\n\n";
    REQUIRE(s.body.rfind("data: ", 0) == 0);
    REQUIRE(s.body.size() > done.size());
    REQUIRE(s.body.substr(s.body.size() - done.size()) == done);
    j = json::parse(s.body.substr(6, s.body.size() - 6 - done.size()));
    CHECK(j["choices"][0]["text"] == command({}));
    CHECK(j["usage"]["completion_tokens"] == 19);

    // The source as token ids: the same translation as its text.
    j = completion(
        test::post(url, json{{"prompt", lib.source->encode(kText)}, {"max_tokens", 12}}.dump()));
    CHECK(j["choices"][0]["text"] == command({"-n", "12"}));

    const json models = json::parse(test::get(server.url() + "/v1/models").body);
    CHECK(models["data"][0]["id"] == dir.path().filename().string());
    CHECK(models["data"][0]["max_beams"] == 8);
    CHECK(test::get(server.url() + "/health").status == 200);
    CHECK(test::no_validation_messages({0, "", server.err()}));
    // The first request's log line: tokens and the total time (a search's text comes whole:
    // no first-token time).
    const std::regex logged(
        R"(gpt2vk: POST /v1/completions 200 remote=127\.0\.0\.1:\d+ prompt_tokens=)" +
        std::to_string(source_tokens) +
        R"( completion_tokens=12 total_ms=[0-9.]+ finish_reason=length\n)");
    CHECK_MESSAGE(std::regex_search(server.err(), logged), server.err());
  }
}

TEST_CASE("serve: an encoder-decoder refuses hostile requests and stays up") {
  REQUIRE(test::on_path("curl"));
  test::TempDir dir;
  test::marian_folder(dir.path());
  test::Server server({"-m", dir.path().string(), "--device", "cpu", "--precision", "f32"});
  const std::string url = server.url() + "/v1/completions";
  std::string long_text;
  for (int i = 0; i < 100; i++) long_text += "word ";

  const std::pair<std::string, std::string> bad[] = {
      {R"({"prompt": ""})", "prompt is empty: nothing to translate"},
      {R"({"prompt": []})", "prompt is an empty array of token ids"},
      {R"({"max_tokens": 4})", "prompt is required"},
      {json{{"prompt", long_text}}.dump(), "more than the model's maximum of 64"},
      {std::string("{\"prompt\": \"caf\xC3\"}"), "not valid JSON"},  // invalid UTF-8
      {R"({"prompt": "\ud800"})", "not valid JSON"},                 // a lone surrogate
      {R"({"prompt": "hi", "max_tokens": 0})", "max_tokens must be between 1 and 63, got 0"},
      {R"({"prompt": "hi", "max_tokens": 64})", "max_tokens must be between 1 and 63, got 64"},
      {R"({"prompt": "hi", "max_tokens": 1e300})", "max_tokens must be between 1 and 63"},
      {R"({"prompt": "hi", "max_tokens": "5"})", "max_tokens must be an integer, got a string"},
      {R"({"prompt": "hi", "num_beams": 0})", "num_beams must be between 1 and 8, got 0"},
      {R"({"prompt": "hi", "num_beams": 1000})", "num_beams must be between 1 and 8, got 1000"},
      {R"({"prompt": "hi", "num_beams": 2.5})", "num_beams must be an integer"},
      {R"({"prompt": 7})", "prompt must be a string or an array of token ids, got an integer"},
      {R"({"prompt": {"a": 1}})",
       "prompt must be a string or an array of token ids, got an object"},
      {R"({"prompt": ["a", "b"]})", "batches of prompts are not supported"},
      {R"({"prompt": [1, 2, 64]})",
       "prompt[2] is an integer, not a token id of this model (0 to 63)"},
      {R"({"prompt": [1, -1]})", "prompt[1] is an integer, not a token id"},
      {R"({"prompt": "hi", "n": 2})", "n: one completion per request"},
      {R"({"prompt": "hi", "best_of": 3})", "best_of: one completion per request"},
      {R"({"prompt": "hi", "stream": "yes"})", "stream must be a boolean, got a string"},
      {R"({"prompt": "hi", "logprobs": 2})", "logprobs is not supported"},
      {R"({"prompt": "hi", "echo": true})", "echo is not supported"},
      {R"({"prompt": "hi", "stop": ["."]})", "stop is not supported"},
      {R"({"prompt": "hi", "temperature": "hot"})", "temperature must be a number"},
      {R"({"prompt": "hi", "early_stopping": "soon"})",
       "early_stopping must be true, false or \"never\""},
      {R"({"prompt": "hi", "length_penalty": null, "model": 3})", "model must be a string"},
      {R"({"prompt": "hi")", "not valid JSON"},
      {R"(["hi"])", "must be a JSON object"},
  };
  for (const auto& [body, says] : bad) {
    CAPTURE(body);
    const std::string message = refusal(test::post(url, body));
    CHECK_MESSAGE(message.find(says) != std::string::npos, message);
  }
  // The other endpoints say why not.
  std::string message =
      refusal(test::post(server.url() + "/v1/chat/completions", R"({"messages": []})"), 404);
  CHECK_MESSAGE(message.find("prompt of /v1/completions") != std::string::npos, message);
  message = refusal(test::post(server.url() + "/v1/embeddings", R"({"input": "hi"})"));
  CHECK(message.find("an encoder-decoder") != std::string::npos);

  // Still up, and what it counted.
  const json j =
      completion(test::post(url, R"({"prompt": "hi", "max_tokens": 3, "temperature": 0.7})"));
  CHECK(j["usage"]["completion_tokens"] == 3);
  CHECK(test::get(server.url() + "/health").status == 200);
  const std::string metrics = test::get(server.url() + "/metrics").body;
  CHECK(metrics.find("gpt2vk_requests_total{endpoint=\"/v1/completions\",status=\"400\"} " +
                     std::to_string(std::size(bad))) != std::string::npos);
  CHECK(metrics.find("gpt2vk_completion_tokens_total 3") != std::string::npos);
  CHECK(metrics.find("gpt2vk_queue_length 0") != std::string::npos);
}

TEST_CASE("serve: concurrent encoder-decoder requests are each answered as alone") {
  REQUIRE(test::on_path("curl"));
  Served served;
  Library& lib = served.lib;
  test::Server& server = served.server;
  const std::string url = server.url() + "/v1/completions";

  // Greedy and beams interleaved, on different sources: a request that ran in between must not
  // leave its source or its slots behind.
  const std::vector<std::pair<std::string, uint32_t>> asks = {
      {kText, 1}, {"Another line.", 4}, {"What is this?", 1}, {"in the beginning", 2}};
  std::vector<test::HttpReply> replies(asks.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < asks.size(); i++)
    threads.emplace_back([&, i] {
      replies[i] = test::post(
          url, json{{"prompt", asks[i].first}, {"max_tokens", 10}, {"num_beams", asks[i].second}}
                   .dump());
    });
  for (std::thread& t : threads) t.join();
  for (size_t i = 0; i < asks.size(); i++) {
    CAPTURE(i);
    const json j = completion(replies[i]);
    CHECK(j["choices"][0]["text"] ==
          lib.target->decode(lib.ids(asks[i].first, asks[i].second, 10)));
    CHECK(j["usage"]["prompt_tokens"] == lib.source->encode(asks[i].first).size());
  }
  CHECK(test::no_validation_messages({0, "", server.err()}));
}

TEST_CASE("serve: greedy encoder-decoder requests that wait share a round") {
  // A long beam search holds the model while seven greedy requests arrive: on a GPU they wait,
  // then decode together in one round (a slot and a source each), every one answered as alone,
  // at its own max_tokens. On the CPU reference each round is one request.
  REQUIRE(test::on_path("curl"));
  Served served;
  Library& lib = served.lib;
  test::Server& server = served.server;
  const std::string url = server.url() + "/v1/completions";
  const std::vector<std::string> texts = {
      kText,        "Another line.",        "What is this?", "in the beginning",
      "A cat sat.", "Two more words here.", "the end"};
  // A gauge of /metrics, -1 where it is not there.
  const auto gauge = [&](const char* name) {
    const std::string m = test::get(server.url() + "/metrics").body;
    std::smatch v;
    return std::regex_search(m, v, std::regex(std::string(name) + R"( (\d+))")) ? std::stoi(v[1])
                                                                                : -1;
  };
  test::HttpReply first;
  std::atomic<bool> held{false};
  std::thread hold([&] {
    first = test::post(
        url,
        json{{"prompt", kText}, {"max_tokens", 63}, {"num_beams", 8}, {"early_stopping", "never"}}
            .dump());
    held = true;
  });
  while (!held && gauge("gpt2vk_requests_running") < 1)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  std::vector<test::HttpReply> replies(texts.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < texts.size(); i++)
    threads.emplace_back([&, i] {
      replies[i] = test::post(url, json{{"prompt", texts[i]}, {"max_tokens", 4 + 3 * i}}.dump());
    });
  // Whether two or more of them waited together behind the beam search (about 0.3 s on
  // lavapipe): then they share a round.
  bool waited = false;
  while (!held && !waited) waited = gauge("gpt2vk_queue_length") >= 2;
  for (std::thread& t : threads) t.join();
  hold.join();
  CHECK(completion(first)["choices"][0]["finish_reason"] == "length");
  for (size_t i = 0; i < texts.size(); i++) {
    CAPTURE(i);
    const json j = completion(replies[i]);
    const auto max_new = static_cast<uint32_t>(4 + 3 * i);
    CHECK(j["choices"][0]["text"] == lib.target->decode(lib.ids(texts[i], 1, max_new)));
    CHECK(j["usage"]["completion_tokens"] == lib.ids(texts[i], 1, max_new).size());
  }
  const std::string m = test::get(server.url() + "/metrics").body;
  std::smatch rounds, requests;
  REQUIRE(std::regex_search(m, rounds, std::regex(R"(gpt2vk_seq2seq_rounds_total (\d+))")));
  REQUIRE(
      std::regex_search(m, requests, std::regex(R"(gpt2vk_seq2seq_round_requests_total (\d+))")));
  CHECK(std::stoi(requests[1]) == 8);
  INFO(m);
  if (!test::gpu())
    CHECK(std::stoi(rounds[1]) == 8);
  else if (waited)
    CHECK(std::stoi(rounds[1]) < 8);
  else
    MESSAGE("the beam search ended before two greedy requests waited behind it: none to share");
  CHECK(test::no_validation_messages({0, "", server.err()}));
}

// A T5 folder (make-model's tiny gated shape, one spiece.model for both sides): greedy and beam
// completions are the library's.
TEST_CASE("serve: a T5 folder's completions are the library's") {
  REQUIRE(test::on_path("curl"));
  test::TempDir dir;
  const std::string m = dir.path().string();
  const test::CliResult made = test::gpt2vk(
      {"make-model", "--arch", "t5", "--shape", "tiny-gated", "--dtype", "f32", "-o", m});
  REQUIRE_MESSAGE(made.exit_code == 0, made.err);
  auto ck = model::Checkpoint::load(dir.path());
  auto s2s = model::make_cpu_seq2seq(*ck, model::Precision::F32);
  const auto tok = model::load_sentencepiece(dir.path(), model::SpmFlavor::T5);
  const std::vector<int32_t> src = tok->encode(kText);
  model::BeamSettings b;
  b.beams = 4, b.max_new_tokens = 10;
  const std::string greedy = tok->decode(model::greedy(*s2s, src, 10));
  const std::string beams = tok->decode(model::beam(*s2s, src, b));
  std::vector<std::string> on{"-m", m, "--precision", "f32"};
  if (!test::gpu()) on.insert(on.end(), {"--device", "cpu"});
  test::Server server(on);
  const std::string url = server.url() + "/v1/completions";
  json j = completion(test::post(url, json{{"prompt", kText}, {"max_tokens", 10}}.dump()));
  CHECK(j["choices"][0]["text"] == greedy);
  CHECK(j["usage"]["prompt_tokens"] == src.size());
  j = completion(test::post(url, json{{"prompt", kText}, {"max_tokens", 10}, {"num_beams", 4}}.dump()));
  CHECK(j["choices"][0]["text"] == beams);
}
