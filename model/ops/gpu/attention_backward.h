// Training's attention: shaders/attention_sequences{,_texel}.comp (the forward over whole
// sequences) and attention_backward{,_texel}.comp (its backward).
#pragma once
#include <cstdint>

#include "model/ops/gpu/common.h"

namespace model::gpu {

// Training's forward: attention within each of B whole sequences of T tokens (causal or not),
// q, k and v read from the fused QKV projection; one dispatch for all of them. What
// cpu::attention computes for each sequence with its keys and values as caches of T rows. The
// head dim D = C / H is at most push::ATTENTION_BACKWARD_MAX_D (128); qkv must fit one binding.
// Where the policy asks for texel attention (and D % 4 == 0, qkv texel-aligned), the texel
// kernel runs, as for attention_backward.
//   qkv [B, T, 3C] -> out [B, T, C]
struct AttentionSequencesArgs {
  vk::BufferSpan out;  // [B, T, C]
  vk::BufferSpan qkv;  // [B, T, 3C]
  uint32_t B = 0, T = 0, C = 0, H = 0;
  AttentionSpec spec;
};
void attention_sequences(const Ops& ops, vk::Recorder& rec, const AttentionSequencesArgs& a);

// The backward of training's attention, as cpu::attention_backward: B sequences of T tokens,
// each attending within itself (causal or not), q, k and v the column blocks of the fused QKV
// projection. Two dispatches (a pass per query for dq, then a pass per key for dk and dv), the
// softmax weights recomputed in both; every output has one writer and a fixed order of sums.
// stats is scratch of attention_backward_stats_bytes(). The head dim D = C / H is at most
// push::ATTENTION_BACKWARD_MAX_D (128); qkv, dout and dqkv must each fit one binding.
//   dout [B, T, C], qkv [B, T, 3C] -> dqkv [B, T, 3C]
uint64_t attention_backward_stats_bytes(uint32_t B, uint32_t T, uint32_t H);
struct AttentionBackwardArgs {
  vk::BufferSpan dqkv;   // [B, T, 3C]
  vk::BufferSpan stats;  // scratch: attention_backward_stats_bytes(B, T, H)
  vk::BufferSpan dout;   // [B, T, C]
  vk::BufferSpan qkv;    // [B, T, 3C]
  uint32_t B = 0, T = 0, C = 0, H = 0;
  AttentionSpec spec;
};
void attention_backward(const Ops& ops, vk::Recorder& rec, const AttentionBackwardArgs& a);

}  // namespace model::gpu
