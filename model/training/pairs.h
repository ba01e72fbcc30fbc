// An encoder-decoder's training data: pairs of a source and a target, one a line, "source<TAB>
// target", each side tokenized by its own tokenizer (Marian's source.spm and target.spm), which
// appends </s> as the transformers tokenizers do. As transformers trains it: the target's ids
// (</s> included) are the labels, and the decoder's inputs are the labels shifted right behind
// decoder_start_token_id.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace model::training {

struct Pairs {
  uint32_t S = 0, T = 0;         // every pair's source and target lengths, in tokens
  std::vector<int32_t> sources;  // [n, S]
  std::vector<int32_t> inputs;   // [n, T]: decoder_start, then the target's first T - 1 ids
  std::vector<int32_t> targets;  // [n, T]: the target's ids
  uint64_t size() const { return S ? sources.size() / S : 0; }
};

using Encode = std::function<std::vector<int32_t>(std::string_view)>;

// The pairs of `text` (`file` names it in errors), one a line; empty lines are skipped. A step is
// one tensor of B sources of S tokens and B targets of T, so every pair must tokenize to the
// first pair's S and T (pairs of one length: a reversal or a sort of strings of one length):
// throws std::runtime_error naming the line that has no tab, an empty side, or other lengths.
Pairs read_pairs(const std::string& file, std::string_view text, const Encode& source,
                 const Encode& target, int32_t decoder_start);

// Rows `rows` of pairs (indices into `pairs`) as a step's sources [rows, S], inputs and targets
// [rows, T].
void gather_pairs(const Pairs& pairs, const std::vector<uint64_t>& rows,
                  std::vector<int32_t>& sources, std::vector<int32_t>& inputs,
                  std::vector<int32_t>& targets);

// Each of the B = sources.size() / S sources' real tokens: S less its trailing `pad` ids (a
// batch's sources padded to its longest, as transformers' tokenizers pad them; its attention
// mask's ones), or S where the model has no pad token. Throws std::invalid_argument for a source
// of padding alone.
std::vector<uint32_t> source_lengths(std::span<const int32_t> sources, uint32_t S,
                                     std::optional<int32_t> pad);

}  // namespace model::training
