// CPU reference of shaders/attention.comp.
#pragma once
#include <cstddef>
#include <cstdint>

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

// Training's forward attention over B whole sequences laid out as `rows` says (SequenceRows:
// self-attention, causal or not, or cross-attention over a source): what cpu::attention computes
// for each sequence with its S keys and values as caches. The reference of
// gpu::attention_sequences. A relative position bias (spec.bias_span != 0) has no training
// kernels yet: throws std::invalid_argument, as for causal attention with S != T. key_lens, where
// given (not causal), holds each sequence's keys, 1..S: a padded batch, whose sequence b's
// queries see only its first key_lens[b] keys.
//   q [B, T, q_stride], k and v [B, S, kv_stride], key_lens [B] -> out [B, T, C]
void attention_sequences(float* out, const float* q, const float* k, const float* v,
                         const SequenceRows& rows, const AttentionSpec& spec = {},
                         const uint32_t* key_lens = nullptr);

// Its backward: the softmax weights recomputed (materialised per query, in double). dq, dk and
// dv lie as q, k and v do and may be views of one buffer (self-attention's dqkv): each of their
// elements in q's, k's and v's columns is written once; keys past a sequence's key_lens get 0.
//   dout [B, T, C], q, k, v, key_lens as above -> dq [B, T, q_stride], dk and dv [B, S, kv_stride]
void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q,
                        const float* k, const float* v, const SequenceRows& rows,
                        const AttentionSpec& spec = {}, const uint32_t* key_lens = nullptr);

}  // namespace model::cpu
