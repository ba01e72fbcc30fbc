// Text <-> token ids. GPT-2's byte-level BPE, raw bytes, or a character list, chosen by the
// model's config (TokenizerSpec).
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "model/formats/config.h"

namespace model {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // Throws std::runtime_error naming the byte offset for invalid UTF-8, and for a character the
  // vocabulary cannot express (Chars).
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  // The raw bytes of one token (may be part of a UTF-8 character). Throws for an id out of range.
  virtual std::string token_bytes(int32_t id) const = 0;
  // The bytes of an id a model of `model_vocab` rows chose. A model's vocabulary may be padded
  // past its tokenizer's (llm.c's GPT-2: 50,304 rows for 50,257 tokens): such an id has no text,
  // as Hugging Face's fast tokenizers decode it, rather than an error after a long run. Throws
  // for an id past model_vocab.
  std::string generated_bytes(int32_t id, uint32_t model_vocab) const;
  virtual uint32_t vocab_size() const = 0;
  virtual std::optional<int32_t> end_of_text() const { return std::nullopt; }
  // Joins the tokens' bytes; invalid UTF-8 becomes U+FFFD, as GPT-2's decoder (errors="replace").
  // Virtual for SentencePiece, whose detokenizer is more than the joined pieces (the first
  // word's space dropped, special tokens left out).
  virtual std::string decode(std::span<const int32_t> ids) const;
  // decode of ids a model of `model_vocab` rows generated: the ids generated_bytes gives no text
  // (a padded vocabulary's, past the tokenizer's; t5-small has 32,128 rows for 32,100 ids) left
  // out. Throws for an id past model_vocab.
  std::string decode_generated(std::span<const int32_t> ids, uint32_t model_vocab) const;
};

// A tokenizer file's bytes (every tokenizer reads its files through this). Throws
// std::runtime_error "<file>: no such file", ": cannot open" or ": read failed".
std::string read_tokenizer_file(const std::filesystem::path& file);

// Builds the tokenizer a model's config asks for; Gpt2 reads dir/vocab.json and dir/merges.txt.
// Errors name the file and the key or line (Chars: dir/config.json and the index in "chars").
std::unique_ptr<Tokenizer> load_tokenizer(const std::filesystem::path& dir,
                                          const TokenizerSpec& spec);

}  // namespace model
