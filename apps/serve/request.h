// `gpt2vk serve`'s side of OpenAI's completions API: a request body checked field by field into
// what the engine runs, and the error object every refusal answers with.
#pragma once
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/formats/config.h"
#include "model/generation/sampler.h"
#include "model/generation/stop_strings.h"
#include "model/text/tokenizer.h"

namespace app {

// A refusal: the HTTP status and OpenAI's error object ({"error": {"message", "type", "param",
// "code"}}); `param` names the field at fault, where one is.
struct ApiError : std::runtime_error {
  ApiError(int http_status, const std::string& message, std::string field_name = "",
           std::string error_code = "");
  int status;
  std::string param, code;
  uint32_t retry_after = 0;  // seconds, for a 503 the client may retry (Retry-After)
  std::string type() const;  // invalid_request_error, authentication_error, server_error, ...
  std::string body() const;  // the JSON error object
};

struct CompletionRequest {
  std::vector<int32_t> prompt;  // token ids, never empty
  std::string prompt_text;      // as given, or the ids decoded (what echo returns)
  uint32_t max_tokens = 16;     // OpenAI's default
  // OpenAI's defaults: temperature 1, no cuts, no penalties (repeat_last_n 64, llama.cpp's).
  model::SamplerOptions sampling{1.0f, 0, 1.0f, 0};
  bool seed_given = false;
  std::vector<std::string> stop;  // up to 4, none empty
  bool stream = false;
  std::optional<uint32_t> logprobs;  // the top-N alternatives per token (0..kMaxLogprobs)
  bool echo = false;                 // the prompt first in the text (and its logprobs)
  bool cache_prompt = true;          // llama.cpp's: false takes none of the prompt from a cache
};

inline constexpr uint32_t kMaxLogprobs = 20;
inline constexpr size_t kMaxStops = model::StopStrings::kMax;
inline constexpr size_t kMaxStopBytes = 256;
inline constexpr int kMaxJsonDepth = 32;  // arrays and objects nested in a body (OpenAI's need 3)

// A request body as a JSON object, nested at most kMaxJsonDepth deep; throws ApiError (400)
// saying what is wrong with it.
nlohmann::json parse_body(const std::string& body);
// The JSON type a client sent, for messages ("a string", "an array").
std::string json_type(const nlohmann::json& v);

// Optional fields of a body, absent or null giving `fallback`; otherwise a value of the wrong
// type or out of range is an ApiError (400) naming the field. An integer may be written 2.0.
bool get_bool(const nlohmann::json& body, const char* name, bool fallback);
double get_number(const nlohmann::json& body, const char* name, double fallback, double lo, double hi);
int64_t get_integer(const nlohmann::json& body, const char* name, int64_t fallback, int64_t lo,
                    int64_t hi);

// The fields /v1/completions and /v1/chat/completions share, into `r`: model, n (must be 1),
// temperature, top_p, top_k, seed, stop, stream, cache_prompt. A sampling field added here
// applies to both.
void read_sampling(const nlohmann::json& body, const model::Config& config, CompletionRequest& r);

// Throws ApiError 400 (context_length_exceeded) unless r's prompt plus max_tokens fit `context`;
// `param` is prompt_field where the prompt alone is over, else max_field.
void check_context(const CompletionRequest& r, uint32_t context, const std::string& prompt_field,
                   const std::string& max_field);

// Parses and checks a /v1/completions body for a slot of `context` tokens: the prompt (a string,
// or an array of token ids, or an array of one string), and that it plus max_tokens fits.
// Unknown fields are ignored. Throws ApiError (400) naming the field and the problem.
CompletionRequest parse_completion(const std::string& body, const model::Tokenizer& tokenizer,
                                   const model::Config& config, uint32_t context);

}  // namespace app
