// The tokenizers of the textbook models (raw bytes, a character list) and the choice among all
// three; GPT-2's byte-level BPE is in gpt2_tokenizer.cpp.
#include "model/text/tokenizer.h"

#include <fstream>
#include <sstream>
#include <stdexcept>
#include <unordered_map>

#include "model/text/utf8.h"
#include "model/text/gpt2_tokenizer.h"

namespace model {

namespace {

std::string out_of_range(int32_t id, size_t n) {
  return "token id " + std::to_string(id) + " is out of range [0, " + std::to_string(n) + ")";
}

// "'é' (U+00E9)"; a control character by its code point alone, since printing it garbles a message.
std::string describe_char(char32_t cp) {
  if (cp < 0x20 || (cp >= 0x7F && cp < 0xA0)) return code_point_name(cp);
  std::string s = "'";
  append_utf8(s, cp);
  return s + "' (" + code_point_name(cp) + ")";
}

class BytesTokenizer final : public Tokenizer {
 public:
  std::vector<int32_t> encode(std::string_view text) const override {
    check_utf8(text);
    std::vector<int32_t> ids(text.size());
    for (size_t i = 0; i < text.size(); i++) ids[i] = static_cast<uint8_t>(text[i]);
    return ids;
  }
  std::string token_bytes(int32_t id) const override {
    if (id < 0 || id >= 256) throw std::runtime_error(out_of_range(id, 256));
    return std::string(1, static_cast<char>(static_cast<uint8_t>(id)));
  }
  uint32_t vocab_size() const override { return 256; }
};

class CharsTokenizer final : public Tokenizer {
 public:
  // `where` names the list in messages, e.g. "models/x/config.json: chars".
  CharsTokenizer(const std::vector<std::string>& chars, const std::string& where) : chars_(chars) {
    if (chars.empty()) throw std::runtime_error(where + ": the character list is empty");
    if (chars.size() > (1u << 21))
      throw std::runtime_error(where + ": more entries than Unicode has");
    for (size_t i = 0; i < chars.size(); i++) {
      const std::string at = where + "[" + std::to_string(i) + "]";
      const std::string& c = chars[i];
      const Utf8Char d = c.empty() ? Utf8Char{} : decode_utf8(c, 0);
      if (c.empty() || !d.ok || d.len != c.size()) {
        throw std::runtime_error(at + ": " +
                                 (find_invalid_utf8(c) ? "invalid UTF-8" : "\"" + c + "\"") +
                                 " is not a single character");
      }
      auto [it, fresh] = id_of_.try_emplace(d.cp, static_cast<int32_t>(i));
      if (!fresh) {
        throw std::runtime_error(at + ": " + describe_char(d.cp) + " is also entry " +
                                 std::to_string(it->second));
      }
    }
  }

  std::vector<int32_t> encode(std::string_view text) const override {
    check_utf8(text);
    std::vector<int32_t> ids;
    for (size_t i = 0; i < text.size();) {
      const Utf8Char c = decode_utf8(text, i);
      auto it = id_of_.find(c.cp);
      if (it == id_of_.end()) {
        throw std::runtime_error("character " + describe_char(c.cp) + " at byte offset " +
                                 std::to_string(i) + " is not in the model's character list");
      }
      ids.push_back(it->second);
      i += c.len;
    }
    return ids;
  }
  std::string token_bytes(int32_t id) const override {
    if (id < 0 || static_cast<size_t>(id) >= chars_.size()) {
      throw std::runtime_error(out_of_range(id, chars_.size()));
    }
    return chars_[static_cast<size_t>(id)];
  }
  uint32_t vocab_size() const override { return static_cast<uint32_t>(chars_.size()); }

 private:
  std::vector<std::string> chars_;
  std::unordered_map<char32_t, int32_t> id_of_;
};

}  // namespace

std::string read_tokenizer_file(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    throw std::runtime_error(file.string() +
                             (std::filesystem::exists(file) ? ": cannot open" : ": no such file"));
  }
  std::ostringstream s;
  s << in.rdbuf();
  if (in.bad()) throw std::runtime_error(file.string() + ": read failed");
  return std::move(s).str();
}

namespace {

// An id a padded vocabulary has past the tokenizer's: a row of the model, no token.
bool padding_id(int32_t id, uint32_t tokenizer_vocab, uint32_t model_vocab) {
  return id >= 0 && static_cast<uint32_t>(id) >= tokenizer_vocab &&
         static_cast<uint32_t>(id) < model_vocab;
}

}  // namespace

std::string Tokenizer::generated_bytes(int32_t id, uint32_t model_vocab) const {
  return padding_id(id, vocab_size(), model_vocab) ? "" : token_bytes(id);
}

std::string Tokenizer::decode_generated(std::span<const int32_t> ids, uint32_t model_vocab) const {
  std::vector<int32_t> known;
  known.reserve(ids.size());
  for (int32_t id : ids)
    if (!padding_id(id, vocab_size(), model_vocab)) known.push_back(id);  // decode checks the rest
  return decode(known);
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
  std::string bytes;
  for (int32_t id : ids) bytes += token_bytes(id);
  return sanitize_utf8(bytes);
}

std::unique_ptr<Tokenizer> load_tokenizer(const std::filesystem::path& dir,
                                          const TokenizerSpec& spec) {
  switch (spec.kind) {
    case TokenizerKind::Gpt2: {
      const std::filesystem::path vocab = dir / "vocab.json", merges = dir / "merges.txt";
      // A folder saved without its tokenizer (a bare model.save_pretrained) is the usual cause:
      // say what the file is and where a copy is, not only that it is missing.
      for (const std::filesystem::path& f : {vocab, merges})  // the first missing one
        if (!std::filesystem::exists(f))
          throw std::runtime_error(
              f.string() + ": no such file: GPT-2's tokenizer (vocab.json and merges.txt) belongs "
              "beside the weights, as Hugging Face publishes it (config.json names no other "
              "tokenizer); scripts/download_gpt2.sh fetches it, and the repository's data/gpt2 "
              "holds a copy");
      const std::string vocab_text = read_tokenizer_file(vocab);
      const std::string merges_text = read_tokenizer_file(merges);
      return make_gpt2_tokenizer(vocab_text, merges_text, vocab.string(), merges.string());
    }
    case TokenizerKind::Bytes:
      return std::make_unique<BytesTokenizer>();
    case TokenizerKind::Chars:
      return std::make_unique<CharsTokenizer>(spec.chars,
                                              (dir / "config.json").string() + ": chars");
    case TokenizerKind::WordPiece:
      throw std::runtime_error(dir.string() + ": a BERT folder: its WordPiece vocabulary is an "
                               "encoder's, which the text-generating commands do not run");
    case TokenizerKind::MarianSpm:
      throw std::runtime_error(dir.string() + ": a Marian folder: its SentencePiece models are an "
                               "encoder-decoder's; use seq2seq");
    case TokenizerKind::T5Spm:
      throw std::runtime_error(dir.string() + ": a T5 folder: its SentencePiece model is an "
                               "encoder-decoder's; use seq2seq");
  }
  throw std::runtime_error("unknown tokenizer kind");
}

}  // namespace model
