// CPU reference of shaders/attention.comp.
#pragma once
#include <cstddef>

#include "model/ops/types.h"


namespace model::cpu {

// Multi-head scaled dot-product attention, as gpu::attention: T queries at positions L-T .. L-1
// against the first L cache rows, head h in columns h*D .. h*D+D-1, D = C / H. probs, where
// given, gets the softmax weights as gpu::AttentionOptions::probs (the attention tap). bias,
// required iff options.bias_span != 0, is T5's relative position bias (AttentionSpec::bias_span):
// head h's score of key j from the query at position p gains bias[h * bias_span + R + j - p].
// Throws std::invalid_argument for an even bias_span, R < L - 1 or a missing table.
//                      q [T, q_stride], k_cache [>= L, C], v_cache [>= L, C], bias [H, bias_span]
//                      -> out [T, C], probs [H, T, L]
void attention(float* out, const float* q, size_t q_stride, const float* k_cache,
               const float* v_cache, size_t T, size_t L, size_t C, size_t H,
               const AttentionSpec& options = {}, float* probs = nullptr,
               const float* bias = nullptr);

// The backward of training's attention: B sequences of T tokens, each attending within itself
// (causal: token t sees 0..t), q, k and v the column blocks of the fused QKV projection. The
// softmax weights are recomputed (materialised per query, in double). A relative position
// bias (spec.bias_span != 0) has no training kernels yet: throws std::invalid_argument.
//   dout [B, T, C], qkv [B, T, 3C] -> dqkv [B, T, 3C]
void attention_backward(float* dqkv, const float* dout, const float* qkv, size_t B, size_t T,
                        size_t C, size_t H, const AttentionSpec& spec = {});

}  // namespace model::cpu
