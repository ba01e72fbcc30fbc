// `gpt2vk serve`'s request log: one line on stderr per answered request, as text
// ("gpt2vk: POST /v1/completions 200 remote=127.0.0.1:40112 prompt_tokens=12 ...") or as one
// JSON object (--log-format json), with the same field names in both.
#pragma once
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

namespace app {

enum class LogFormat { Text, Json };

// What a completion's handler learned from its engine (the last event) for the log. Times are
// milliseconds from the request's arrival at the engine; those not measured are absent.
struct CompletionFigures {
  uint64_t prompt_tokens = 0, completion_tokens = 0;
  std::optional<double> queue_ms;  // until it took a slot
  std::optional<double> ttft_ms;   // until its first new token (none when none was generated)
  double total_ms = 0;             // until its last token
  std::string finish_reason;       // "stop" or "length"
  // New tokens a second after the first: (completion_tokens - 1) over the time from the first
  // to the last; absent for fewer than two tokens.
  std::optional<double> tokens_per_s() const;
};

// An embeddings request's: its inputs and their tokens.
struct EmbeddingFigures {
  uint64_t inputs = 0, tokens = 0;
};

// One request's line: what httplib knows of it, and what its handler filled in (on the
// request's context, apps/serve/serve.cpp's Current) for the endpoints that have figures.
struct RequestRecord {
  std::string method, path;  // as received: any bytes (the path percent-decoded)
  int status = 0;
  std::string remote_addr;  // the client's address and port
  int remote_port = 0;
  std::optional<CompletionFigures> completion;
  std::optional<EmbeddingFigures> embeddings;
};

// The line, without its newline. Text: the method and path with invalid UTF-8 as U+FFFD and
// spaces, control bytes and '%' percent-encoded, so that a hostile path cannot forge a line or
// a field. JSON: an object with "ts" (`now`, ISO 8601 UTC to the millisecond) first, then
// "method", "path", "status", "remote", and the figures' fields where there are some.
std::string request_line(const RequestRecord& r, LogFormat format,
                         std::chrono::system_clock::time_point now);

}  // namespace app
