// Choosing the next token from a position's logits: penalties on the tokens seen before, then
// greedy, or llama.cpp's default chain top-k -> top-p -> temperature -> a seeded draw (or Hugging
// Face's order: temperature -> top-k -> top-p -> the draw).
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "model/forward/model.h"

namespace model {

struct SamplerOptions {
  float temperature = 0.8f;  // 0: greedy
  uint32_t top_k = 40;       // 0: no top-k cut (the GPU then returns all V logits)
  float top_p = 0.95f;       // 1: no nucleus cut
  uint64_t seed = 0;
  // Penalties on the tokens of the History each pick is given, before any cut or the argmax.
  float repeat_penalty = 1.0f;     // llama.cpp's: logit / F where > 0, else logit * F; 1: off
  int32_t repeat_last_n = 64;      // the window recent() keeps; 0: none, -1: the whole context
  float presence_penalty = 0.0f;   // OpenAI's: logit -= F where the token occurs; -2..2
  float frequency_penalty = 0.0f;  // OpenAI's: logit -= F * its count; -2..2
  // Where the temperature applies: after top-k and top-p (llama.cpp's chain), or first (Hugging
  // Face's generate: temperature, top-k, top-p), so that top-p cuts the tempered distribution;
  // its top-k keeps the logits tied with the k-th too (where pick() is given all V logits).
  bool temperature_first = false;

  bool penalized() const {
    return repeat_penalty != 1.0f || presence_penalty != 0.0f || frequency_penalty != 0.0f;
  }
};

// The tokens the penalties look at, oldest first. generate() passes one window twice (the last
// repeat_last_n of prompt and text, as llama.cpp); the server counts only the completion's own
// tokens for presence and frequency, as OpenAI does.
struct History {
  std::span<const int32_t> repeated;  // repeat_penalty: each distinct id once
  std::span<const int32_t> counted;   // presence_penalty and frequency_penalty: by count
};

// logits [V] in place: repeat_penalty on each distinct id of h.repeated, then
// presence + frequency * count for each id of h.counted (llama.cpp's order). Throws for an id
// outside [0, V).
void penalize(std::span<float> logits, const SamplerOptions& o, const History& h);

class Sampler {
 public:
  explicit Sampler(const SamplerOptions& options);
  // How many candidates to ask Model::next for: 1 when greedy, top_k when it is small enough
  // for the GPU's top-k, otherwise 0 (all logits). With a penalty on, always 0: a penalty can
  // lift a token from outside the model's top k into it (or drop the best one below others),
  // so a top-k taken before it would be the wrong set.
  uint32_t candidates(uint32_t n_vocab) const;
  // Picks a token from what Model::next returned for candidates(), penalizing h's tokens
  // first (which needs all V logits: throws on a top-k when a penalty is on).
  int32_t pick(const Candidates& c, const History& h = {});
  // The last repeat_last_n ids of `seq` (all of the last `context` for -1, none for 0).
  std::span<const int32_t> recent(std::span<const int32_t> seq, size_t context) const;

 private:
  double uniform();  // [0, 1), from the seeded generator; the same on every platform
  SamplerOptions o_;
  uint64_t state_;
  std::vector<float> penalized_;  // [V] the logits after the penalties, reused every pick
};

}  // namespace model
