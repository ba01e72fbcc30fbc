// An encoder-decoder's training data: pairs of a source and a target, one a line, "source<TAB>
// target", each side tokenized by its own tokenizer (Marian's source.spm and target.spm), which
// appends </s> as the transformers tokenizers do. As transformers trains it: the target's ids
// (</s> included) are the labels, and the decoder's inputs are the labels shifted right behind
// decoder_start_token_id. Pairs of different lengths go in one step padded to its lengths, as
// transformers' collators pad them: sources with pad_token_id (which no query attends to, its
// attention mask), the decoder's inputs with it too, the labels with ignore_target (-100).
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
  uint32_t S = 0, T = 0;                             // the longest source and target, in tokens
  std::vector<int32_t> sources, targets;             // every pair's ids, one pair after another
  std::vector<uint64_t> source_at{0}, target_at{0};  // pair i's: [at[i], at[i + 1])
  uint64_t size() const { return source_at.size() - 1; }
  std::span<const int32_t> source(uint64_t i) const {
    return std::span(sources).subspan(source_at[i], source_at[i + 1] - source_at[i]);
  }
  std::span<const int32_t> target(uint64_t i) const {
    return std::span(targets).subspan(target_at[i], target_at[i + 1] - target_at[i]);
  }
};

using Encode = std::function<std::vector<int32_t>(std::string_view)>;

// The pairs of `text` (`file` names it in errors), one a line; empty lines are skipped. Throws
// std::runtime_error naming the line that has no tab, an empty side, or a source holding `pad`
// (the model's pad_token_id, which would read as padding).
Pairs read_pairs(const std::string& file, std::string_view text, const Encode& source,
                 const Encode& target, std::optional<int32_t> pad);

// How a step lays its pairs out: sources of S tokens and targets of T (the run's longest), the
// decoder's first input, and the pad id (none: every pair must be of S and T).
struct PairLayout {
  uint32_t S = 0, T = 0;
  int32_t decoder_start = 0;
  std::optional<int32_t> pad;
};

// Rows `rows` of pairs (indices into `pairs`) as a step's sources [rows, S], the decoder's inputs
// and its targets [rows, T], padded as above. Throws std::invalid_argument for a pair longer than
// the layout, or one that needs padding where there is no pad id.
void gather_pairs(const Pairs& pairs, const std::vector<uint64_t>& rows, const PairLayout& layout,
                  std::vector<int32_t>& sources, std::vector<int32_t>& inputs,
                  std::vector<int32_t>& targets);

// Each of the B = sources.size() / S sources' real tokens: S less its trailing `pad` ids (a
// batch's sources padded to its longest, as transformers' tokenizers pad them; its attention
// mask's ones), or S where the model has no pad token. Throws std::invalid_argument for a source
// of padding alone.
std::vector<uint32_t> source_lengths(std::span<const int32_t> sources, uint32_t S,
                                     std::optional<int32_t> pad);

// How many of the targets are not ignore_target (padding): the rows a step's mean is over.
size_t real_targets(std::span<const int32_t> targets);

}  // namespace model::training
