// libFuzzer target: the tokenizers (model/text/tokenizer.h) on arbitrary bytes. The first byte picks
// what the rest is:
//   0  text for GPT-2's BPE (data/gpt2)    1  text for the bytes tokenizer
//   2  GPT-2 token ids, uint16 each        3  GPT-2 token ids, int32 each (any value)
//   4  bytes for Utf8Stream, pushed in pieces whose sizes come from the bytes themselves
// Properties: encode() throws exactly for invalid UTF-8 and is undone by decode(); decode()
// throws exactly for an id out of range and always gives valid UTF-8; Utf8Stream, however the
// bytes are cut, gives what sanitize_utf8 gives for them whole.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz/check.h"
#include "model/text/tokenizer.h"
#include "model/text/utf8.h"

namespace {

const model::Tokenizer& gpt2() {
  static const auto tok =
      model::load_tokenizer(GPT2VK_SOURCE_DIR "/data/gpt2", {model::TokenizerKind::Gpt2, {}});
  return *tok;
}

const model::Tokenizer& bytes() {
  static const auto tok = model::load_tokenizer("", {model::TokenizerKind::Bytes, {}});
  return *tok;
}

void encode(const model::Tokenizer& tok, std::string_view text) {
  const std::optional<size_t> invalid = model::find_invalid_utf8(text);
  std::vector<int32_t> ids;
  try {
    ids = tok.encode(text);
  } catch (const std::runtime_error& e) {
    FUZZ_CHECK(invalid);
    FUZZ_CHECK(std::string_view(e.what()).starts_with("invalid UTF-8 at byte offset " +
                                                      std::to_string(*invalid)));
    return;
  }
  FUZZ_CHECK(!invalid);
  for (const int32_t id : ids) FUZZ_CHECK(id >= 0 && static_cast<uint32_t>(id) < tok.vocab_size());
  FUZZ_CHECK(tok.decode(ids) == text);  // byte-level tokenizers lose nothing
}

// The stream, fed each token's bytes as generation does, agrees with decode().
void decode(const model::Tokenizer& tok, const std::vector<int32_t>& ids) {
  bool in_range = true;
  for (const int32_t id : ids) in_range &= id >= 0 && static_cast<uint32_t>(id) < tok.vocab_size();
  std::string text;
  try {
    text = tok.decode(ids);
  } catch (const std::runtime_error& e) {
    FUZZ_CHECK(!in_range);
    FUZZ_CHECK(std::string_view(e.what()).starts_with("token id "));
    return;
  }
  FUZZ_CHECK(in_range);
  FUZZ_CHECK(!model::find_invalid_utf8(text));
  model::Utf8Stream stream;
  std::string streamed;
  for (const int32_t id : ids) streamed += stream.push(tok.token_bytes(id));
  streamed += stream.finish();
  FUZZ_CHECK(streamed == text);
}

template <class T>
std::vector<int32_t> read_ids(std::string_view b) {
  std::vector<int32_t> ids(b.size() / sizeof(T));
  for (size_t i = 0; i < ids.size(); ++i) {
    T v;
    std::memcpy(&v, b.data() + i * sizeof(T), sizeof(T));  // little-endian host
    ids[i] = static_cast<int32_t>(v);
  }
  return ids;
}

// Pieces of 1..8 bytes, their sizes taken from the low bits of the bytes they start at.
void stream(std::string_view b) {
  model::Utf8Stream s;
  std::string out;
  for (size_t i = 0; i < b.size();) {
    const size_t n = std::min<size_t>(b.size() - i, (static_cast<uint8_t>(b[i]) & 7u) + 1);
    out += s.push(b.substr(i, n));
    i += n;
  }
  out += s.finish();
  FUZZ_CHECK(out == model::sanitize_utf8(b));
  FUZZ_CHECK(!model::find_invalid_utf8(out));
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  gpt2();  // loading the vocabulary is not part of any one input
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 5) {
    case 0:
      encode(gpt2(), rest);
      break;
    case 1:
      encode(bytes(), rest);
      break;
    case 2:
      decode(gpt2(), read_ids<uint16_t>(rest));
      break;
    case 3:
      decode(gpt2(), read_ids<int32_t>(rest));
      break;
    default:
      stream(rest);
  }
  return 0;
}
