// gpt2vk serve's /v1/chat/completions from outside: curl and the official openai client (npm)
// against a server on a free loopback port, each reply checked against `gpt2vk generate --temp
// 0` on the conversation rendered by the documented template (docs/chat.md), every refusal
// against OpenAI's error object and the field it names.
#include <doctest/doctest.h>
#include <signal.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/ci.h"
#include "tests/chat_fixture.h"
#include "tests/cli.h"
#include "tests/files.h"
#include "tests/process.h"

namespace {

using json = nlohmann::json;

test::HttpReply chat(const test::Server& s, const json& body) {
  return test::post(s.url() + "/v1/chat/completions", body.dump());
}

// A streamed answer's chunks (the JSON of each "data: " line but [DONE]), and whether [DONE]
// came last.
std::pair<std::vector<json>, bool> chunks(const std::string& body) {
  std::vector<json> out;
  bool done = false;
  for (const std::string& data : test::sse_data(body)) {
    done = data == "[DONE]";
    if (!done) out.push_back(json::parse(data));
  }
  return {out, done};
}

bool have_openai_client() {
  const bool ci = test::in_ci();
  const bool there =
      test::on_path("node") &&
      std::filesystem::exists(test::source_dir() / "tests/node/node_modules/openai/package.json");
  if (!there) {
    if (ci)
      FAIL_CHECK("node or the openai npm client is missing: run scripts/setup.sh --tests");
    else
      MESSAGE(
          "SKIPPED: node or the openai npm client is missing (scripts/setup.sh --tests installs "
          "them)");
  }
  return there;
}

// The conversation `messages` (rendered as `rendered`) asked of `server` with curl, whole and
// streamed, and with the openai client: each time the reply generate gives, ending as it does.
void check_replies(const test::Server& server, const std::string& model, const json& messages,
                   const std::string& rendered, int n) {
  const std::string continuation = test::generated(model, rendered, n);
  const std::string expected = test::reply_of(continuation);
  const bool stops = continuation.find("\nUser:") != std::string::npos;
  const std::string finish = stops ? "stop" : "length";
  CAPTURE(rendered);
  CAPTURE(expected);

  const json greedy = {{"messages", messages}, {"max_tokens", n}, {"temperature", 0}};
  const test::HttpReply whole = chat(server, greedy);
  REQUIRE(whole.status == 200);
  const json w = json::parse(whole.body);
  CHECK(w["object"] == "chat.completion");
  CHECK(w["id"].get<std::string>().rfind("chatcmpl-", 0) == 0);
  CHECK(w["choices"][0]["message"]["role"] == "assistant");
  CHECK(w["choices"][0]["message"]["content"] == expected);
  CHECK(w["choices"][0]["finish_reason"] == finish);
  CHECK(w["usage"]["prompt_tokens"] == rendered.size());  // a byte-level model
  if (!stops) CHECK(w["usage"]["completion_tokens"] == n);

  json streamed = greedy;
  streamed["stream"] = true;
  const auto [parts, done] = chunks(chat(server, streamed).body);
  CHECK(done);
  REQUIRE(parts.size() >= 2);
  CHECK(parts[0]["choices"][0]["delta"]["role"] == "assistant");
  std::string text;
  for (size_t i = 0; i < parts.size(); i++) {
    CAPTURE(parts[i].dump());
    CHECK(parts[i]["object"] == "chat.completion.chunk");
    CHECK(parts[i]["id"] == parts[0]["id"]);
    CHECK(parts[i]["choices"][0]["finish_reason"] ==
          (i + 1 < parts.size() ? json(nullptr) : json(finish)));
    text += parts[i]["choices"][0]["delta"].value("content", "");
  }
  CHECK(text == expected);

  if (!have_openai_client()) return;
  const json cfg = {{"base_url", server.url()}, {"messages", messages}, {"max_tokens", n}};
  const test::CliResult r =
      test::run({"node", (test::source_dir() / "tests/node/openai_chat.mjs").string(), cfg.dump()});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const json o = json::parse(r.out);
  CHECK(o["object"] == "chat.completion");
  CHECK(o["role"] == "assistant");
  CHECK(o["content"] == expected);
  CHECK(o["finish_reason"] == finish);
  CHECK(o["streamed"] == expected);
  CHECK(o["roles"] == json::array({"assistant"}));
  CHECK(o["finish_reasons"] == json::array({finish}));
  for (const json& object : o["chunk_objects"]) CHECK(object == "chat.completion.chunk");
  CHECK(o["newer_tokens"].get<int>() <= 3);
  CHECK(o["error"]["api_error"] == true);
  CHECK(o["error"]["status"] == 400);
  CHECK(o["error"]["param"] == "messages[0].role");
  CHECK(o["error"]["message"].get<std::string>().find("this server has no tools") !=
        std::string::npos);
}

}  // namespace

