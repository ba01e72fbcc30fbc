// BERT's WordPiece tokenizer, as Hugging Face's BertTokenizer (the tokenizers crate's
// BertNormalizer, BertPreTokenizer, WordPiece model and [CLS]/[SEP] template): special tokens cut
// out of the raw text first, the rest normalised and split into words (bert_normalizer.h), each
// word greedily matched longest-first against the vocabulary with "##" before continuations.
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "model/text/bert_normalizer.h"

namespace model {

struct WordPieceOptions {
  BertNormalizerOptions normalizer;
  std::string unk = "[UNK]", cls = "[CLS]", sep = "[SEP]", pad = "[PAD]", mask = "[MASK]";
  // Tokens kept whole wherever they occur in the raw text (as the crate's added tokens: matched
  // before normalisation, leftmost then longest). The five above are always among them.
  std::vector<std::string> never_split;
  std::string prefix = "##";             // before a piece that continues a word
  size_t max_input_chars_per_word = 100;  // a longer word is [UNK]
};

// One model input: [CLS] A [SEP], or [CLS] A [SEP] B [SEP].
struct WordPieceEncoding {
  std::vector<int32_t> ids;       // [n]
  std::vector<int32_t> type_ids;  // [n]: 0 through the first [SEP], 1 for B and its [SEP]
  size_t truncated = 0;           // tokens of A and B that max_length dropped; 0 when none
};

class WordPiece {
 public:
  // vocab[id] is the token's text. `where` names the source in messages. Throws when the unk,
  // cls or sep token is not in the vocabulary. A token listed twice keeps its last id, as both of
  // Hugging Face's loaders do.
  WordPiece(std::vector<std::string> vocab, WordPieceOptions options, const std::string& where);

  // The WordPiece ids of `text`, without [CLS]/[SEP]. Throws std::runtime_error naming the byte
  // offset for invalid UTF-8.
  std::vector<int32_t> tokenize(std::string_view text) const;

  // max_length counts the special tokens too; 0 means no limit. Tokens are cut from the end. A
  // pair is cut longest-first the crate's way: the longer text gives way first, and when both
  // are longer than half the room the shorter keeps floor(room/2) tokens and the longer the rest
  // (on a tie A counts as the shorter). "Longer" compares the texts' first max_length tokens
  // rounded up to the end of a word, as the crate reads no further. Throws std::invalid_argument if
  // max_length cannot hold the special tokens.
  WordPieceEncoding encode(std::string_view a, size_t max_length = 0) const;
  WordPieceEncoding encode(std::string_view a, std::string_view b, size_t max_length = 0) const;

  size_t size() const { return vocab_.size(); }
  const std::string& token(int32_t id) const;  // throws for an id out of range
  std::optional<int32_t> find(std::string_view token) const;
  int32_t unk() const { return unk_; }
  int32_t cls() const { return cls_; }
  int32_t sep() const { return sep_; }
  std::optional<int32_t> pad() const { return find(options_.pad); }
  std::optional<int32_t> mask() const { return find(options_.mask); }
  const WordPieceOptions& options() const { return options_; }

 private:
  // word_ends, when given, gets ids.size() after each word (not after special tokens).
  std::vector<int32_t> tokenize(std::string_view text, std::vector<size_t>* word_ends) const;
  void add_word(std::vector<int32_t>& ids, std::u32string_view word) const;
  void add_segment(std::vector<int32_t>& ids, std::string_view text,
                   std::vector<size_t>* word_ends) const;

  std::vector<std::string> vocab_;
  std::unordered_map<std::string, int32_t> ids_;
  WordPieceOptions options_;
  std::vector<std::pair<std::string, int32_t>> whole_;  // kept-whole tokens in the vocabulary
  int32_t unk_ = 0, cls_ = 0, sep_ = 0;
};

// From a model folder: vocab.txt (a token a line, id = line number) with tokenizer_config.json
// (optional: do_lower_case, strip_accents, tokenize_chinese_chars, the special tokens,
// never_split), or, without vocab.txt, tokenizer.json whose model is WordPiece (its normalizer
// BertNormalizer; tokenizer_config.json still names the special tokens). Errors name the file
// and the problem.
std::unique_ptr<WordPiece> load_wordpiece(const std::filesystem::path& dir);

}  // namespace model
