// gpt2vk serve from outside, as its clients see it: curl and the official openai client (npm)
// against a server on a free loopback port, each answer checked against the commands that
// compute the same thing (generate --temp 0, logits), every refusal against OpenAI's error
// object, and the server's stderr against validation messages.
#include <doctest/doctest.h>
#include <signal.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>
#include <thread>

#include "model/formats/checkpoint.h"
#include "model/forward/cpu_model.h"
#include "model/generation/sampler.h"
#include "model/text/tokenizer.h"
#include "tests/ci.h"
#include "tests/cli.h"
#include "tests/files.h"
#include "tests/process.h"

namespace {

using json = nlohmann::json;

struct Reply {
  int status = 0;
  std::string headers, body;
};

// One request with curl: -i gives the status line and headers before the body.
Reply request(const std::string& url, const std::vector<std::string>& extra = {}) {
  std::vector<std::string> argv = {"curl", "-sS", "-i", "--max-time", "300"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  argv.push_back(url);
  const test::CliResult r = test::run(argv);
  INFO("curl: " << r.err);
  REQUIRE(r.exit_code == 0);
  Reply reply;
  std::string rest = r.out;
  // Skip interim "HTTP/1.1 100 Continue" blocks (curl sends Expect for large bodies).
  size_t end = rest.find("\r\n\r\n");
  while (rest.rfind("HTTP/1.1 100", 0) == 0 && end != std::string::npos) {
    rest = rest.substr(end + 4);
    end = rest.find("\r\n\r\n");
  }
  REQUIRE(end != std::string::npos);
  reply.headers = rest.substr(0, end);
  reply.body = rest.substr(end + 4);
  reply.status = std::stoi(reply.headers.substr(reply.headers.find(' ') + 1, 3));
  return reply;
}

Reply post(const test::Server& s, const std::string& body, std::vector<std::string> extra = {}) {
  test::TempDir dir;
  test::write_file(dir / "body", body);  // as bytes: invalid UTF-8 stays invalid
  extra.insert(extra.end(), {"-H", "Content-Type: application/json", "--data-binary",
                             std::string("@").append((dir / "body").string())});
  return request(s.url() + "/v1/completions", extra);
}

// The error object's message, after checking the object's shape.
std::string error_message(const Reply& r) {
  INFO(r.body);
  const json j = json::parse(r.body);
  REQUIRE(j.contains("error"));
  CHECK(j["error"]["type"].is_string());
  CHECK(j["error"].contains("param"));
  CHECK(j["error"].contains("code"));
  return j["error"]["message"].get<std::string>();
}

// The texts of a server-sent-events body, joined, and whether it ended with [DONE].
std::pair<std::string, bool> stream_text(const std::string& body, json* last = nullptr) {
  std::string text;
  bool done = false;
  for (const std::string& data : test::sse_data(body)) {
    if (data == "[DONE]") {
      done = true;
      continue;
    }
    const json j = json::parse(data);
    if (j.contains("error")) {
      if (last) *last = j;
      continue;
    }
    text += j["choices"][0]["text"].get<std::string>();
    if (last) *last = j;
  }
  return {text, done};
}

// What `gpt2vk generate --temp 0` continues `prompt` with.
std::string generated(const std::string& prompt, int n) {
  const test::CliResult r =
      test::gpt2vk({"generate", "-p", prompt, "-n", std::to_string(n), "--temp", "0"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  REQUIRE(r.out.size() > prompt.size());
  return r.out.substr(prompt.size(), r.out.size() - prompt.size() - 1);  // the newline after
}


// The node client is there (setup.sh installs it); in CI its absence fails the test.
bool have_openai_client() {
  const bool there = test::on_path("node") &&
                     std::filesystem::exists(test::source_dir() / "tests/node/node_modules/openai/package.json");
  if (!there) {
    if (test::in_ci()) FAIL_CHECK("node or the openai npm client is missing: run scripts/setup.sh --tests");
    else MESSAGE("SKIPPED: node or the openai npm client is missing (scripts/setup.sh --tests installs them)");
  }
  return there;
}

}  // namespace

TEST_CASE("serve: text, streams and echo log-probabilities equal the commands'") {
  REQUIRE(test::on_path("curl"));
  test::Server server({});
  const std::string prompt = "And God said";
  const int n = 24;
  const std::string expected = generated(prompt, n);

  // curl, whole and streamed.
  const json greedy = {{"prompt", prompt}, {"max_tokens", n}, {"temperature", 0}};
  const Reply whole = post(server, greedy.dump());
  REQUIRE(whole.status == 200);
  const json w = json::parse(whole.body);
  CHECK(w["object"] == "text_completion");
  CHECK(w["choices"][0]["text"] == expected);
  CHECK(w["choices"][0]["finish_reason"] == "length");
  CHECK(w["usage"]["completion_tokens"] == n);
  CHECK(w["usage"]["prompt_tokens"] == prompt.size());  // a byte-level model
  CHECK(w["usage"]["total_tokens"] == prompt.size() + n);
  json stream_body = greedy;
  stream_body["stream"] = true;
  const Reply streamed = post(server, stream_body.dump(), {"-N"});
  REQUIRE(streamed.status == 200);
  CHECK(streamed.headers.find("text/event-stream") != std::string::npos);
  json last;
  const auto [text, done] = stream_text(streamed.body, &last);
  CHECK(text == expected);
  CHECK(done);
  CHECK(last["choices"][0]["finish_reason"] == "length");

  // A stop string: the text up to it, finish_reason "stop"; the streamed text the same.
  const std::string stop = expected.substr(5, 3);
  json stopping = greedy;
  stopping["stop"] = json::array({stop, "\x01never"});
  const json s = json::parse(post(server, stopping.dump()).body);
  CHECK(s["choices"][0]["text"] == expected.substr(0, expected.find(stop)));
  CHECK(s["choices"][0]["finish_reason"] == "stop");
  stopping["stream"] = true;
  CHECK(stream_text(post(server, stopping.dump(), {"-N"}).body).first ==
        expected.substr(0, expected.find(stop)));

  // echo + logprobs on token ids: the log-softmax of `gpt2vk logits` on the same ids.
  test::TempDir dir;
  const std::vector<int32_t> ids = {65, 110, 100, 32, 116, 104, 101, 114, 101, 32, 119, 97, 115};
  test::write_file(dir / "ids", std::string_view(reinterpret_cast<const char*>(ids.data()), ids.size() * 4));
  const test::CliResult lr = test::gpt2vk(
      {"logits", "--ids", (dir / "ids").string(), "-o", (dir / "logits").string()});
  REQUIRE(lr.exit_code == 0);
  const std::string raw = test::read_file(dir / "logits");
  const size_t V = raw.size() / 4 / ids.size();
  std::vector<float> logits(raw.size() / 4);
  std::memcpy(logits.data(), raw.data(), raw.size());
  std::vector<double> want = {0};  // the first token has none
  for (size_t t = 1; t < ids.size(); t++) {
    const float* row = logits.data() + (t - 1) * V;
    double top = -INFINITY, sum = 0;
    for (size_t v = 0; v < V; v++) top = std::max(top, double(row[v]));
    for (size_t v = 0; v < V; v++) sum += std::exp(double(row[v]) - top);
    want.push_back(double(row[ids[t]]) - top - std::log(sum));
  }
  const json echo = json::parse(
      post(server, json{{"prompt", ids}, {"max_tokens", 0}, {"echo", true}, {"logprobs", 3}}.dump()).body);
  const json& lp = echo["choices"][0]["logprobs"];
  CHECK(echo["choices"][0]["text"] == "And there was");
  REQUIRE(lp["token_logprobs"].size() == ids.size());
  CHECK(lp["token_logprobs"][0].is_null());
  for (size_t t = 1; t < ids.size(); t++) {
    CAPTURE(t);
    CHECK(lp["token_logprobs"][t].get<double>() == doctest::Approx(want[t]).epsilon(1e-12));
    CHECK(lp["top_logprobs"][t].size() == 3);
  }

  // The official openai client: the same texts, eight at once each as alone, a refusal.
  if (have_openai_client()) {
    const std::vector<std::string> prompts = {"In the beginning", "And the LORD", "Blessed are",
                                              "Thou shalt", "And it came to pass", "The heavens",
                                              "Behold", "For God so"};
    const json cfg = {{"base_url", server.url()}, {"prompt", prompt}, {"ids", ids},
                      {"prompts", prompts},       {"max_tokens", n}};
    const test::CliResult r = test::run(
        {"node", (test::source_dir() / "tests/node/openai_client.mjs").string(), cfg.dump()});
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    const json o = json::parse(r.out);
    CHECK(o["models"] == json::array({"kjv"}));
    CHECK(o["text"] == expected);
    CHECK(o["finish_reason"] == "length");
    CHECK(o["streamed"] == expected);
    CHECK(o["chunks"].get<int>() > 1);
    CHECK(o["echo_text"] == "And there was");
    for (size_t t = 1; t < ids.size(); t++)
      CHECK(o["echo_logprobs"][t].get<double>() == doctest::Approx(want[t]).epsilon(1e-12));
    for (size_t i = 0; i < prompts.size(); i++) {
      CAPTURE(prompts[i]);
      CHECK(o["eight"][i] == generated(prompts[i], n));
    }
    CHECK(o["error"]["status"] == 400);
    CHECK(o["error"]["code"] == "context_length_exceeded");
    CHECK(o["error"]["param"] == "max_tokens");
  }
  CHECK(server.stop(SIGTERM) == 0);
  CHECK(test::no_validation_messages({0, "", server.err()}));
}

TEST_CASE("serve: penalties are generate's, counted where OpenAI and llama.cpp count them") {
  REQUIRE(test::on_path("curl"));
  // The CPU reference on both sides: the step-by-step reference below gets the same bits.
  test::Server server({"--device", "cpu"});
  const std::string prompt = "And God said";
  const int n = 48;
  auto completion = [&](json body) {
    body.update({{"prompt", prompt}, {"max_tokens", n}, {"temperature", 0}});
    const Reply r = post(server, body.dump());
    INFO(r.body);
    REQUIRE(r.status == 200);
    return json::parse(r.body)["choices"][0]["text"].get<std::string>();
  };
  auto generate = [&](std::vector<std::string> flags) {
    std::vector<std::string> args = {"generate", "-p", prompt, "-n", std::to_string(n), "--temp",
                                     "0", "--device", "cpu"};
    args.insert(args.end(), flags.begin(), flags.end());
    const test::CliResult r = test::gpt2vk(args);
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    return r.out.substr(prompt.size(), r.out.size() - prompt.size() - 1);
  };
  const std::string plain = generate({});

  // llama.cpp-server's repeat_penalty over the last repeat_last_n of prompt and completion:
  // generate's flags, the same text.
  const std::string repeated = completion({{"repeat_penalty", 1.5}, {"repeat_last_n", 16}});
  CHECK(repeated != plain);
  CHECK(repeated == generate({"--repeat-penalty", "1.5", "--repeat-last-n", "16"}));

  // OpenAI's presence and frequency penalties count the completion's tokens only; generate's
  // count the prompt too. Both, step by step on the CPU reference with the sampler: the one
  // that counts the prompt is generate's text (so the reference is right), the other the
  // server's, and the two differ (so the test tells them apart).
  auto ckpt = model::Checkpoint::load(test::source_dir() / "models/kjv");
  auto tok = model::load_tokenizer(test::source_dir() / "models/kjv", ckpt->config().tokenizer);
  auto cpu = model::make_cpu_model(*ckpt, model::Precision::F16);
  model::SamplerOptions o{0.0f, 0, 1.0f, 0};
  o.presence_penalty = 0.7f;
  o.frequency_penalty = 0.3f;
  auto reference = [&](bool count_prompt) {
    const std::vector<int32_t> ids = tok->encode(prompt);
    std::vector<int32_t> seq = ids;
    model::Sampler sampler(o);
    cpu->reset();
    model::Candidates c = cpu->next(seq, 0);
    std::string text;
    for (int i = 0; i < n; i++) {
      const std::span<const int32_t> counted =
          count_prompt ? std::span<const int32_t>(seq) : std::span(seq).subspan(ids.size());
      const int32_t id = sampler.pick(c, {{}, counted});
      seq.push_back(id);
      text += tok->token_bytes(id);
      c = cpu->next(std::span(&seq.back(), 1), 0);
    }
    return text;
  };
  const std::string openai = reference(false), with_prompt = reference(true);
  REQUIRE(openai != with_prompt);
  CHECK(with_prompt ==
        generate({"--presence-penalty", "0.7", "--frequency-penalty", "0.3", "--repeat-last-n",
                  "-1"}));
  CHECK(completion({{"presence_penalty", 0.7}, {"frequency_penalty", 0.3}}) == openai);

  // Out of range or of the wrong type: a 400 naming the field.
  const std::vector<std::pair<json, std::string>> bad = {
      {{{"presence_penalty", 2.5}}, "presence_penalty must be in [-2.0, 2.0], got 2.5"},
      {{{"frequency_penalty", "lots"}}, "frequency_penalty must be a number, got a string"},
      {{{"repeat_penalty", 0}}, "repeat_penalty must be a number greater than 0, got 0"},
      {{{"repeat_penalty", -1.5}}, "repeat_penalty must be a number greater than 0, got -1.5"},
      {{{"repeat_last_n", -2}}, "repeat_last_n must be between -1 and 2147483647, got -2"},
  };
  for (const auto& [fields, says] : bad) {
    json body = fields;
    body["prompt"] = prompt;
    CAPTURE(body.dump());
    const Reply r = post(server, body.dump());
    CHECK(r.status == 400);
    CHECK(error_message(r) == says);
    CHECK(json::parse(r.body)["error"]["param"] == fields.begin().key());
  }
  CHECK(server.stop(SIGTERM) == 0);
}

TEST_CASE("serve: hostile and unlucky requests get errors that name the problem") {
  test::Server server({"--max-body", "4096", "--ctx-per-slot", "64"});
  struct Case {
    std::string body;
    int status;
    std::string says;  // in the message
  };
  const std::vector<Case> cases = {
      {"{\"prompt\": \"x\",", 400, "not valid JSON"},
      {"[1, 2]", 400, "must be a JSON object"},
      {R"({"max_tokens": 3})", 400, "prompt is required"},
      {R"({"prompt": ""})", 400, "prompt is empty"},
      {R"({"prompt": 7})", 400, "prompt must be a string or an array of token ids"},
      {R"({"prompt": [1, 999]})", 400, "prompt[1] = 999 is not a token id"},
      {R"({"prompt": [1, -2]})", 400, "prompt[1] = -2"},
      {R"({"prompt": [1, 2.5]})", 400, "prompt[1] must be a token id"},
      {R"({"prompt": ["a", "b"]})", 400, "batches of prompts are not supported"},
      {R"({"prompt": "x", "max_tokens": "ten"})", 400, "max_tokens must be an integer"},
      {R"({"prompt": "x", "max_tokens": -1})", 400, "max_tokens must be between 0"},
      {R"({"prompt": "x", "max_tokens": 64})", 400, "context is 64 tokens"},
      {json{{"prompt", std::string(65, 'a')}}.dump(), 400, "81 were requested (65 in the prompt, 16 for"},
      {R"({"prompt": "x", "temperature": 9})", 400, "temperature must be in [0"},
      {R"({"prompt": "x", "top_p": "high"})", 400, "top_p must be a number"},
      {R"({"prompt": "x", "stream": "yes"})", 400, "stream must be a boolean"},
      {R"({"prompt": "x", "logprobs": 50})", 400, "logprobs must be between 0 and 20"},
      {R"({"prompt": "x", "n": 2})", 400, "n must be between 1 and 1"},
      {R"({"prompt": "x", "n": 0})", 400, "n must be between 1 and 1"},
      {R"({"prompt": "x", "seed": 9223372036854775808.0})", 400, "seed must be between"},
      {R"({"prompt": "x", "seed": 18446744073709551615})", 400, "seed must be between"},
      {json{{"prompt", "x"}, {"stop", std::string(300, 's')}}.dump(), 400, "at most 256 bytes"},
      {R"({"prompt": "x", "stop": [1]})", 400, "stop must be a string"},
      {R"({"prompt": "x", "stop": ["a","b","c","d","e"]})", 400, "at most 4"},
      {R"({"prompt": "x", "model": 3})", 400, "model must be a string"},
      {"{\"prompt\": \"caf\xc3\x28\"}", 400, "not valid JSON"},  // invalid UTF-8
      {json{{"prompt", std::string(5000, 'a')}}.dump(), 413, "limit of 4096 bytes"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.body.substr(0, 80));
    const Reply r = post(server, c.body);
    CHECK(r.status == c.status);
    const std::string message = error_message(r);
    CAPTURE(message);
    CHECK(message.find(c.says) != std::string::npos);
  }
  // The same limit when the body comes in chunks, or as a form (what curl -d sends).
  const std::string big = json{{"prompt", std::string(5000, 'a')}}.dump();
  const Reply chunked = post(server, big, {"-H", "Transfer-Encoding: chunked"});
  CHECK(chunked.status == 413);
  CHECK(error_message(chunked).find("limit of 4096 bytes") != std::string::npos);
  test::TempDir form_dir;
  test::write_file(form_dir / "body", big);
  const Reply form = request(server.url() + "/v1/completions",
                             {"--data-binary", std::string("@").append((form_dir / "body").string())});
  CHECK(form.status == 413);
  CHECK(error_message(form).find("limit of 4096 bytes") != std::string::npos);
  // Unknown fields are ignored; the server still serves.
  const Reply ok = post(server, R"({"prompt": "And", "max_tokens": 2, "frobnicate": {"x": 1}})");
  CHECK(ok.status == 200);
  CHECK(json::parse(ok.body)["usage"]["completion_tokens"] == 2);
  const Reply missing = request(server.url() + "/v2/anything");
  CHECK(missing.status == 404);
  CHECK(error_message(missing).find("no such endpoint: GET /v2/anything") != std::string::npos);
  CHECK(request(server.url() + "/health").status == 200);

  // A model line and the metrics that counted all this.
  const json models = json::parse(request(server.url() + "/v1/models").body);
  CHECK(models["data"][0]["context_length"] == 64);
  CHECK(models["data"][0]["n_vocab"] == 256);
  const std::string metrics = request(server.url() + "/metrics").body;
  CHECK(metrics.find("gpt2vk_requests_total{endpoint=\"/v1/completions\",status=\"400\"} 26") !=
        std::string::npos);
  CHECK(metrics.find("gpt2vk_completion_tokens_total 2") != std::string::npos);
  CHECK(metrics.find("gpt2vk_time_to_first_token_seconds_count 1") != std::string::npos);
  CHECK(server.stop(SIGINT) == 0);
  CHECK(test::no_validation_messages({0, "", server.err()}));

  // Options the server refuses to start with.
  const test::CliResult parallel =
      test::gpt2vk({"serve", "--parallel", "2", "--device", "cpu", "--port", "0"});
  CHECK(parallel.exit_code == 1);
  CHECK(parallel.err.find("decoding 2 together needs a GPU") != std::string::npos);
  const test::CliResult ctx = test::gpt2vk({"serve", "--ctx-per-slot", "999", "--port", "0"});
  CHECK(ctx.exit_code == 1);
  CHECK(ctx.err.find("longer than the model's context of 256") != std::string::npos);
}

// A test hook: each engine step waits this long, so that a request of 250 tokens takes over a
// second whatever the machine, and a test's clients surely act while it runs.
const test::Env kSlowSteps = {{"GPT2VK_SERVE_STEP_DELAY_MS", "5"}};

TEST_CASE("serve: a client that leaves frees the engine; SIGTERM finishes the stream in flight") {
  test::Server server({}, kSlowSteps);
  const json long_stream = {{"prompt", "And"}, {"max_tokens", 250}, {"stream", true}, {"temperature", 0}};
  test::TempDir dir;
  test::write_file(dir / "body", long_stream.dump());
  const std::string curl = "curl -sN -H 'Content-Type: application/json' --data-binary @" +
                           (dir / "body").string() + " " + server.url() + "/v1/completions";
  // `head` leaves after the first bytes; curl's next write fails, and the connection closes.
  const test::CliResult gone = test::run({"sh", "-c", curl + " | head -c 40"});
  CHECK(gone.out.size() == 40);
  // The engine drops the request at its next tokens, well before 250.
  std::smatch m;
  std::string err;
  for (int i = 0; i < 200; i++) {
    err = server.err();
    if (std::regex_search(err, m, std::regex(R"(client gone: request dropped after (\d+) of 250)"))) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  REQUIRE(m.size() == 2);
  CHECK(std::stoi(m[1]) < 250);

  // A stream in flight when SIGTERM comes runs to its end; then the server exits 0. A stream
  // still queued behind it is refused with a 503 of its own, before any event (a proxy retries
  // that on another replica), not a 200 whose stream holds the error.
  const std::string out = (dir / "stream").string(), queued = (dir / "queued").string();
  test::write_file(out, "");
  int code = -1;
  {
    std::jthread client([&] { test::run({"sh", "-c", curl + " > " + out}); });
    for (int i = 0; i < 400 && test::read_file(out).find("data: ") == std::string::npos; i++)
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    std::jthread waiting([&] { test::run({"sh", "-c", curl + " -D " + queued + ".h > " + queued}); });
    for (int i = 0; i < 400 && request(server.url() + "/metrics").body.find("gpt2vk_queue_length 1") ==
                                   std::string::npos; i++)
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    code = server.stop(SIGTERM);
  }
  CHECK(code == 0);
  CHECK(test::read_file(queued + ".h").find("HTTP/1.1 503") == 0);
  CHECK(test::read_file(queued).find("the server is shutting down") != std::string::npos);
  CHECK(test::read_file(queued).find("data: ") == std::string::npos);
  json last;
  const auto [text, done] = stream_text(test::read_file(out), &last);
  CHECK(done);
  CHECK(last["choices"][0]["finish_reason"] == "length");
  CHECK(last["usage"]["completion_tokens"] == 250);
  CHECK(server.err().find("SIGTERM: finishing the requests in flight") != std::string::npos);
  CHECK(test::no_validation_messages({0, "", server.err()}));
}

TEST_CASE("serve: a full queue, an API key, and a lost device") {
  {  // One running, one waiting, the rest refused with Retry-After.
    test::Server server({"--max-queue", "1"}, kSlowSteps);
    test::TempDir dir;
    test::write_file(dir / "body", json{{"prompt", "And"}, {"max_tokens", 250}, {"temperature", 0},
                                        {"stream", true}}.dump());
    const std::string curl = "curl -s -H 'Content-Type: application/json' --data-binary @" +
                             (dir / "body").string() + " " + server.url() + "/v1/completions";
    // The first, streamed, until its first token shows it is running (the queue empty again).
    const std::string first = (dir / "first").string();
    test::write_file(first, "");
    {
      std::jthread running([&] { test::run({"sh", "-c", curl + " > " + first}); });
      for (int i = 0; i < 1200 && test::read_file(first).find("data: ") == std::string::npos; i++)
        std::this_thread::sleep_for(std::chrono::milliseconds(25));
      // Seven more at once while it runs (over a second: 250 steps of at least 5 ms): the first
      // of them waits, and the queue is full for the rest.
      test::run({"sh", "-c", "for i in 1 2 3 4 5 6 7; do " + curl + " -o /dev/null -D " +
                                 (dir / "h").string() + "$i & done; wait"});
    }
    CHECK(stream_text(test::read_file(first)).second);  // the first finished, [DONE]
    int ok = 0, busy = 0;
    for (int i = 1; i <= 7; i++) {
      const std::string h = test::read_file(dir / std::string("h").append(std::to_string(i)));
      CAPTURE(h);
      if (h.find("HTTP/1.1 200") == 0) ok++;
      if (h.find("HTTP/1.1 503") == 0) {
        busy++;
        CHECK(std::regex_search(h, std::regex("Retry-After: [1-9]")));
      }
    }
    CHECK(ok >= 1);
    CHECK(busy >= 1);
    CHECK(ok + busy == 7);
  }
  {  // The key on everything but /health.
    test::Server server({"--api-key", "s3cret"});
    const Reply none = post(server, R"({"prompt": "And", "max_tokens": 1})");
    CHECK(none.status == 401);
    CHECK(error_message(none).find("API key") != std::string::npos);
    CHECK(post(server, R"({"prompt": "And", "max_tokens": 1})", {"-H", "Authorization: Bearer wrong"}).status == 401);
    CHECK(post(server, R"({"prompt": "And", "max_tokens": 1})", {"-H", "Authorization: Bearer s3cret"}).status == 200);
    CHECK(request(server.url() + "/metrics").status == 401);
    CHECK(request(server.url() + "/health").status == 200);
  }
  {  // The device lost mid-request (the test hook loses it at the N-th fence wait): 503 for the
     // request and /health, with the reason; the server goes on answering. Starting waits for
     // the uploads and the warm-up pass, as many times as the device needs (a discrete GPU's
     // staging copies wait more often than lavapipe's mapped memory): the smallest N at which
     // the server still starts is the first wait of the first request.
    std::unique_ptr<test::Server> started;
    for (int n = 1; n <= 64 && !started; n++) {
      try {
        started = std::make_unique<test::Server>(
            std::vector<std::string>{}, test::Env{{"GPT2VK_LOSE_DEVICE_AT_WAIT", std::to_string(n)}});
      } catch (const std::runtime_error& e) {
        REQUIRE(std::string(e.what()).find("VK_ERROR_DEVICE_LOST") != std::string::npos);
      }
    }
    REQUIRE(started);
    test::Server& server = *started;
    CHECK(request(server.url() + "/health").status == 200);
    const Reply r = post(server, R"({"prompt": "And", "max_tokens": 8})");
    CHECK(r.status == 503);
    CHECK(error_message(r).find("the GPU failed") != std::string::npos);
    const Reply health = request(server.url() + "/health");
    CHECK(health.status == 503);
    CHECK(json::parse(health.body)["status"] == "error");
    CHECK(json::parse(health.body)["reason"].get<std::string>().find("lost") != std::string::npos);
    const Reply again = post(server, R"({"prompt": "And", "max_tokens": 8})");
    CHECK(again.status == 503);
    CHECK(error_message(again).find("cannot generate any more") != std::string::npos);
    CHECK(server.stop(SIGTERM) == 0);
  }
}

TEST_CASE("serve --parallel 8: each request gets the same tokens and log-probabilities as alone") {
  // Eight prompts of different lengths (one longer than a prefill chunk, so it joins over
  // several steps), greedy with logprobs (half of them with penalties, which count each
  // request's own tokens), each sent alone and then all at once: the same text
  // and the same log-probabilities to the last bit (JSON carries doubles exactly), at fp32 and
  // fp16, under both kernel sets.
  std::vector<std::string> prompts = {"In the beginning", "And the LORD spake unto Moses",
                                      "Blessed", "Thou shalt not", "And it came to pass",
                                      "The heavens declare", "Behold, I", ""};
  for (int i = 0; i < 9; i++) prompts.back() += "And God said, ";  // 126 tokens
  test::TempDir dir;
  for (const char* precision : {"f32", "f16"})
    for (const char* kernels : {"gpu", "cpu"}) {
      CAPTURE(precision);
      CAPTURE(kernels);
      test::Server server({"--parallel", "8", "--precision", precision, "--kernels", kernels},
                          kSlowSteps);  // so the eight surely overlap, however slow the machine
      std::vector<std::string> bodies;
      for (size_t i = 0; i < prompts.size(); i++) {
        const std::string file = (dir / std::string("b").append(std::to_string(i))).string();
        json body = {{"prompt", prompts[i]}, {"max_tokens", 40}, {"temperature", 0},
                     {"logprobs", 2}};
        // Half of them with penalties: each counts its own tokens, whatever decodes beside it.
        if (i % 2)
          body.update({{"repeat_penalty", 1.3}, {"presence_penalty", 0.5},
                       {"frequency_penalty", 0.2}});
        test::write_file(file, body.dump());
        bodies.push_back(file);
      }
      auto curl = [&](size_t i) {
        return "curl -sS -H 'Content-Type: application/json' --data-binary @" + bodies[i] + " " +
               server.url() + "/v1/completions > " + bodies[i] + ".out";
      };
      std::vector<json> alone, together;
      for (size_t i = 0; i < prompts.size(); i++) {
        REQUIRE(test::run({"sh", "-c", curl(i)}).exit_code == 0);
        alone.push_back(json::parse(test::read_file(bodies[i] + ".out"))["choices"][0]);
      }
      // Decode passes and rows so far, from /metrics.
      auto decoded = [&] {
        const std::string m = request(server.url() + "/metrics").body;
        std::smatch passes, rows;
        REQUIRE(std::regex_search(m, passes, std::regex(R"(gpt2vk_decode_passes_total (\d+))")));
        REQUIRE(std::regex_search(m, rows, std::regex(R"(gpt2vk_decode_rows_total (\d+))")));
        return std::make_pair(std::stod(passes[1]), std::stod(rows[1]));
      };
      const auto before = decoded();
      CHECK(before.second == before.first);  // alone: one row per pass
      std::string all;
      for (size_t i = 0; i < prompts.size(); i++) all += curl(i) + " & ";
      REQUIRE(test::run({"sh", "-c", all + "wait"}).exit_code == 0);
      // Together: the passes decoded several requests at once (8 x 39 tokens in far fewer).
      const auto after = decoded();
      CHECK((after.second - before.second) / (after.first - before.first) > 2);
      for (size_t i = 0; i < prompts.size(); i++) {
        CAPTURE(prompts[i]);
        together.push_back(json::parse(test::read_file(bodies[i] + ".out"))["choices"][0]);
        CHECK(together[i]["text"] == alone[i]["text"]);
        CHECK(together[i]["logprobs"] == alone[i]["logprobs"]);
        CHECK(alone[i]["logprobs"]["tokens"].size() == 40);
      }
      CHECK(server.stop(SIGTERM) == 0);
      CHECK(test::no_validation_messages({0, "", server.err()}));
    }
}
