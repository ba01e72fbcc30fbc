#version 450
// Training's forward attention over B whole sequences: one invocation per (sequence, head, query
// t), over the keys t sees (causal self-attention: 0..t; else all S of its sequence, a source's
// for cross-attention, or its first key_lens[b] where a batch is padded) with an online softmax, q, k and v read where they are (self-attention:
// the fused QKV projection), the output row kept in registers.
//   out[b, t, h] = sum_j softmax_j(scale q_t . k_j) v_j
// The decode and prefill kernels (attention.comp and its kin) read a KV cache instead; training
// has none, and its B sequences go in one dispatch. O(T^2 D) per head: for the short contexts a
// model trains at here. The loops over D unroll (D is a specialization constant): llvmpipe ends
// every loop of an invocation after 65,535 iterations in all, and a query at T = 1,024 would
// otherwise run 2 D T of them.
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#include "attention_backward.h"
#include "common/index.glsl"

layout(constant_id = 3) const uint D = 64;  // head dim, <= ATTENTION_BACKWARD_MAX_D

layout(binding = 0) writeonly buffer Out { float out_[]; };  // [B, T, C]
layout(binding = 1) readonly buffer Q { float q_[]; };       // [B, T, q_stride]
layout(binding = 2) readonly buffer K { float k_[]; };       // [B, S, kv_stride]
layout(binding = 3) readonly buffer V { float v_[]; };       // [B, S, kv_stride]
layout(binding = 4) readonly buffer KeyLens { uint key_lens[]; };  // [B], read if p.key_lens
layout(push_constant) uniform Push { AttentionBackwardPush p; };

void main() {
  const uint id = flat_index();
  if (id >= p.B * p.H * p.T) return;
  const uint t = id % p.T, h = id / p.T % p.H, b = id / (p.T * p.H);
  const uint col = h * D;
  const uint q = (b * p.T + t) * p.q_stride + p.q_col + col;
  const uint L = p.causal != 0 ? t + 1 : p.key_lens != 0 ? clamp(key_lens[b], 1u, p.S) : p.S;
  float acc[ATTENTION_BACKWARD_MAX_D];
  [[unroll]] for (uint i = 0; i < D; i++) acc[i] = 0.0;
  float m = uintBitsToFloat(0xff800000u), l = 0.0;  // running max and sum
  for (uint j = 0; j < L; j++) {
    const uint row = (b * p.S + j) * p.kv_stride + col, k = row + p.k_col, v = row + p.v_col;
    float s = 0.0;
    [[unroll]] for (uint i = 0; i < D; i++) s += q_[q + i] * k_[k + i];
    s *= p.scale;
    const float m_new = max(m, s), alpha = exp(m - m_new), w = exp(s - m_new);
    l = l * alpha + w;
    [[unroll]] for (uint i = 0; i < D; i++) acc[i] = acc[i] * alpha + w * v_[v + i];
    m = m_new;
  }
  const uint o = (b * p.T + t) * p.C + col;
  [[unroll]] for (uint i = 0; i < D; i++) out_[o + i] = acc[i] / l;
}
