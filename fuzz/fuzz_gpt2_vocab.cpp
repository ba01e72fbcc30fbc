// libFuzzer target: GPT-2's tokenizer files, vocab.json and merges.txt (model/text/gpt2_vocab.h) on
// arbitrary bytes: the input is the vocab.json text, a NUL byte, then the merges.txt text. What
// they accept must merge a fixed text's words into ids in range whose bytes are the words again.
// The pre-tokenizer is left out (it is fuzz_tokenizer's, and compiling its pattern for every
// input would cost more than the rest). A std::runtime_error naming one of the two files is the
// one acceptable failure.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz/check.h"
#include "model/text/bpe.h"
#include "model/text/gpt2_vocab.h"

namespace {

constexpr const char* kVocab = "fuzz/vocab.json";
constexpr const char* kMerges = "fuzz/merges.txt";
// Words as GPT-2's pre-tokenizer cuts them: with a leading space, digits, punctuation, runs of
// spaces, characters of 2, 3 and 4 bytes.
constexpr std::string_view kWords[] = {"The", " cat", "'s",           " 12",    " hats",
                                       " --", "\n\n", "   ",          " naïve", " 東京",
                                       " 😀",  "!!",   "<|endoftext|>"};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string_view vocab_text = input.substr(0, nul);
  const std::string_view merges_text = nul == std::string_view::npos ? "" : input.substr(nul + 1);
  const char* reading = kVocab;
  try {
    const model::Gpt2Vocab vocab = model::parse_gpt2_vocab(vocab_text, kVocab);
    reading = kMerges;
    const model::Bpe bpe = model::parse_gpt2_merges(merges_text, vocab, kMerges, kVocab);
    for (const std::string_view word : kWords) {
      std::vector<int32_t> ids;
      bpe.encode(word, ids);
      std::string bytes;
      for (const int32_t id : ids) {
        FUZZ_CHECK(id >= 0 && static_cast<size_t>(id) < vocab.tokens.size());
        bytes += vocab.tokens[static_cast<size_t>(id)];
      }
      FUZZ_CHECK(bytes == word);
    }
  } catch (const std::runtime_error& e) {
    fuzz::check_message(e, reading);
  }
  return 0;
}
