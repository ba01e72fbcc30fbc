// Training's attention: shaders/attention_sequences{,_texel}.comp (the forward over whole
// sequences) and attention_backward{,_texel}.comp (its backward).
#pragma once
#include <cstdint>

#include "model/ops/gpu/common.h"

namespace model::gpu {

// Training's forward: attention over B whole sequences laid out as `rows` says (SequenceRows:
// self-attention within each sequence, causal or not, q, k and v the fused QKV projection; or
// cross-attention of T queries over a source's S keys and values), one dispatch for all of them.
// What cpu::attention_sequences computes. The head dim D = C / H is at most
// push::ATTENTION_BACKWARD_MAX_D (128); q, k and v must each fit one binding. Where the policy
// asks for texel attention (and D % 4 == 0, every span texel-aligned), the texel kernel runs, as
// for attention_backward. q, k and v may be one span (self-attention's qkv). key_lens, where
// given (not causal), holds each sequence's keys, 1..S (a padded batch: the rest is padding);
// the host uploads and checks them.
//   q [B, T, q_stride], k and v [B, S, kv_stride], key_lens [B] uint32 -> out [B, T, C]
struct AttentionSequencesArgs {
  vk::BufferSpan out;  // [B, T, C]
  vk::BufferSpan q, k, v;
  const vk::BufferSpan* key_lens = nullptr;  // [B] uint32; null: every sequence's S keys
  SequenceRows rows;
  AttentionSpec spec;
};
void attention_sequences(const Ops& ops, vk::Recorder& rec, const AttentionSequencesArgs& a);

// The backward of training's attention, as cpu::attention_backward. Two dispatches (a pass per
// query for dq, then a pass per key for dk and dv), the softmax weights recomputed in both; every
// output has one writer and a fixed order of sums. stats is scratch of
// attention_backward_stats_bytes(B, T, H). The same limits and key_lens as attention_sequences
// (keys past a sequence's key_lens get dk = dv = 0); dq, dk and dv lie as q, k and v do, and may
// be one span (self-attention's dqkv).
//   dout [B, T, C], q [B, T, q_stride], k and v [B, S, kv_stride] -> dq, dk, dv
uint64_t attention_backward_stats_bytes(uint32_t B, uint32_t T, uint32_t H);
struct AttentionBackwardArgs {
  vk::BufferSpan dq, dk, dv;
  vk::BufferSpan stats;  // scratch: attention_backward_stats_bytes(B, T, H)
  vk::BufferSpan dout;   // [B, T, C]
  vk::BufferSpan q, k, v;
  const vk::BufferSpan* key_lens = nullptr;  // [B] uint32; null: every sequence's S keys
  SequenceRows rows;
  AttentionSpec spec;
};
void attention_backward(const Ops& ops, vk::Recorder& rec, const AttentionBackwardArgs& a);

}  // namespace model::gpu
