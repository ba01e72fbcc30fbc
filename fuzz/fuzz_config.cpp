// libFuzzer target: config.json (model/formats/config.h parse_config) on arbitrary bytes. What it
// accepts must survive the round trip through config_json, keep the sizes the engine computes
// from it in range, and, for the "chars" tokenizer, give a tokenizer that takes its own list.
// A std::runtime_error naming the source is the one acceptable failure.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz/check.h"
#include "model/formats/checkpoint.h"
#include "model/formats/config.h"
#include "model/text/tokenizer.h"

namespace {

constexpr const char* kSource = "fuzz/config.json";

// parameter_count() is documented to stay below 2^50 for any config parse_config accepts
// (byte counts of every dtype then fit in 64 bits): recount without overflow and compare.
void check_sizes(const model::Config& c) {
  uint64_t total = 0;
  for (const model::ExpectedTensor& t : model::expected_tensors(c)) {
    uint64_t e = 1;
    for (const uint64_t d : t.shape) FUZZ_CHECK(!__builtin_mul_overflow(e, d, &e));
    FUZZ_CHECK(!__builtin_add_overflow(total, e, &total));
  }
  FUZZ_CHECK(total < (uint64_t{1} << 50));
  FUZZ_CHECK(model::parameter_count(c) == total);
  FUZZ_CHECK(c.n_head > 0 && c.attn_width() % c.n_head == 0 && c.head_dim() > 0);
}

// The character tokenizer a config asks for encodes its own characters as 0..n-1 and decodes
// them back.
void check_chars(const model::Config& c) {
  const auto tok = model::load_tokenizer("fuzz", c.tokenizer);
  FUZZ_CHECK(tok->vocab_size() == c.n_vocab);
  std::string all;
  for (const std::string& ch : c.tokenizer.chars) all += ch;
  const std::vector<int32_t> ids = tok->encode(all);
  FUZZ_CHECK(ids.size() == c.tokenizer.chars.size());
  for (size_t i = 0; i < ids.size(); ++i) FUZZ_CHECK(ids[i] == static_cast<int32_t>(i));
  FUZZ_CHECK(tok->decode(ids) == all);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  model::Config c;
  try {
    c = model::parse_config(text, kSource);
  } catch (const std::runtime_error& e) {
    fuzz::check_message(e, kSource);
    return 0;
  }
  FUZZ_CHECK(model::parse_config(model::config_json(c), "round trip") == c);
  check_sizes(c);
  if (c.tokenizer.kind == model::TokenizerKind::Chars) check_chars(c);
  return 0;
}
