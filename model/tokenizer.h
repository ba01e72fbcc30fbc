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

#include "model/config.h"

namespace model {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // Throws std::runtime_error naming the byte offset for invalid UTF-8, and for a character the
  // vocabulary cannot express (Chars).
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  // The raw bytes of one token (may be part of a UTF-8 character). Throws for an id out of range.
  virtual std::string token_bytes(int32_t id) const = 0;
  virtual uint32_t vocab_size() const = 0;
  virtual std::optional<int32_t> end_of_text() const { return std::nullopt; }
  // Joins the tokens' bytes; invalid UTF-8 becomes U+FFFD, as GPT-2's decoder (errors="replace").
  std::string decode(std::span<const int32_t> ids) const;
};

// Builds the tokenizer a model's config asks for; Gpt2 reads dir/vocab.json and dir/merges.txt.
// Errors name the file and the key or line (Chars: dir/config.json and the index in "chars").
std::unique_ptr<Tokenizer> load_tokenizer(const std::filesystem::path& dir,
                                          const TokenizerSpec& spec);

// GPT-2's tokenizer from the contents of vocab.json and merges.txt; the names are for messages.
// Thread-safe: encode() may run on several threads at once (the word cache is locked).
std::unique_ptr<Tokenizer> make_gpt2_tokenizer(std::string_view vocab_json,
                                               std::string_view merges_txt,
                                               const std::string& vocab_file,
                                               const std::string& merges_file);

// Streams generated tokens' bytes to a terminal without ever splitting a UTF-8 character:
// push() returns the complete characters so far (invalid sequences as U+FFFD), finish() the rest.
class Utf8Stream {
 public:
  std::string push(std::string_view bytes);
  std::string finish();

 private:
  std::string pending_;
};

// Replaces every invalid UTF-8 sequence with U+FFFD (one per maximal invalid subpart, as Python's
// bytes.decode(errors="replace") does).
std::string sanitize_utf8(std::string_view bytes);
// The byte offset of the first invalid UTF-8 sequence, or nullopt when the text is valid.
std::optional<size_t> find_invalid_utf8(std::string_view bytes);

}  // namespace model
