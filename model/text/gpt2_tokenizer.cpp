// GPT-2's byte-level BPE: split out <|endoftext|>, pre-tokenize with GPT-2's pattern (PCRE2,
// UTF + UCP), then merge each pre-token's bytes (model/bpe.h), remembering repeated words.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <memory>
#include <mutex>
#include <new>
#include <stdexcept>
#include <unordered_map>

#include "model/text/bpe.h"
#include "model/text/gpt2_vocab.h"
#include "model/text/tokenizer.h"
#include "model/text/utf8.h"
#include "model/text/gpt2_tokenizer.h"

namespace model {

namespace {

// GPT-2's pattern, with \s spelled \p{White_Space}: OpenAI's encoder.py (the `regex` module)
// and tiktoken both take \s as Unicode White_Space, while PCRE2's \s in UCP mode also matches
// U+180E MONGOLIAN VOWEL SEPARATOR, which stopped being a space in Unicode 6.3.
constexpr std::string_view kPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\p{White_Space}\p{L}\p{N}]+)"
    R"(|\p{White_Space}+(?!\P{White_Space})|\p{White_Space}+)";
constexpr std::string_view kEndOfText = "<|endoftext|>";
// Words past this length are merged every time: rare, and they would bloat the cache.
constexpr size_t kMaxCachedWord = 256;
// The cache is emptied when it grows past this many words (a book has ~15k distinct words).
constexpr size_t kMaxCachedWords = 1 << 18;

struct CodeDeleter {
  void operator()(pcre2_code* p) const { pcre2_code_free(p); }
};
struct MatchDataDeleter {
  void operator()(pcre2_match_data* p) const { pcre2_match_data_free(p); }
};

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  if (pcre2_get_error_message(code, buf, sizeof buf) < 0)
    return "PCRE2 error " + std::to_string(code);
  return reinterpret_cast<const char*>(buf);
}

std::unique_ptr<pcre2_code, CodeDeleter> compile_pattern() {
  int error = 0;
  PCRE2_SIZE offset = 0;
  std::unique_ptr<pcre2_code, CodeDeleter> code(
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(kPattern.data()), kPattern.size(),
                    PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr));
  if (!code) {
    throw std::runtime_error("GPT-2 pre-tokenizer pattern: " + pcre2_message(error) +
                             " at offset " + std::to_string(offset));
  }
  // The JIT is several times faster; where it is missing (a build without it, a platform it
  // does not support) pcre2_match() runs the interpreter on the same code.
  pcre2_jit_compile(code.get(), PCRE2_JIT_COMPLETE);
  return code;
}

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

class Gpt2Tokenizer final : public Tokenizer {
 public:
  Gpt2Tokenizer(Gpt2Vocab vocab, Bpe bpe)
      : vocab_(std::move(vocab)), bpe_(std::move(bpe)), pattern_(compile_pattern()) {}

  std::vector<int32_t> encode(std::string_view text) const override {
    check_utf8(text);
    std::vector<int32_t> ids;
    ids.reserve(text.size() / 4);
    // Match data per call, so that encode() can run on several threads at once.
    std::unique_ptr<pcre2_match_data, MatchDataDeleter> match(
        pcre2_match_data_create_from_pattern(pattern_.get(), nullptr));
    if (!match) throw std::bad_alloc();
    size_t start = 0;
    if (vocab_.end_of_text) {
      for (size_t at; (at = text.find(kEndOfText, start)) != std::string_view::npos;) {
        encode_segment(text.substr(start, at - start), start, match.get(), ids);
        ids.push_back(*vocab_.end_of_text);
        start = at + kEndOfText.size();
      }
    }
    encode_segment(text.substr(start), start, match.get(), ids);
    return ids;
  }

  std::string token_bytes(int32_t id) const override {
    if (id < 0 || static_cast<size_t>(id) >= vocab_.tokens.size()) {
      throw std::runtime_error("token id " + std::to_string(id) + " is out of range [0, " +
                               std::to_string(vocab_.tokens.size()) + ")");
    }
    return vocab_.tokens[static_cast<size_t>(id)];
  }
  uint32_t vocab_size() const override { return static_cast<uint32_t>(vocab_.tokens.size()); }
  std::optional<int32_t> end_of_text() const override { return vocab_.end_of_text; }

 private:
  // Pre-tokenizes text without special tokens (valid UTF-8; `base` is its offset in the input).
  void encode_segment(std::string_view text, size_t base, pcre2_match_data* match,
                      std::vector<int32_t>& ids) const {
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    size_t pos = 0;
    while (pos < text.size()) {
      int rc = pcre2_match(pattern_.get(), subject, text.size(), pos, PCRE2_NO_UTF_CHECK, match,
                           nullptr);
      if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
        // The JIT backtracks on a small fixed stack; the interpreter's grows on the heap.
        rc = pcre2_match(pattern_.get(), subject, text.size(), pos,
                         PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, match, nullptr);
      }
      if (rc == PCRE2_ERROR_NOMATCH) break;
      if (rc < 0) {
        throw std::runtime_error("GPT-2 pre-tokenizer: " + pcre2_message(rc) + " at byte offset " +
                                 std::to_string(base + pos));
      }
      const PCRE2_SIZE* span = pcre2_get_ovector_pointer(match);
      size_t begin = span[0], end = span[1];
      // Every character matches one branch, so neither a gap nor an empty match can happen;
      // should one, the text still goes through whole rather than being lost or looping.
      if (begin > pos) encode_word(text.substr(pos, begin - pos), ids);
      if (end == begin) end = begin + decode_utf8(text, begin).len;
      encode_word(text.substr(begin, end - begin), ids);
      pos = end;
    }
    if (pos < text.size()) encode_word(text.substr(pos), ids);
  }

  void encode_word(std::string_view word, std::vector<int32_t>& ids) const {
    if (word.size() > kMaxCachedWord) {
      bpe_.encode(word, ids);
      return;
    }
    {
      std::lock_guard lock(cache_mutex_);
      if (auto it = cache_.find(word); it != cache_.end()) {
        ids.insert(ids.end(), it->second.begin(), it->second.end());
        return;
      }
    }
    const size_t first = ids.size();
    bpe_.encode(word, ids);
    std::lock_guard lock(cache_mutex_);
    if (cache_.size() >= kMaxCachedWords) cache_.clear();
    cache_.try_emplace(std::string(word), ids.begin() + static_cast<std::ptrdiff_t>(first),
                       ids.end());
  }

  Gpt2Vocab vocab_;
  Bpe bpe_;
  std::unique_ptr<pcre2_code, CodeDeleter> pattern_;
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> cache_;
};

}  // namespace

std::unique_ptr<Tokenizer> make_gpt2_tokenizer(std::string_view vocab_json,
                                               std::string_view merges_txt,
                                               const std::string& vocab_file,
                                               const std::string& merges_file) {
  Gpt2Vocab vocab = parse_gpt2_vocab(vocab_json, vocab_file);
  Bpe bpe = parse_gpt2_merges(merges_txt, vocab, merges_file, vocab_file);
  return std::make_unique<Gpt2Tokenizer>(std::move(vocab), std::move(bpe));
}

}  // namespace model
