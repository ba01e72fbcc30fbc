// BERT's text preparation before WordPiece: the normaliser (clean, space out CJK ideographs,
// strip accents, lowercase) and the pre-tokeniser (split on whitespace, isolate punctuation), as
// Hugging Face's tokenizers crate defines BertNormalizer and BertPreTokenizer. The Unicode
// properties come from ICU. Text is in code points (UTF-32) so that words count characters.
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace model {

struct BertNormalizerOptions {
  bool clean_text = true;            // drop NUL, U+FFFD and controls; whitespace becomes ' '
  bool handle_chinese_chars = true;  // ' ' around every CJK ideograph
  std::optional<bool> strip_accents;  // NFD, then drop nonspacing marks; unset: as lowercase
  bool lowercase = true;
};

// The normalised text, in the crate's order: clean, CJK, accents, lowercase.
std::u32string bert_normalize(std::u32string_view text, const BertNormalizerOptions& options);

// The words of normalised text: split on whitespace (dropped), every punctuation character a
// word of its own.
std::vector<std::u32string> bert_pre_tokenize(std::u32string_view normalized);

}  // namespace model
