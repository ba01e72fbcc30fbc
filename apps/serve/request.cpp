#include "apps/serve/request.h"

#include <cfloat>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

namespace app {

using json = nlohmann::json;

ApiError::ApiError(int http_status, const std::string& message, std::string field_name,
                   std::string error_code)
    : std::runtime_error(message),
      status(http_status),
      param(std::move(field_name)),
      code(std::move(error_code)) {}

std::string ApiError::type() const {
  switch (status) {
    case 401: return "authentication_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503: return "service_unavailable";
    default: return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

std::string ApiError::body() const {
  json e = {{"message", what()}, {"type", type()}, {"param", nullptr}, {"code", nullptr}};
  if (!param.empty()) e["param"] = param;
  if (!code.empty()) e["code"] = code;
  return json{{"error", e}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

namespace {

ApiError bad(const std::string& param, const std::string& message) {
  return ApiError(400, message, param);
}

// The JSON type a client sent, for messages ("got a string").
std::string type_of(const json& v) {
  if (v.is_number_integer()) return "an integer";
  if (v.is_number()) return "a number";
  return std::string(v.is_string() ? "a string" : v.is_boolean() ? "a boolean"
                     : v.is_array() ? "an array" : v.is_object() ? "an object" : "null");
}

// A client's value in a message: scalars as JSON cut to 40 bytes, arrays and objects by their type
// alone, so that no error echoes more than a short prefix of what was sent.
std::string shown(const json& v) {
  if (v.is_structured()) return type_of(v);
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  return s.size() > 40 ? s.substr(0, 40) + "..." : s;
}

// An optional field: absent or null is nullptr; otherwise it must pass `ok` ("must be ...").
const json* field(const json& body, const char* name) {
  auto it = body.find(name);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

}  // namespace

bool get_bool(const json& body, const char* name, bool fallback) {
  const json* v = field(body, name);
  if (!v) return fallback;
  if (!v->is_boolean()) throw bad(name, std::string(name) + " must be a boolean, got " + type_of(*v));
  return v->get<bool>();
}

double get_number(const json& body, const char* name, double fallback, double lo, double hi) {
  const json* v = field(body, name);
  if (!v) return fallback;
  if (!v->is_number())
    throw bad(name, std::string(name) + " must be a number, got " + type_of(*v));
  const double x = v->get<double>();
  if (!(x >= lo && x <= hi))
    throw bad(name, std::string(name) + " must be in [" + json(lo).dump() + ", " + json(hi).dump() +
                        "], got " + shown(*v));
  return x;
}

// An integer field in [lo, hi]; 2.0 counts as 2, 2.5 does not.
int64_t get_integer(const json& body, const char* name, int64_t fallback, int64_t lo, int64_t hi) {
  const json* v = field(body, name);
  if (!v) return fallback;
  if (!v->is_number() || (v->is_number_float() && std::floor(v->get<double>()) != v->get<double>()))
    throw bad(name, std::string(name) + " must be an integer, got " + type_of(*v) + " " + shown(*v));
  // A float must be below 2^63 to convert (double(INT64_MAX) rounds up to 2^63).
  const bool out =
      v->is_number_float()
          ? !(v->get<double>() >= double(lo) && v->get<double>() <= double(hi) &&
              v->get<double>() < 0x1p63)
      : v->is_number_unsigned()
          ? v->get<uint64_t>() > uint64_t(hi) || (lo > 0 && v->get<uint64_t>() < uint64_t(lo))
          : v->get<int64_t>() < lo || v->get<int64_t>() > hi;
  if (out)
    throw bad(name, std::string(name) + " must be between " + std::to_string(lo) + " and " +
                        std::to_string(hi) + ", got " + shown(*v));
  return v->is_number_float() ? static_cast<int64_t>(v->get<double>()) : v->get<int64_t>();
}

namespace {

void read_prompt(const json& body, const model::Tokenizer& tokenizer, const model::Config& c,
                 CompletionRequest& r) {
  const json* p = field(body, "prompt");
  if (!p) throw bad("prompt", "prompt is required: a string or an array of token ids");
  const json* text = p->is_string() ? p : nullptr;
  if (p->is_array() && p->size() == 1 && (*p)[0].is_string()) text = &(*p)[0];
  if (text) {
    r.prompt_text = text->get<std::string>();
    try {
      r.prompt = tokenizer.encode(r.prompt_text);
    } catch (const std::exception& e) {
      throw bad("prompt", std::string("prompt cannot be tokenized: ") + e.what());
    }
  } else if (p->is_array()) {
    for (size_t i = 0; i < p->size(); i++) {
      const json& id = (*p)[i];
      if (id.is_string() || id.is_array())
        throw bad("prompt", "prompt: batches of prompts are not supported; send one string or "
                            "one array of token ids per request");
      if (!id.is_number_integer())
        throw bad("prompt", "prompt[" + std::to_string(i) + "] must be a token id (an integer), got " +
                                type_of(id));
      const bool in_range = id.is_number_unsigned() ? id.get<uint64_t>() < c.n_vocab
                                                    : id.get<int64_t>() >= 0 && id.get<int64_t>() < c.n_vocab;
      if (!in_range)
        throw bad("prompt", "prompt[" + std::to_string(i) + "] = " + shown(id) +
                                " is not a token id of this model (0 to " +
                                std::to_string(c.n_vocab - 1) + ")");
      r.prompt.push_back(id.get<int32_t>());
    }
    r.prompt_text = tokenizer.decode(r.prompt);  // invalid UTF-8 as U+FFFD
  } else {
    throw bad("prompt", "prompt must be a string or an array of token ids, got " + type_of(*p));
  }
  if (r.prompt.empty()) throw bad("prompt", "prompt is empty: nothing to continue");
}

}  // namespace

std::string json_type(const nlohmann::json& v) { return type_of(v); }

nlohmann::json parse_body(const std::string& body) {
  json j;
  try {
    // A nesting bound while parsing: nlohmann parses without recursion, but copying and
    // printing a value recurse, and 60,000 nested arrays in a 120 KB body ran out of stack.
    j = json::parse(body, [](int depth, json::parse_event_t, json&) {
      if (depth > kMaxJsonDepth)
        throw ApiError(400, "the request body nests arrays or objects more than " +
                                std::to_string(kMaxJsonDepth) + " deep");
      return true;
    });
  } catch (const json::exception& e) {
    // nlohmann's message names the byte and what was expected (invalid UTF-8 lands here too),
    // or a number out of range (1e400): the client's fault either way, cut short.
    std::string what = e.what();
    if (what.size() > 200) what = what.substr(0, 200) + "...";
    throw ApiError(400, "the request body is not valid JSON: " + what);
  }
  if (!j.is_object())
    throw ApiError(400, "the request body must be a JSON object, got " + type_of(j));
  return j;
}

void read_sampling(const json& j, const model::Config& config, CompletionRequest& r) {
  if (const json* m = field(j, "model"); m && !m->is_string())
    throw bad("model", "model must be a string, got " + type_of(*m));
  if (get_integer(j, "n", 1, 1, 1) != 1) throw bad("n", "n must be 1");
  r.sampling.temperature = static_cast<float>(get_number(j, "temperature", 1.0, 0.0, 2.0));
  r.sampling.top_p = static_cast<float>(get_number(j, "top_p", 1.0, 0.0, 1.0));
  if (r.sampling.top_p == 0) r.sampling.top_p = 1e-9f;  // OpenAI accepts 0: only the best token
  r.sampling.top_k = static_cast<uint32_t>(get_integer(j, "top_k", 0, 0, config.n_vocab));
  // OpenAI's penalties (over the completion's tokens), and llama.cpp-server's repeat penalty
  // (over the last repeat_last_n of prompt and completion; -1: all of them, 0: none).
  r.sampling.presence_penalty =
      static_cast<float>(get_number(j, "presence_penalty", 0.0, -2.0, 2.0));
  r.sampling.frequency_penalty =
      static_cast<float>(get_number(j, "frequency_penalty", 0.0, -2.0, 2.0));
  const double repeat = get_number(j, "repeat_penalty", 1.0, -DBL_MAX, DBL_MAX);
  if (!(repeat > 0) || repeat > double{FLT_MAX})
    throw bad("repeat_penalty", "repeat_penalty must be a number greater than 0, got " +
                                    shown(j["repeat_penalty"]));
  r.sampling.repeat_penalty = static_cast<float>(repeat);
  r.sampling.repeat_last_n =
      static_cast<int32_t>(get_integer(j, "repeat_last_n", 64, -1, INT32_MAX));
  if (field(j, "seed")) {
    r.seed_given = true;
    r.sampling.seed = static_cast<uint64_t>(
        get_integer(j, "seed", 0, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()));
  }
  if (const json* s = field(j, "stop")) {
    std::vector<json> stops = s->is_array() ? s->get<std::vector<json>>() : std::vector<json>{*s};
    if (stops.size() > kMaxStops)
      throw bad("stop", "stop takes at most " + std::to_string(kMaxStops) + " strings, got " +
                            std::to_string(stops.size()));
    for (const json& one : stops) {
      if (!one.is_string()) throw bad("stop", "stop must be a string or an array of strings, got " + type_of(one));
      if (one.get<std::string>().size() > kMaxStopBytes)
        throw bad("stop", "a stop string may be at most " + std::to_string(kMaxStopBytes) +
                              " bytes long");
      if (!one.get<std::string>().empty()) r.stop.push_back(one.get<std::string>());
    }
  }
  r.stream = get_bool(j, "stream", false);
  r.cache_prompt = get_bool(j, "cache_prompt", true);
}

void check_context(const CompletionRequest& r, uint32_t context, const std::string& prompt_field,
                   const std::string& max_field) {
  const uint64_t need = uint64_t{r.prompt.size()} + r.max_tokens;
  if (need > context)
    throw ApiError(400,
                   "this server's context is " + std::to_string(context) + " tokens per request, "
                   "but " + std::to_string(need) + " were requested (" +
                   std::to_string(r.prompt.size()) + " in the prompt, " +
                   std::to_string(r.max_tokens) + " for the completion); shorten the " +
                   prompt_field + " or lower " + max_field,
                   r.prompt.size() > context ? prompt_field : max_field, "context_length_exceeded");
}

CompletionRequest parse_completion(const std::string& body, const model::Tokenizer& tokenizer,
                                   const model::Config& config, uint32_t context) {
  const json j = parse_body(body);

  CompletionRequest r;
  read_sampling(j, config, r);
  read_prompt(j, tokenizer, config, r);
  r.max_tokens = static_cast<uint32_t>(get_integer(j, "max_tokens", 16, 0, 1 << 30));
  r.echo = get_bool(j, "echo", false);
  if (field(j, "logprobs"))
    r.logprobs = static_cast<uint32_t>(get_integer(j, "logprobs", 0, 0, kMaxLogprobs));
  check_context(r, context, "prompt", "max_tokens");
  return r;
}

}  // namespace app
