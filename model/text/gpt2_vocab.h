// GPT-2's vocab.json and merges.txt, parsed and validated. Both files are untrusted: every
// problem is a std::runtime_error naming the file and the key or line.
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/text/bpe.h"

namespace model {

struct Gpt2Vocab {
  std::vector<std::string> tokens;      // [V] the raw bytes of each token id
  std::array<int32_t, 256> byte_ids{};  // the token of each single byte
  std::optional<int32_t> end_of_text;   // the id of "<|endoftext|>", when the vocabulary has it
};

// vocab.json: an object of token -> id, ids unique and dense (0..n-1). Tokens are written in
// GPT-2's byte-to-unicode alphabet (every byte as one printable character, e.g. ' ' as 'Ġ');
// every single byte must have a token.
Gpt2Vocab parse_gpt2_vocab(std::string_view json_text, const std::string& file);

// merges.txt: an optional "#version" first line, then one merge per line, "left right", both
// sides and their concatenation tokens of `vocab`. Line order is rank order.
Bpe parse_gpt2_merges(std::string_view text, const Gpt2Vocab& vocab, const std::string& file,
                      const std::string& vocab_file);

// GPT-2's bytes_to_unicode(): the character that stands for byte b in vocab.json and merges.txt.
char32_t gpt2_byte_char(uint8_t b);

}  // namespace model
