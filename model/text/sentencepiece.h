// SentencePiece tokenizers as Hugging Face's T5Tokenizer and MarianTokenizer use them: Google's
// SentencePiece processor splits the text, this class adds what the transformers tokenizers put
// around it (special tokens cut out of the raw text whole, </s> appended, T5's sentinel ids,
// Marian's vocab.json between pieces and ids, special tokens left out of decoded text).
//
//   T5      dir/spiece.model. Ids are the model's own; T5's <extra_id_0>..<extra_id_{n-1}> follow
//           the n_pieces ids backwards: <extra_id_k> is id n_pieces + n - 1 - k (transformers'
//           tokenization_t5.py: vocab_size - k - 1), n from tokenizer_config.json's "extra_ids"
//           (100 without it).
//   Marian  dir/source.spm or dir/target.spm (the side), and dir/vocab.json: text -> pieces by the
//           side's model -> ids by vocab.json (a piece it lacks is <unk>); a ">>xx<<" language
//           code at the start of a text is one piece, as MarianTokenizer's remove_language_code.
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "model/text/tokenizer.h"

namespace model {

enum class SpmFlavor { T5, Marian };
// Marian's source and target text have a model each (same ids through vocab.json); T5 has one.
enum class SpmSide { Source, Target };

class SentencePieceTokenizer final : public Tokenizer {
 public:
  struct State;  // the processor and the id tables (sentencepiece.cpp)
  explicit SentencePieceTokenizer(std::unique_ptr<State> state);
  ~SentencePieceTokenizer() override;

  // The ids of `text` then </s>, as the transformers tokenizer's encode (legacy T5 behaviour: the
  // text between two special tokens is encoded on its own). Throws std::runtime_error naming
  // the byte offset for invalid UTF-8.
  std::vector<int32_t> encode(std::string_view text) const override;
  // One token as a stream of text shows it: "▁" as a space, a byte-fallback piece <0xNN> as its
  // byte, a T5 sentinel as "<extra_id_k>", and nothing for </s>, <pad> and <unk> (which decode
  // leaves out). Throws for an id out of range.
  std::string token_bytes(int32_t id) const override;
  // The text as the transformers tokenizer's decode(ids, skip_special_tokens=True), except that
  // T5's sentinels are kept (a span-filling answer needs them): </s>, <pad> and <unk> are left
  // out, the rest is detokenized by the SentencePiece model. Throws for an id out of range.
  std::string decode(std::span<const int32_t> ids) const override;
  uint32_t vocab_size() const override;
  std::optional<int32_t> end_of_text() const override { return eos(); }

  int32_t eos() const;
  int32_t unk() const;
  std::optional<int32_t> pad() const;  // none when the model defines no pad piece
  // The token's name: the SentencePiece piece (with "▁"), "<extra_id_k>", or vocab.json's key.
  std::string piece(int32_t id) const;
  SpmFlavor flavor() const;

 private:
  std::unique_ptr<State> state_;
};

// Loads a T5 (spiece.model) or Marian (source.spm or target.spm by `side`, and vocab.json) folder;
// T5 ignores `side`. Errors name the file and the problem: a missing file, a file SentencePiece
// cannot read as a model, a vocab.json that is not an object of distinct ids 0..n-1 or lacks
// "</s>" or "<unk>".
std::unique_ptr<SentencePieceTokenizer> load_sentencepiece(const std::filesystem::path& dir,
                                                           SpmFlavor flavor,
                                                           SpmSide side = SpmSide::Source);

}  // namespace model
