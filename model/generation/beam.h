// Beam search as Hugging Face's generate() runs it (transformers 5.x `_beam_search` with the
// no_repeat_ngram and forced-eos logits processors), for one source, independent of any model:
// the model sits behind a step callback, so a GPU model keeps every beam's caches on the device
// and reorders them by index. tools/reference/seq2seq_ref.py is the same search in PyTorch,
// checked against transformers' own output; tests/test_beam.cpp holds the two together id for id.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

namespace model {

struct BeamSettings {
  uint32_t beams = 4;  // num_beams, 1..64; 1 is greedy search, as generate() dispatches it
  // Finished hypotheses rank by sum(log p) / generated_tokens ^ length_penalty (the eos counts,
  // the start token does not). A double, as Python's float: 0.6f is not 0.6, and the penalised
  // scores must be HF's to the last bit for near ties to break the same way.
  double length_penalty = 1.0;
  // early_stopping: Heuristic (false) stops once the best running beam, at its current length,
  // cannot beat the worst of `beams` finished ones; Early (true) stops as soon as `beams` have
  // finished; Never looks at the best running beam at the longest length it could reach.
  enum class Stop { Heuristic, Early, Never };
  Stop early_stopping = Stop::Heuristic;
  uint32_t no_repeat_ngram = 0;  // no n-gram of this size twice in a beam (start included); 0 off
  uint32_t max_new_tokens = 0;   // > 0; the sequence holds at most 1 + max_new_tokens ids
  int32_t start = 0;             // decoder_start_token_id: the first id of every beam
  int32_t eos = -1;              // eos_token_id; -1: none (only the length ends a hypothesis)
  std::optional<int32_t> forced_eos;  // forced_eos_token_id: the only id allowed at the last step
};

// One decoding step of the caller's model. Before the call, beam b continues from beam
// parents[b] of the previous step (the caller reorders its per-beam state, KV caches included,
// by these indices; on the first call every beam copies the fresh state, parents all 0) and
// takes tokens[b] as its next input (the start token on the first call). The callback writes
// the raw logits of the position after it, [beams, V] row-major, into `logits` (sized for it);
// beam search applies log_softmax itself, in double.
using BeamStep = std::function<void(std::span<const uint32_t> parents, std::span<const int32_t> tokens,
                                    std::vector<float>& logits)>;

// The best hypothesis, start token first, ending at its eos or at the length limit, as HF
// returns it (without the batch's padding). Throws std::invalid_argument for settings out of
// range (beams 0 or above 64, max_new_tokens 0, 2 * beams above the vocabulary, an id outside
// it) and std::runtime_error for a step that writes the wrong size or a NaN logit.
std::vector<int32_t> beam_search(const BeamSettings& s, uint32_t vocab, const BeamStep& step);

}  // namespace model
