#include "apps/serve/chat.h"

#include <algorithm>
#include <vector>

#include "model/text/utf8.h"

namespace app {

using json = nlohmann::json;

namespace {

ApiError bad(const std::string& param, const std::string& message) {
  return ApiError(400, param + ": " + message, param);
}

// A message's content: a string, or text parts joined ({"type": "text", "text": ...}).
std::string read_content(const json& m, const std::string& at) {
  const std::string param = at + ".content";
  const auto it = m.find("content");
  if (it == m.end() || it->is_null())
    throw bad(param, "is required: a string or an array of text parts");
  if (it->is_string()) return it->get<std::string>();
  if (!it->is_array())
    throw bad(param, "must be a string or an array of text parts, got " + json_type(*it));
  std::string text;
  for (size_t i = 0; i < it->size(); i++) {
    const json& part = (*it)[i];
    const std::string p = param + "[" + std::to_string(i) + "]";
    if (!part.is_object())
      throw bad(p, "must be an object {\"type\": \"text\", \"text\": ...}, got " + json_type(part));
    const auto type = part.find("type");
    if (type == part.end() || !type->is_string()) throw bad(p + ".type", "is required: \"text\"");
    if (*type != "text")
      throw bad(p + ".type", "only text parts are supported, got \"" +
                                 model::sanitize_utf8(type->get<std::string>().substr(0, 40)) +
                                 "\"");
    const auto t = part.find("text");
    if (t == part.end() || !t->is_string())
      throw bad(p + ".text", "must be a string, got " +
                                 (t == part.end() ? std::string("nothing") : json_type(*t)));
    text += t->get<std::string>();
  }
  return text;
}

std::vector<model::ChatMessage> read_messages(const json& body) {
  const auto it = body.find("messages");
  if (it == body.end() || it->is_null())
    throw ApiError(400, "messages is required: an array of {\"role\", \"content\"}", "messages");
  if (!it->is_array())
    throw ApiError(400,
                   "messages must be an array of {\"role\", \"content\"}, got " + json_type(*it),
                   "messages");
  if (it->empty()) throw ApiError(400, "messages is empty: nothing to answer", "messages");
  std::vector<model::ChatMessage> out;
  for (size_t i = 0; i < it->size(); i++) {
    const json& m = (*it)[i];
    const std::string at = "messages[" + std::to_string(i) + "]";
    if (!m.is_object())
      throw bad(at, "must be an object {\"role\", \"content\"}, got " + json_type(m));
    const auto role = m.find("role");
    if (role == m.end() || !role->is_string())
      throw bad(at + ".role", "is required: system, user, assistant or developer");
    const std::string r = role->get<std::string>();
    model::ChatMessage message;
    if (r == "system" || r == "developer")
      message.role = model::ChatRole::System;
    else if (r == "user")
      message.role = model::ChatRole::User;
    else if (r == "assistant")
      message.role = model::ChatRole::Assistant;
    else
      throw bad(at + ".role",
                "must be system, user, assistant or developer, got \"" +
                    model::sanitize_utf8(r.substr(0, 40)) + "\"" +
                    (r == "tool" || r == "function" ? " (this server has no tools)" : ""));
    message.content = read_content(m, at);
    out.push_back(std::move(message));
  }
  return out;
}

}  // namespace

CompletionRequest parse_chat(const std::string& body, const model::Tokenizer& tokenizer,
                             const model::Config& config, uint32_t context) {
  const json j = parse_body(body);
  CompletionRequest r;
  read_sampling(j, config, r);
  // Chat's logprobs is a boolean with top_logprobs beside it; not answered here.
  if (get_bool(j, "logprobs", false))
    throw ApiError(400,
                   "logprobs is not supported on /v1/chat/completions; /v1/completions "
                   "answers it",
                   "logprobs");
  r.prompt_text = model::render_chat(read_messages(j));
  try {
    r.prompt = tokenizer.encode(r.prompt_text);
  } catch (const std::exception& e) {
    throw ApiError(400, std::string("messages cannot be tokenized: ") + e.what(), "messages");
  }
  r.stop.emplace_back(model::kChatEndOfTurn);
  // max_completion_tokens is the newer name; OpenAI's default is what the context leaves.
  const char* max_field =
      j.contains("max_completion_tokens") && !j["max_completion_tokens"].is_null()
          ? "max_completion_tokens"
          : "max_tokens";
  const int64_t left = int64_t{context} - int64_t(r.prompt.size());
  r.max_tokens =
      static_cast<uint32_t>(get_integer(j, max_field, std::max<int64_t>(left, 0), 0, 1 << 30));
  check_context(r, context, "messages", max_field);
  return r;
}

json usage(const Event& done) {
  return {{"prompt_tokens", done.prompt_tokens},
          {"completion_tokens", done.completion_tokens},
          {"total_tokens", done.prompt_tokens + done.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", done.cached_tokens}}}};
}

json chat_response(const std::string& id, std::time_t created, const std::string& model,
                   const std::string& text, const Event& done) {
  const json message = {{"role", "assistant"}, {"content", model::ChatReply().push(text)}};
  return {{"id", id},
          {"object", "chat.completion"},
          {"created", created},
          {"model", model},
          {"choices", json::array({{{"index", 0},
                                    {"message", message},
                                    {"logprobs", nullptr},
                                    {"finish_reason", done.finish_reason}}})},
          {"usage", usage(done)}};
}

json ChatStream::chunk(const json& delta, const json& finish) const {
  return {
      {"id", id_},
      {"object", "chat.completion.chunk"},
      {"created", created_},
      {"model", model_},
      {"choices",
       json::array(
           {{{"index", 0}, {"delta", delta}, {"logprobs", nullptr}, {"finish_reason", finish}}})}};
}

std::string ChatStream::events(const Event& e) {
  const auto data = [](const json& j) {
    return "data: " + j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
  };
  if (e.error) return "data: " + e.error->body() + "\n\n";
  std::string out;
  if (!begun_) {
    begun_ = true;
    out += data(chunk({{"role", "assistant"}, {"content", ""}}, nullptr));
  }
  const std::string text = reply_.push(e.text);
  if (!text.empty()) out += data(chunk({{"content", text}}, nullptr));
  if (e.done) {
    json last = chunk(json::object(), e.finish_reason);
    last["usage"] = usage(e);
    out += data(last) + "data: [DONE]\n\n";
  }
  return out;
}

}  // namespace app