TEST_CASE("serve: chat replies equal generate's on the rendered conversation") {
  REQUIRE(test::on_path("curl"));
  test::Server server({});
  // A system text, a finished turn, and a question in two text parts.
  const json messages =
      json::array({{{"role", "system"}, {"content", "The words of the book."}},
                   {{"role", "user"}, {"content", "In the beginning"}},
                   {{"role", "assistant"}, {"content", "God created"}},
                   {{"role", "user"},
                    {"content", json::array({{{"type", "text"}, {"text", "And God "}},
                                             {{"type", "text"}, {"text", "said"}}})}}});
  const std::string rendered = test::render_chat(
      "The words of the book.", {{"In the beginning", "God created"}}, "And God said");
  check_replies(server, "", messages, rendered, 16);

  // Without max_tokens: what the context leaves (a "developer" message is a system one).
  const json developer = json::array(
      {{{"role", "developer"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Amen"}}});
  const test::HttpReply rest = chat(server, {{"messages", developer}, {"temperature", 0}});
  REQUIRE(rest.status == 200);
  const json r = json::parse(rest.body);
  const std::string rest_prompt = test::render_chat("Be brief.", {}, "Amen");
  CHECK(r["usage"]["prompt_tokens"] == rest_prompt.size());
  if (r["choices"][0]["finish_reason"] == "length") CHECK(r["usage"]["total_tokens"] == 256);
  CHECK(server.stop(SIGTERM) == 0);
  CHECK(test::no_validation_messages({0, "", server.err()}));
}

TEST_CASE("serve: the end of turn stops a chat reply") {
  test::TempDir dir;
  const std::string model = test::chat_model(dir.path()).string();
  const std::string rendered = test::render_chat("", {}, "light");
  // The tuned model ends its reply (else this test checks nothing).
  REQUIRE(test::generated(model, rendered, 40).find("\nUser:") != std::string::npos);
  test::Server server({"-m", model});
  check_replies(server, model, json::array({{{"role", "user"}, {"content", "light"}}}), rendered,
                40);
  CHECK(server.stop(SIGTERM) == 0);
}

TEST_CASE("serve: bad chat requests get 400s naming the field") {
  test::Server server({"--ctx-per-slot", "64"});
  const json hi = json::array({{{"role", "user"}, {"content", "hi"}}});  // 19 tokens rendered
  auto with = [&](json body) {
    if (!body.contains("messages")) body["messages"] = hi;
    return body;
  };
  auto content = [](json c) {
    return json{{"messages", json::array({{{"role", "user"}, {"content", c}}})}};
  };
  struct Case {
    json body;
    std::string param, says;
  };
  const std::vector<Case> cases = {
      {json::object(), "messages", "messages is required"},
      {{{"messages", "hi"}},
       "messages",
       "messages must be an array of {\"role\", \"content\"}, got a string"},
      {{{"messages", json::array()}}, "messages", "messages is empty"},
      {{{"messages", {1}}}, "messages[0]", "messages[0]: must be an object"},
      {{{"messages", json::array({{{"content", "x"}}})}},
       "messages[0].role",
       "messages[0].role: is required"},
      {{{"messages", json::array({hi[0], {{"role", "robot"}, {"content", "x"}}})}},
       "messages[1].role",
       "must be system, user, assistant or developer, got \"robot\""},
      {{{"messages", json::array({{{"role", "user"}}})}},
       "messages[0].content",
       "messages[0].content: is required"},
      {content(5), "messages[0].content",
       "must be a string or an array of text parts, got an integer"},
      {content({"x"}), "messages[0].content[0]", "must be an object"},
      {content({{{"type", "image_url"}, {"image_url", {{"url", "x"}}}}}),
       "messages[0].content[0].type", "only text parts are supported, got \"image_url\""},
      {content({{{"type", "text"}}}), "messages[0].content[0].text",
       "must be a string, got nothing"},
      {content(std::string(60, 'a')), "messages", "shorten the messages"},
      {with({{"max_tokens", 60}}), "max_tokens", "79 were requested (19 in the prompt, 60 for"},
      {with({{"max_completion_tokens", 60}}), "max_completion_tokens",
       "lower max_completion_tokens"},
      {with({{"max_tokens", -1}}), "max_tokens", "max_tokens must be between 0"},
      {with({{"n", 2}}), "n", "n must be between 1 and 1"},
      {with({{"logprobs", true}}), "logprobs", "logprobs is not supported on /v1/chat/completions"},
      {with({{"temperature", 3}}), "temperature", "temperature must be in [0"},
      {with({{"stop", {1}}}), "stop", "stop must be a string"},
      {with({{"stream", "yes"}}), "stream", "stream must be a boolean"},
      {with({{"model", 3}}), "model", "model must be a string"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.body.dump());
    const test::HttpReply r = chat(server, c.body);
    CHECK(r.status == 400);
    const json e = json::parse(r.body)["error"];
    CHECK(e["type"] == "invalid_request_error");
    CHECK(e["param"] == c.param);
    CHECK_MESSAGE(e["message"].get<std::string>().find(c.says) != std::string::npos, e["message"]);
  }
  const test::HttpReply broken =
      test::post(server.url() + "/v1/chat/completions", "{\"messages\": [");
  CHECK(broken.status == 400);
  CHECK(broken.body.find("not valid JSON") != std::string::npos);

  // Unknown fields are ignored; max_tokens defaults to what the context leaves.
  const test::HttpReply ok = chat(server, with({{"temperature", 0}, {"tools", json::array()}}));
  REQUIRE(ok.status == 200);
  const json o = json::parse(ok.body);
  if (o["choices"][0]["finish_reason"] == "length")
    CHECK(o["usage"]["completion_tokens"] == 64 - 19);
  const std::string metrics = test::get(server.url() + "/metrics").body;
  CHECK(metrics.find("gpt2vk_requests_total{endpoint=\"/v1/chat/completions\",status=\"400\"} " +
                     std::to_string(cases.size() + 1)) != std::string::npos);
  CHECK(metrics.find("gpt2vk_requests_total{endpoint=\"/v1/chat/completions\",status=\"200\"} 1") !=
        std::string::npos);
  CHECK(server.stop(SIGINT) == 0);
  CHECK(test::no_validation_messages({0, "", server.err()}));
}
