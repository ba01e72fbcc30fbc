// libFuzzer target: a /v1/completions body (apps/serve/request.h parse_completion) on arbitrary
// bytes, for GPT-2's tokenizer and a 1,024-token context. A refusal must be an ApiError with a
// 4xx status, a one-line message of bounded length (never an echo of the body) and an error
// object that is valid JSON; an accepted request must hold a prompt of ids in range that fits
// the context with its max_tokens, and stops and logprobs within their bounds. Any other
// exception, a crash (deep nesting once ran out of stack) or a sanitizer report is a finding.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "apps/serve/request.h"
#include "fuzz/check.h"
#include "model/formats/config.h"
#include "model/text/tokenizer.h"

namespace {

constexpr uint32_t kContext = 1024;

const model::Config& config() {
  static const model::Config c = [] {
    model::Config g = model::gpt2_config(768, 12, 12);  // GPT-2 small: 50,257 tokens
    g.n_ctx = kContext;
    return g;
  }();
  return c;
}

const model::Tokenizer& tokenizer() {
  static const std::unique_ptr<model::Tokenizer> t =
      model::load_tokenizer(GPT2VK_SOURCE_DIR "/data/gpt2", config().tokenizer);
  return *t;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string body(reinterpret_cast<const char*>(data), size);
  app::CompletionRequest r;
  try {
    r = app::parse_completion(body, tokenizer(), config(), kContext);
  } catch (const app::ApiError& e) {
    const std::string what = e.what();
    FUZZ_CHECK(e.status >= 400 && e.status < 500);
    FUZZ_CHECK(what.find('\n') == std::string::npos);
    FUZZ_CHECK(what.size() < 600);  // a short prefix of a value at most, never the body
    FUZZ_CHECK(nlohmann::json::parse(e.body()).contains("error"));
    return 0;
  }
  FUZZ_CHECK(!r.prompt.empty());
  for (int32_t id : r.prompt) FUZZ_CHECK(id >= 0 && uint32_t(id) < config().n_vocab);
  FUZZ_CHECK(uint64_t{r.prompt.size()} + r.max_tokens <= kContext);
  FUZZ_CHECK(r.stop.size() <= app::kMaxStops);
  for (const std::string& s : r.stop) FUZZ_CHECK(!s.empty() && s.size() <= app::kMaxStopBytes);
  FUZZ_CHECK(!r.logprobs || *r.logprobs <= app::kMaxLogprobs);
  FUZZ_CHECK(r.sampling.temperature >= 0.0f && r.sampling.temperature <= 2.0f);
  return 0;
}
