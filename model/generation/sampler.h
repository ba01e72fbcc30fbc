// Choosing the next token from a position's logits: greedy, or llama.cpp's default chain
// top-k -> top-p -> temperature -> a seeded draw.
#pragma once
#include <cstdint>

#include "model/forward/model.h"

namespace model {

struct SamplerOptions {
  float temperature = 0.8f;  // 0: greedy
  uint32_t top_k = 40;       // 0: no top-k cut (the GPU then returns all V logits)
  float top_p = 0.95f;       // 1: no nucleus cut
  uint64_t seed = 0;
};

class Sampler {
 public:
  explicit Sampler(const SamplerOptions& options);
  // How many candidates to ask Model::next for: 1 when greedy, top_k when it is small enough
  // for the GPU's top-k, otherwise 0 (all logits).
  uint32_t candidates(uint32_t n_vocab) const;
  // Picks a token from what Model::next returned for candidates().
  int32_t pick(const Candidates& c);

 private:
  double uniform();  // [0, 1), from the seeded generator; the same on every platform
  SamplerOptions o_;
  uint64_t state_;
};

}  // namespace model
